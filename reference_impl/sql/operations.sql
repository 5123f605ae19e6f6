-- D2 Kit reference scheduler: every operation that changes execution state, one function each.
-- The Python around them (worker.py, materializer.py, reaper.py) only batches calls and moves
-- results; the decisions are here, next to the schema in schema.sql.
--
--   d2_materialise   scheduler replicas: turn due fire times into occurrence rows
--                    (d2_enqueue applies the overlap policy to one fire time)
--   d2_trigger       API/CLI: a manual run now, decided by the job's overlap policy like a scheduled one
--   d2_claim         workers: take ready occurrences (and, ahead, those due within a poll), start attempts
--                    with a lease and a fencing token, one claimer per sub-pool at a time (d2_sub_pool)
--                    (d2_refresh_claim_bounds keeps where its scans start: claim_bounds in schema.sql)
--   d2_heartbeat     workers: extend leases (batched), report clock skew, learn of lost/cancelled attempts
--   d2_complete      workers: finish attempts, fenced by token (d2_settle moves the occurrence on)
--   d2_reap          scheduler replicas: expired leases -> attempt lost, occurrence retried or dead
--                    (retried only if the job's delivery is at_least_once: d2_settle)
--   d2_route_by_duration  scheduler replicas: a recurring job whose runs take long goes to the long pool
--   d2_archive       scheduler replicas: move finished executions from the queue to execution_history
--   d2_rotate_history  scheduler replicas: retention -- drop history days older than it, make the next two
--   d2_forget_jobs   scheduler replicas: retention -- delete one-shot jobs whose history is older than it
--   d2_cancel_open   API/CLI/overlap: cancel a job's unfinished occurrences cooperatively
--   d2_fenced_ledger_write   the demo job's own write path, fenced by token
--   d2_charge        the demo's non-idempotent effect: deduplicated by idempotency key, and fenced

-- Retry delay after a failed or lost attempt: exponential with full jitter, capped at 5 minutes.
CREATE OR REPLACE FUNCTION d2_backoff(p_base double precision, p_attempt integer) RETURNS interval
LANGUAGE sql VOLATILE AS $$
    SELECT make_interval(secs => random() * least(300, p_base * 2 ^ (p_attempt - 1)))
$$;

-- When an occurrence of a job reaches a terminal state, the oldest buffered (waiting) occurrence of
-- that job becomes ready, unless another occurrence of the job is still ready or running.
CREATE OR REPLACE FUNCTION d2_promote_waiting(p_job_ids bigint[]) RETURNS void
LANGUAGE sql AS $$
    UPDATE occurrences o SET state = 'ready', ready_at = greatest(o.fire_at, now())
    FROM (
        SELECT DISTINCT ON (w.job_id) w.id
        FROM occurrences w
        WHERE w.job_id = ANY (p_job_ids) AND w.finished_at IS NULL AND w.state = 'waiting'
          AND NOT EXISTS (SELECT 1 FROM occurrences b
                          WHERE b.job_id = w.job_id AND b.finished_at IS NULL AND b.state IN ('ready', 'running'))
        ORDER BY w.job_id, w.fire_at
    ) nxt
    WHERE o.id = nxt.id AND o.state = 'waiting'   -- re-checked under the row lock
$$;

-- ---------------------------------------------------------------------------------------------
-- Materialise. Called by a scheduler replica inside the transaction that holds the jobs' rows
-- (SELECT ... FOR UPDATE SKIP LOCKED in materializer.py). Fire times and misfire decisions were
-- computed in Python (croniter + policies.py); p_reasons[i] is NULL for "run it", else the reason
-- it is recorded as skipped. ON CONFLICT makes a second materialisation of the same (job, fire time)
-- a no-op, whatever happened to the replica that did the first, and each one it refused is recorded in
-- duplicate_fire_refusals (normally never: only a pass replaying a stale cursor offers a written fire time).
-- Returns how many occurrence rows were inserted.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION d2_materialise(
    p_job_ids bigint[], p_fire_ats timestamptz[], p_reasons text[],
    p_cursor_job_ids bigint[], p_materialized_through timestamptz[], p_next_fire_ats timestamptz[]
) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    f record;
    v_inserted_jobs bigint[];
    v_inserted_fire_ats timestamptz[];
    v_one_by_one integer := 0;
    v_inserted integer := 0;
BEGIN
    -- Jobs that allow overlap need no per-row decision: one set-based INSERT (the common case, and the
    -- materialiser's throughput: a row-at-a-time loop cost ~40 us a row). The rest go one by one through
    -- d2_enqueue, which applies the overlap policy.
    WITH inserted AS (
        INSERT INTO occurrences (job_id, fire_at, tenant_id, pool, state, ready_at, max_attempts, reason, finished_at)
        SELECT job_id, fire_at, tenant_id, pool, CASE WHEN reason IS NULL THEN 'ready' ELSE 'skipped' END,
               fire_at, max_attempts, reason, CASE WHEN reason IS NOT NULL THEN now() END
        FROM (SELECT i.job_id, i.fire_at, i.reason, j.tenant_id, coalesce(j.routed_pool, j.pool) AS pool,
                     j.max_attempts
                FROM unnest(p_job_ids, p_fire_ats, p_reasons) AS i (job_id, fire_at, reason)
                JOIN jobs j ON j.id = i.job_id
               WHERE j.overlap_policy = 'allow') offered
        ORDER BY job_id, fire_at
        ON CONFLICT (job_id, fire_at) DO NOTHING
        RETURNING job_id, fire_at
    )
    SELECT array_agg(job_id), array_agg(fire_at) INTO v_inserted_jobs, v_inserted_fire_ats FROM inserted;
    v_inserted := coalesce(cardinality(v_inserted_jobs), 0);

    FOR f IN
        SELECT i.job_id, i.fire_at, i.reason
        FROM unnest(p_job_ids, p_fire_ats, p_reasons) AS i (job_id, fire_at, reason)
        JOIN jobs j ON j.id = i.job_id
        WHERE j.overlap_policy <> 'allow'
        ORDER BY i.job_id, i.fire_at
    LOOP
        v_one_by_one := v_one_by_one + 1;
        IF (d2_enqueue(f.job_id, f.fire_at, f.reason, 'schedule')).id IS NOT NULL THEN
            v_inserted := v_inserted + 1;
        ELSE
            INSERT INTO duplicate_fire_refusals (job_id, fire_at) VALUES (f.job_id, f.fire_at);
        END IF;
    END LOOP;

    -- Which fire times the set-based INSERT refused is worked out only when it refused any, i.e. inserted fewer
    -- rows than it was offered (normally never: a pass pays for a count, not for a set difference).
    IF cardinality(p_job_ids) - v_one_by_one > coalesce(cardinality(v_inserted_jobs), 0) THEN
        INSERT INTO duplicate_fire_refusals (job_id, fire_at)
        SELECT i.job_id, i.fire_at
        FROM unnest(p_job_ids, p_fire_ats) AS i (job_id, fire_at) JOIN jobs j ON j.id = i.job_id
        WHERE j.overlap_policy = 'allow'
        EXCEPT ALL
        SELECT * FROM unnest(v_inserted_jobs, v_inserted_fire_ats);
    END IF;

    UPDATE jobs j SET materialized_through = c.through, next_fire_at = c.next_fire_at, schedule_error = NULL
    FROM unnest(p_cursor_job_ids, p_materialized_through, p_next_fire_ats) AS c (job_id, through, next_fire_at)
    WHERE j.id = c.job_id;
    RETURN v_inserted;
END $$;

-- ---------------------------------------------------------------------------------------------
-- Enqueue one fire time of a job, deciding by its overlap policy what to do when an earlier occurrence
-- has not finished (policies.py has the table). p_reason non-NULL: recorded skipped with that reason.
-- The caller holds the job's row lock (the materialiser's FOR UPDATE, or d2_trigger's), so two decisions
-- for one job never interleave. Returns the row as inserted -- all NULL when the fire time already had one.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION d2_enqueue(p_job_id bigint, p_fire_at timestamptz, p_reason text, p_trigger text)
RETURNS occurrences
LANGUAGE plpgsql AS $$
DECLARE
    j record;
    v_open integer;
    v_waiting integer;
    v_state text := 'ready';
    v_reason text := p_reason;
    v_row occurrences;
BEGIN
    SELECT tenant_id, coalesce(routed_pool, pool) AS pool, max_attempts, overlap_policy INTO j
      FROM jobs WHERE id = p_job_id;
    IF v_reason IS NOT NULL THEN
        v_state := 'skipped';
    ELSIF j.overlap_policy <> 'allow' THEN
        SELECT count(*) FILTER (WHERE state IN ('ready', 'running')), count(*) FILTER (WHERE state = 'waiting')
          INTO v_open, v_waiting
          FROM occurrences WHERE job_id = p_job_id AND finished_at IS NULL;
        IF v_open + v_waiting > 0 THEN
            CASE j.overlap_policy
                WHEN 'skip' THEN
                    v_state := 'skipped'; v_reason := 'overlap:skip';
                WHEN 'buffer_one' THEN
                    IF v_waiting > 0 THEN v_state := 'skipped'; v_reason := 'overlap:buffer_full';
                    ELSE v_state := 'waiting'; END IF;
                WHEN 'buffer_all' THEN
                    v_state := 'waiting';
                WHEN 'cancel_other' THEN
                    PERFORM d2_cancel_open(p_job_id, 'overlap:cancel_other');
                    v_state := 'waiting';   -- promoted when the cancelled run has finished
            END CASE;
        END IF;
    END IF;

    INSERT INTO occurrences (job_id, fire_at, tenant_id, pool, trigger, state, ready_at, max_attempts, reason,
                             finished_at)
    VALUES (p_job_id, p_fire_at, j.tenant_id, j.pool, p_trigger, v_state, p_fire_at, j.max_attempts, v_reason,
            CASE WHEN v_state = 'skipped' THEN now() END)
    ON CONFLICT (job_id, fire_at) DO NOTHING
    RETURNING * INTO v_row;
    IF v_row.id IS NOT NULL AND j.overlap_policy = 'cancel_other' AND v_state = 'waiting' THEN
        PERFORM d2_promote_waiting(ARRAY[p_job_id]);   -- nothing was running: start at once
        SELECT * INTO v_row FROM occurrences WHERE id = v_row.id;
    END IF;
    RETURN v_row;
END $$;

-- ---------------------------------------------------------------------------------------------
-- Trigger: run a job once now, outside its schedule (also when paused: asking is explicit). The manual run is
-- a fire time at this instant and the job's overlap policy decides it like any other, as Temporal's
-- TriggerImmediately does unless the call overrides the policy: with an earlier run unfinished, 'allow' runs
-- it alongside, 'skip' records it skipped (overlap:skip), 'buffer_one' queues it behind the running one (or
-- records it overlap:buffer_full when one is queued already), 'buffer_all' queues it, 'cancel_other' cancels
-- the unfinished run and starts once that has stopped. The answer says which: the occurrence as inserted.
-- Returns no row for a job that does not exist or is deleted.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION d2_trigger(p_job_id bigint) RETURNS SETOF occurrences
LANGUAGE plpgsql AS $$
DECLARE
    v_row occurrences;
BEGIN
    PERFORM 1 FROM jobs WHERE id = p_job_id AND deleted_at IS NULL FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    LOOP   -- again only if this instant is, to the microsecond, a fire time the job already has
        v_row := d2_enqueue(p_job_id, clock_timestamp(), NULL, 'manual');
        EXIT WHEN v_row.id IS NOT NULL;
    END LOOP;
    RETURN NEXT v_row;
END $$;

-- ---------------------------------------------------------------------------------------------
-- Sub-pools: a pool's tenants split by hash into pools.sub_pools parts (1 unless a pool is set to more). A claim
-- holds the lock of every sub-pool it serves -- a transaction-level advisory lock, gone at commit -- so claims of
-- one sub-pool are serial and claims of different sub-pools can run side by side. Caps stay exact because a tenant
-- lives in one sub-pool: every claim that could start one of its attempts holds the same lock.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION d2_sub_pool(p_tenant text, p_sub_pools integer) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (hashtext(p_tenant) & 2147483647) % p_sub_pools;
$$;

CREATE OR REPLACE FUNCTION d2_sub_pool_lock(p_pool text, p_sub_pools integer, p_sub integer) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT hashtext('d2_claim:' || p_pool || '/' || p_sub_pools || '/' || p_sub)::bigint;
$$;

-- Re-splitting a pool waits for every claim under the old split to commit (it takes all their locks), and a claim
-- that read the old split checks it again once it holds its lock (d2_claim): so no two claims ever serve one tenant
-- under different splits at once.
CREATE OR REPLACE FUNCTION d2_resplit_pool() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(d2_sub_pool_lock(OLD.name, OLD.sub_pools, s))
       FROM generate_series(0, OLD.sub_pools - 1) AS s;
    RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER pools_resplit BEFORE UPDATE OF sub_pools ON pools FOR EACH ROW
    WHEN (OLD.sub_pools <> NEW.sub_pools) EXECUTE FUNCTION d2_resplit_pool();

-- ---------------------------------------------------------------------------------------------
-- Claim bounds: where the claim's scans start (schema.sql says why they exist). Refreshed at most once a
-- second, and whenever a tenant has none; one sub-pool's tenants at a time.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION d2_claim_bounds_stale(p_pool text, p_sub_pools integer, p_sub integer) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN   -- plpgsql, not sql: it runs on every poll; plpgsql keeps its plan for the session, while a sql function
        -- with a subquery is not inlined and is planned again in every transaction
    RETURN EXISTS (SELECT 1 FROM tenants t LEFT JOIN claim_bounds b ON b.pool = p_pool AND b.tenant_id = t.id
                    WHERE d2_sub_pool(t.id, p_sub_pools) = p_sub
                      AND (b.refreshed_at IS NULL OR b.refreshed_at < now() - interval '1 second'));
END $$;

CREATE OR REPLACE FUNCTION d2_refresh_claim_bounds(p_pool text, p_sub_pools integer, p_sub integer) RETURNS void
LANGUAGE sql AS $$
    -- Called by d2_claim with the sub-pool's lock held, so no claim for these tenants is in flight: every token
    -- drawn for them so far is committed and counted here, and every later one is above running_token_from.
    -- (Claims of other sub-pools may hold uncommitted tokens below it; their rows are other tenants'.)
    -- The head is capped one second in the past, so a job submitted "due now" is never below it.
    INSERT INTO claim_bounds AS b (pool, tenant_id, ready_from, running_token_from, running_before, refreshed_at)
    SELECT p_pool, t.id,
           least(now() - interval '1 second',
                 (SELECT min(o.ready_at) FROM occurrences o
                   WHERE o.state = 'ready' AND o.pool = p_pool AND o.tenant_id = t.id)),
           coalesce(pg_sequence_last_value('fencing_tokens'), 0),
           (SELECT count(*) FROM occurrences o WHERE o.state = 'running' AND o.pool = p_pool AND o.tenant_id = t.id),
           now()
    FROM tenants t
    WHERE d2_sub_pool(t.id, p_sub_pools) = p_sub
    ON CONFLICT (pool, tenant_id) DO UPDATE
       SET ready_from = excluded.ready_from, running_token_from = excluded.running_token_from,
           running_before = excluded.running_before, refreshed_at = excluded.refreshed_at;
$$;

-- ---------------------------------------------------------------------------------------------
-- Claim. One claimer per sub-pool at a time (above): that makes per-tenant caps exact, for the price of
-- serialising claims within a sub-pool (the design doc, section 8, measures when that stops being cheap). A pool
-- with an admission rate serialises all its claims on its row as well, so every replica shares one bucket; it
-- dispatches no faster than that rate anyway.
-- Fairness: least running-share first -- a tenant's k-th candidate ranks by (running + k) / weight,
-- so a tenant with a huge backlog gets its share and no more. Candidates are read without locks (the pool
-- lock already keeps other claimers out); only the chosen rows are locked, with SKIP LOCKED to step around
-- rows another transaction (reaper, cancel) holds -- locking every candidate wrote a row lock for up to
-- tenants x batch rows per claim to take one batch (measured: a batch-128 claim took 33 ms instead of ~5).
-- Claim ahead: p_ahead_seconds > 0 also takes rows that come due within that window, as Quartz acquires triggers
-- up to batchTriggerAcquisitionFireAheadTimeWindow before they fire. A poller otherwise starts a row up to a whole
-- poll period late; this way the worker holds it (leased, fenced, counted against caps) and starts it at ready_at,
-- so the poll period sets how often workers ask, not how late jobs start. ready_at is returned for that wait.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION d2_claim(p_pool text, p_worker text, p_max integer, p_lease_seconds double precision,
                                    p_ahead_seconds double precision DEFAULT 0)
RETURNS TABLE (token bigint, occurrence_id bigint, job_id bigint, fire_at timestamptz, ready_at timestamptz,
               attempt integer, handler text, payload jsonb, dispatched_at timestamptz,
               lease_expires_at timestamptz)
LANGUAGE plpgsql
-- Plan the claim once per session. With 10M scheduled rows the planner's estimate for the generic plan is high,
-- so by default it planned this statement again on every call: claim p50 2.2 ms against 1.44 ms with the generic
-- plan, which is as fast as at 10k rows (1.48 ms). The indexes fix the plan's shape; the values do not change it.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_rate double precision;
    v_tokens double precision;
    v_refilled_at timestamptz;
    v_now timestamptz;
    v_allow integer;
    v_claimed integer := 0;
    v_left integer;          -- rows this claim may still take: the batch, less what earlier sub-pools gave
    v_sub_pools integer;
    v_sub integer;
    v_order integer[];
    v_held integer[] := '{}';  -- the sub-pools this claim holds, in the order it took them
    v_subs integer[];        -- sub-pools worth a claim: something due, or bounds due for a refresh
    v_stale_subs integer[];
    v_ahead_by timestamptz := now() + make_interval(secs => greatest(p_ahead_seconds, 0));
    v_due_by timestamptz := v_ahead_by;
BEGIN
    SELECT p.admission_rate, p.sub_pools INTO v_rate, v_sub_pools FROM pools p WHERE p.name = p_pool;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown pool %', p_pool USING ERRCODE = 'foreign_key_violation';
    END IF;
    -- Nothing due in the pool: answer at once, without a lock. An idle poll then costs one index probe per
    -- tenant and writes nothing (no transaction id, no WAL flush at commit), so workers can poll often -- the
    -- poll period is most of the fire lag -- without queueing behind each other.
    -- A sub-pool whose bounds are due for a refresh is worth a claim: a row written below them would otherwise
    -- wait for work.
    SELECT array_agg(DISTINCT w.sub) FILTER (WHERE w.stale OR w.due), array_agg(DISTINCT w.sub) FILTER (WHERE w.stale)
      INTO v_subs, v_stale_subs
      FROM (SELECT d2_sub_pool(t.id, v_sub_pools) AS sub,
                   b.refreshed_at IS NULL OR b.refreshed_at < now() - interval '1 second' AS stale,
                   EXISTS (SELECT 1 FROM occurrences o
                            WHERE o.state = 'ready' AND o.pool = p_pool AND o.tenant_id = t.id
                              AND o.ready_at >= b.ready_from AND o.ready_at <= v_ahead_by) AS due
              FROM tenants t LEFT JOIN claim_bounds b ON b.pool = p_pool AND b.tenant_id = t.id) w;
    IF v_subs IS NULL THEN
        RETURN;
    END IF;

    -- Admission bucket, refilled by the database clock. Burst is 100 ms worth of the rate.
    IF v_rate IS NOT NULL THEN
        SELECT p.tokens, p.refilled_at INTO v_tokens, v_refilled_at
          FROM pools p WHERE p.name = p_pool
          FOR NO KEY UPDATE;   -- not FOR UPDATE: that would also block every INSERT INTO jobs (its foreign key
                               -- takes KEY SHARE on the pool row), so job submission would queue behind claims
    END IF;
    -- Refilled up to an instant read once the row is ours, and that instant is what refilled_at records below:
    -- stamping the end of the claim instead dropped the tokens earned while the claim ran, and the pool drained
    -- below its rate (7-14% below with three workers at 150/s on a busy machine).
    v_now := clock_timestamp();
    v_tokens := least(greatest(1, v_rate * 0.1),
                      v_tokens + v_rate * greatest(0, extract(epoch FROM v_now - v_refilled_at)));
    v_allow := CASE WHEN v_rate IS NULL THEN p_max ELSE least(p_max, floor(v_tokens)::integer) END;

    -- Serve every sub-pool with work that no other claimer holds, in random order, until the batch is full, so a
    -- claim comes back with what is due wherever it is, as with one sub-pool. (Serving one sub-pool per claim left
    -- the others' due rows to later polls: p99 fire lag 57 ms at 833/s, measured.) A sub-pool another claimer holds
    -- is that claimer's to serve; only a claim that has served none by its last candidate queues behind it, so no
    -- claim comes back empty while work waits. With several sub-pools, a first pass takes only what is due now, a
    -- second what comes due within the claim-ahead window: else the first sub-pool served would fill the batch with
    -- rows not yet due while another's due rows waited. (Within one sub-pool the query's order puts due rows first.)
    v_order := (SELECT array_agg(s ORDER BY random()) FROM unnest(v_subs) AS s);
    FOR v_pass IN 1 .. least(cardinality(v_order), 2) LOOP
        v_due_by := CASE WHEN v_pass = 1 AND cardinality(v_order) > 1 THEN now() ELSE v_ahead_by END;
        FOR i IN 1 .. cardinality(v_order) LOOP
            EXIT WHEN cardinality(v_held) > 0 AND v_claimed >= v_allow;   -- the first is served even so: its refresh
            v_sub := v_order[i];
            IF v_pass = 2 THEN
                CONTINUE WHEN NOT v_sub = ANY (v_held);
            ELSE
                IF NOT pg_try_advisory_xact_lock(d2_sub_pool_lock(p_pool, v_sub_pools, v_sub)) THEN
                    CONTINUE WHEN cardinality(v_held) > 0 OR i < cardinality(v_order);
                    PERFORM pg_advisory_xact_lock(d2_sub_pool_lock(p_pool, v_sub_pools, v_sub));
                END IF;
                v_held := v_held || v_sub;
                -- Re-split while this claim waited (d2_resplit_pool): claim nothing; the next poll uses the new split.
                -- Asked at the first lock only: a re-split cannot commit while this claim holds one.
                IF cardinality(v_held) = 1
                   AND (SELECT p.sub_pools FROM pools p WHERE p.name = p_pool) <> v_sub_pools THEN
                    RETURN;
                END IF;
                -- Asked again under the lock, where the claim ahead of this one may have refreshed them already. The
                -- refresh is a statement of its own, so it sees every claim before this one.
                IF v_sub = ANY (v_stale_subs) AND d2_claim_bounds_stale(p_pool, v_sub_pools, v_sub) THEN
                    PERFORM d2_refresh_claim_bounds(p_pool, v_sub_pools, v_sub);
                END IF;
            END IF;
            v_left := v_allow - v_claimed;
            RETURN QUERY
            WITH bounds AS (
                SELECT t.id AS tenant_id, t.weight, t.max_running, b.ready_from, b.running_token_from, b.running_before
                FROM tenants t JOIN claim_bounds b ON b.pool = p_pool AND b.tenant_id = t.id
                WHERE d2_sub_pool(t.id, v_sub_pools) = v_sub
            ), running AS (
                -- The estimate is never too low, so where it leaves room for a whole batch the cap cannot bind;
                -- elsewhere (a tenant near its cap) the exact count decides.
                SELECT bd.*, CASE WHEN e.n + v_left <= bd.max_running THEN e.n
                                  ELSE (SELECT count(*) FROM occurrences o
                                         WHERE o.state = 'running' AND o.pool = p_pool AND o.tenant_id = bd.tenant_id)
                             END AS n
                FROM bounds bd CROSS JOIN LATERAL (
                    SELECT bd.running_before + count(*) AS n FROM occurrences o
                    WHERE o.state = 'running' AND o.pool = p_pool AND o.tenant_id = bd.tenant_id
                      AND o.current_token > bd.running_token_from
                ) e
            ), candidates AS (
                SELECT c.id, c.ready_at, r.weight, r.n AS running_n, r.max_running - r.n AS room,
                       row_number() OVER (PARTITION BY r.tenant_id ORDER BY c.ready_at, c.id) AS k
                FROM running r
                CROSS JOIN LATERAL (
                    SELECT o.id, o.ready_at FROM occurrences o
                    WHERE o.state = 'ready' AND o.pool = p_pool AND o.tenant_id = r.tenant_id
                      AND o.ready_at >= r.ready_from AND o.ready_at <= v_due_by
                    ORDER BY o.ready_at, o.id
                    LIMIT v_left
                ) c
                WHERE r.max_running > r.n
            ), chosen AS (
                SELECT cd.id FROM candidates cd
                WHERE cd.k <= cd.room
                -- What is due before anything claimed ahead, so a row that is not due yet never takes the place of one
                -- that is; then least running share.
                ORDER BY cd.ready_at > now(), (cd.running_n + cd.k)::double precision / cd.weight, cd.ready_at, cd.id
                LIMIT v_left
            ), locked AS (
                -- Found by primary key, and the state is checked on what the lock returns (the row's latest version)
                -- rather than in a WHERE clause: a "state = 'ready'" predicate here lets the planner pick the
                -- occurrences_ready index, and with statistics taken while nothing was ready it walked every ready
                -- row of the pool once per chosen row (measured: 280 ms a claim behind a 20k backlog).
                SELECT o.id, o.state FROM occurrences o
                WHERE o.id = ANY (ARRAY(SELECT chosen.id FROM chosen))
                FOR UPDATE SKIP LOCKED
            ), claimed AS (
                UPDATE occurrences o
                   SET state = 'running', attempts = o.attempts + 1, current_token = nextval('fencing_tokens')
                  FROM locked WHERE o.id = locked.id AND locked.state = 'ready'
                RETURNING o.id, o.job_id, o.fire_at, o.ready_at, o.attempts, o.current_token
            ), started AS (
                -- dispatched_at is read AFTER the sub-pool lock was granted (clock_timestamp, not the transaction's
                -- now()): a claim that queued behind another must not be stamped before completions it already saw.
                INSERT INTO attempts (token, occurrence_id, attempt, worker_id, state, dispatched_at, lease_expires_at,
                                      deadline)
                SELECT cl.current_token, cl.id, cl.attempts, p_worker, 'running', clock_timestamp(),
                       now() + make_interval(secs => p_lease_seconds),
                       clock_timestamp() + coalesce(mj.max_runtime, mp.max_runtime)
                FROM claimed cl JOIN jobs mj ON mj.id = cl.job_id JOIN pools mp ON mp.name = p_pool
                RETURNING attempts.token, attempts.dispatched_at, attempts.lease_expires_at
            )
            SELECT cl.current_token, cl.id, cl.job_id, cl.fire_at, cl.ready_at, cl.attempts, j.handler, j.payload,
                   s.dispatched_at, s.lease_expires_at
            FROM claimed cl
            JOIN started s ON s.token = cl.current_token
            JOIN jobs j ON j.id = cl.job_id;
            GET DIAGNOSTICS v_left = ROW_COUNT;
            v_claimed := v_claimed + v_left;
        END LOOP;
    END LOOP;

    IF v_rate IS NOT NULL THEN
        UPDATE pools SET tokens = v_tokens - v_claimed, refilled_at = v_now WHERE name = p_pool;
    END IF;
END $$;

-- ---------------------------------------------------------------------------------------------
-- Heartbeat. One call per worker process per period, for all its running attempts. Extends the
-- lease of every attempt that is still running (by the database clock) and answers, per token:
--   ok      keep going
--   cancel  the job was cancelled: stop the handler cooperatively, then complete
--   timeout the attempt ran past its max runtime (attempts.deadline): stop the handler; if it does not stop,
--           abandon it and complete the attempt (it ends timed_out). Its lease is no longer extended past the
--           deadline plus one lease, so a worker that never gives up is reaped as timed_out all the same.
--   lost    this attempt is no longer yours (lease expired and reaped): stop, your writes will be refused
-- Also records the worker's wall-clock skew against the database clock -- for display only.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION d2_heartbeat(p_worker text, p_tokens bigint[], p_started_at timestamptz[],
                                        p_lease_seconds double precision, p_worker_clock timestamptz)
RETURNS TABLE (token bigint, status text)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan  -- planned once per session: see d2_settle
AS $$
BEGIN
    UPDATE processes SET heartbeat_at = now(),
           skew_ms = extract(epoch FROM p_worker_clock - clock_timestamp()) * 1000
     WHERE id = p_worker;

    RETURN QUERY
    WITH input AS (
        SELECT * FROM unnest(p_tokens, p_started_at) AS i (token, started_at)
    ), renewed AS (
        UPDATE attempts a
           SET lease_expires_at = least(now(), a.deadline) + make_interval(secs => p_lease_seconds),
               heartbeat_at = now(), started_at = coalesce(a.started_at, i.started_at)
          FROM input i
         WHERE a.token = i.token AND a.state = 'running' AND a.worker_id = p_worker
        RETURNING a.token, a.cancel_requested, a.deadline
    )
    SELECT i.token, CASE WHEN r.token IS NULL THEN 'lost' WHEN r.cancel_requested THEN 'cancel'
                         WHEN r.deadline < now() THEN 'timeout' ELSE 'ok' END
    FROM input i LEFT JOIN renewed r ON r.token = i.token;
END $$;

-- ---------------------------------------------------------------------------------------------
-- Settle: occurrences follow their just-finished attempts (shared by d2_complete and d2_reap) --
-- succeeded, retried after backoff, dead with the reason, or cancelled -- and a buffered
-- occurrence of the same job may go. The job's delivery decides whether an attempt that did not succeed is
-- retried (at_least_once) or ends the occurrence dead (at_most_once: never started twice).
-- Lock order everywhere: occurrences before attempts, so completion, reaping and cancelling of one
-- occurrence serialise instead of deadlocking.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION d2_settle(p_tokens bigint[]) RETURNS void
LANGUAGE plpgsql
-- Plan once per session, like d2_claim (and d2_complete, d2_heartbeat): with an array of tokens as the parameter the
-- planner kept choosing a custom plan, so every call planned its statements again -- measured, 4 tokens a call: 704
-- us per d2_settle, 233 us with the generic plan. The plans are primary-key lookups whatever the array holds.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_jobs bigint[];
BEGIN
    WITH moved AS (
        UPDATE occurrences o
           SET (state, ready_at, reason, finished_at) = (
               SELECT next.state,
                      CASE WHEN next.state = 'ready' THEN now() + d2_backoff(j.retry_base_seconds, o.attempts)
                           ELSE o.ready_at END,
                      CASE WHEN a.state = 'cancelled' THEN coalesce(o.reason, 'cancelled')
                           WHEN next.state <> 'dead' THEN o.reason
                           -- Not retried, whatever max_attempts says: a lost or timed-out attempt may have run to
                           -- the end, and a failed one may have written before it failed. Skip rather than risk
                           -- running it twice.
                           WHEN j.delivery = 'at_most_once'
                               THEN format('%s attempt; at-most-once job is not retried: %s', a.state,
                                           coalesce(a.error, 'no error text'))
                           ELSE format('%s after %s of %s attempts: %s', a.state, o.attempts, o.max_attempts,
                                       coalesce(a.error, 'no error text')) END,
                      CASE WHEN next.state <> 'ready' THEN clock_timestamp() END
               -- THE retry rule, in one place: an attempt that did not succeed (failed, lost, timed out) is retried
               -- while attempts are left and only if the job is at_least_once; otherwise the occurrence is dead.
               FROM (SELECT CASE WHEN a.state IN ('succeeded', 'cancelled') THEN a.state
                                 WHEN o.attempts < o.max_attempts AND j.delivery = 'at_least_once' THEN 'ready'
                                 ELSE 'dead' END AS state) next)
          FROM attempts a, jobs j
         WHERE a.token = ANY (p_tokens) AND o.id = a.occurrence_id AND j.id = o.job_id
        RETURNING o.job_id, j.overlap_policy
    )
    -- Only a job whose overlap policy buffers can have a waiting occurrence (d2_materialise): asking for the
    -- others would cost a planned query on every completion for nothing.
    SELECT array_agg(DISTINCT job_id) FILTER (WHERE overlap_policy <> 'allow') INTO v_jobs FROM moved;
    IF v_jobs IS NOT NULL THEN
        PERFORM d2_promote_waiting(v_jobs);
    END IF;
END $$;

-- ---------------------------------------------------------------------------------------------
-- Complete: THE FENCING CHECK on the completion path. An attempt may finish its occurrence only
-- if it is still running and its token is still the occurrence's current_token. A stale token
-- (the lease expired and the occurrence moved on) is refused, and the refusal is recorded.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION d2_complete(p_tokens bigint[], p_ok boolean[], p_errors text[],
                                       p_started_at timestamptz[])
RETURNS TABLE (token bigint, accepted boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan  -- planned once per session: see d2_settle (759 -> 248 us of its own a call)
AS $$
DECLARE
    v_accepted bigint[];
BEGIN
    PERFORM 1 FROM attempts a JOIN occurrences o ON o.id = a.occurrence_id
     WHERE a.token = ANY (p_tokens) ORDER BY o.id FOR UPDATE OF o;

    WITH input AS (
        SELECT * FROM unnest(p_tokens, p_ok, p_errors, p_started_at) AS i (token, ok, error, started_at)
    ), fenced AS MATERIALIZED (
        -- Read by primary key, the fence applied to what was read: with "a.state = 'running'" in the UPDATE's
        -- WHERE the planner read the attempts through a lease index (there was one) -- EVERY running attempt, on
        -- every completion (measured: 4.7 ms per call with 2,400 running). The rows cannot change underneath: every
        -- change of an attempt's state or of current_token happens under its occurrence's row lock, which this
        -- transaction took above.
        SELECT a.token, a.state, o.current_token FROM attempts a JOIN occurrences o ON o.id = a.occurrence_id
        WHERE a.token = ANY (p_tokens)
    ), done AS (
        UPDATE attempts a
           SET state = CASE WHEN i.ok THEN 'succeeded' WHEN a.cancel_requested THEN 'cancelled'
                            WHEN a.deadline < clock_timestamp() THEN 'timed_out' ELSE 'failed' END,
               error = i.error, finished_at = clock_timestamp(), started_at = coalesce(a.started_at, i.started_at)
          FROM fenced f JOIN input i ON i.token = f.token
         WHERE a.token = f.token
           AND f.state = 'running' AND f.current_token = f.token        -- the fence
        RETURNING a.token
    )
    SELECT array_agg(done.token) INTO v_accepted FROM done;
    v_accepted := coalesce(v_accepted, '{}');
    IF cardinality(v_accepted) > 0 THEN
        PERFORM d2_settle(v_accepted);
    END IF;

    IF cardinality(v_accepted) < cardinality(p_tokens) THEN
        INSERT INTO fence_rejections (token, path, occurrence_id, detail)
        SELECT t.token, 'complete', a.occurrence_id,
               CASE WHEN a.token IS NULL THEN 'no such attempt'
                    ELSE format('attempt is %s; occurrence %s is held by token %s',
                                a.state, o.id, coalesce(o.current_token::text, 'none')) END
        FROM unnest(p_tokens) AS t (token)
        LEFT JOIN attempts a ON a.token = t.token
        LEFT JOIN occurrences o ON o.id = a.occurrence_id
        WHERE NOT t.token = ANY (v_accepted);
    END IF;

    RETURN QUERY SELECT t.token, t.token = ANY (v_accepted) FROM unnest(p_tokens) AS t (token);
END $$;

-- ---------------------------------------------------------------------------------------------
-- Reap: THE RESCUER. An attempt whose lease expired by the database clock is lost; its occurrence is retried
-- with a new attempt (and a higher token) or, out of attempts or at_most_once, is dead with the reason.
-- Safe on every replica at once: SKIP LOCKED hands each occurrence to one reaper, and the lease is
-- re-checked under the lock, so a heartbeat that committed first wins.
-- Also sweeps buffered occurrences whose job has nothing running any more (a safety net for the
-- race between materialising a buffered run and the previous run finishing).
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION d2_reap(p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_candidates bigint[];
    v_lost bigint[];
BEGIN
    -- Through the running occurrences (occurrences_running): attempts have no index on their lease, so that
    -- heartbeats and completions are HOT updates (schema.sql). A running attempt is its occurrence's current_token.
    SELECT array_agg(x.token) INTO v_candidates
      FROM (SELECT a.token FROM occurrences o JOIN attempts a ON a.token = o.current_token
             WHERE o.state = 'running' AND a.state = 'running' AND a.lease_expires_at < now()
             ORDER BY a.lease_expires_at
             LIMIT p_limit
             FOR UPDATE OF o SKIP LOCKED) x;

    IF v_candidates IS NOT NULL THEN
        WITH lost AS (
            UPDATE attempts a
               SET state = CASE WHEN a.cancel_requested THEN 'cancelled' WHEN a.deadline < now() THEN 'timed_out'
                                ELSE 'lost' END,
                   finished_at = clock_timestamp(),
                   error = format('lease expired at %s (worker %s, last heartbeat %s)%s', a.lease_expires_at,
                                  a.worker_id, coalesce(a.heartbeat_at::text, 'never'),
                                  CASE WHEN a.deadline < now() THEN format(', past its max runtime (deadline %s)',
                                                                          a.deadline) ELSE '' END)
             WHERE a.token = ANY (v_candidates) AND a.state = 'running' AND a.lease_expires_at < now()
            RETURNING a.token
        )
        SELECT array_agg(lost.token) INTO v_lost FROM lost;
        IF v_lost IS NOT NULL THEN
            PERFORM d2_settle(v_lost);
        END IF;
    END IF;

    PERFORM d2_promote_waiting(ARRAY(SELECT DISTINCT w.job_id FROM occurrences w WHERE w.state = 'waiting'));
    RETURN coalesce(cardinality(v_lost), 0);
END $$;

-- ---------------------------------------------------------------------------------------------
-- Route by observed duration: THE ROUTER. A recurring job declared short (or with no expected duration) whose
-- runs turn out long holds short-pool slots for many times the short mean, so where its next occurrences go is
-- decided by what it did, not only by what the tenant declared. The rule: when the 95th percentile of its recent
-- run times is p_long_from or more, its next occurrences are enqueued to the 'long' pool (jobs.routed_pool, read by
-- d2_materialise and d2_enqueue); when it falls back under, to its declared pool again.
--   * recent run times: attempts that ended on their own (succeeded or failed), started_at to finished_at on the
--     database clock, of its executions still in the queue tables (the last storage.archive_after of them);
--   * a timed-out attempt does not count: its run time is only "at least the max runtime", and a hang must not
--     earn the long pool's 7 hours; one slow run in twenty does not move a job either (a percentile, not the max);
--   * declared long stays long, and one-shot jobs are left alone: they never fire again.
-- Only jobs that finished an execution in the last p_since are looked at (occurrences_finished), and of those only
-- the ones that could change: an attempt as long as the bound, or an occurrence already outside the short pool.
-- Returns how many jobs changed pool.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION d2_route_by_duration(p_long_from double precision, p_since interval) RETURNS integer
LANGUAGE sql AS $$
    WITH candidates AS (
        SELECT DISTINCT o.job_id FROM occurrences o JOIN attempts a ON a.occurrence_id = o.id
         WHERE o.finished_at > now() - p_since
           AND (o.pool <> 'short' OR a.finished_at - a.started_at >= make_interval(secs => p_long_from))
    ), observed AS (
        SELECT j.id, CASE WHEN (SELECT percentile_cont(0.95) WITHIN GROUP (
                                           ORDER BY extract(epoch FROM a.finished_at - a.started_at))
                                  FROM occurrences o JOIN attempts a ON a.occurrence_id = o.id
                                 WHERE o.job_id = j.id AND a.state IN ('succeeded', 'failed')
                                   AND a.started_at IS NOT NULL) >= p_long_from
                          THEN 'long' END AS pool
          FROM jobs j JOIN candidates c ON c.job_id = j.id
         WHERE j.schedule_kind = 'cron' AND j.pool = 'short'
    ), changed AS (
        UPDATE jobs j SET routed_pool = ob.pool
          FROM observed ob
         WHERE j.id = ob.id AND j.routed_pool IS DISTINCT FROM ob.pool
        RETURNING 1
    )
    SELECT count(*)::integer FROM changed
$$;

-- ---------------------------------------------------------------------------------------------
-- Archive: THE ARCHIVER. Finished occurrences older than p_after leave the queue tables for their day's
-- partition of execution_history, with their attempts folded into attempt_log -- insert and deletes in one
-- transaction, so a reader sees each execution once. Only an occurrence whose fire time its job's cursor
-- has passed may leave the unique key (schema.sql says why that is enough). Every attempt of a finished
-- occurrence is finished too: each path finishes the attempt before it settles the occurrence.
-- SKIP LOCKED lets every replica run it; the lock order is the usual one, occurrences before attempts.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION d2_archive(p_after interval, p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_ids bigint[];
    v_day date;
BEGIN
    SELECT array_agg(x.id) INTO v_ids
      FROM (SELECT o.id FROM occurrences o JOIN jobs j ON j.id = o.job_id
             WHERE o.finished_at IS NOT NULL AND o.finished_at < now() - p_after
               AND (o.trigger = 'manual' OR o.fire_at <= j.materialized_through)
             ORDER BY o.finished_at
             LIMIT p_limit
             FOR UPDATE OF o SKIP LOCKED) x;
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;
    FOR v_day IN SELECT DISTINCT (o.finished_at AT TIME ZONE 'UTC')::date FROM occurrences o WHERE o.id = ANY (v_ids)
    LOOP
        PERFORM d2_history_partition(v_day);
    END LOOP;
    INSERT INTO execution_history (id, job_id, fire_at, tenant_id, pool, trigger, state, ready_at, attempts,
                                   max_attempts, current_token, reason, created_at, finished_at, attempt_log)
    SELECT o.id, o.job_id, o.fire_at, o.tenant_id, o.pool, o.trigger, o.state, o.ready_at, o.attempts,
           o.max_attempts, o.current_token, o.reason, o.created_at, o.finished_at,
           coalesce((SELECT jsonb_agg(to_jsonb(a) - 'occurrence_id' ORDER BY a.token)
                       FROM attempts a WHERE a.occurrence_id = o.id), '[]')
      FROM occurrences o
     WHERE o.id = ANY (v_ids);
    -- A one-shot job (its idempotency key) is remembered until its last execution is older than the retention.
    UPDATE jobs j SET history_until = greatest(j.history_until, m.last_finished)
      FROM (SELECT o.job_id, max(o.finished_at) AS last_finished FROM occurrences o
             WHERE o.id = ANY (v_ids) GROUP BY o.job_id) m
     WHERE j.id = m.job_id AND j.schedule_kind = 'once';
    DELETE FROM attempts WHERE occurrence_id = ANY (v_ids);
    DELETE FROM occurrences WHERE id = ANY (v_ids);
    RETURN cardinality(v_ids);
END $$;

-- The history partition for one UTC day, made on first use. Two replicas may race to make it: the loser's
-- CREATE waits for the winner's commit and then finds the table (or its type) taken, which is success too.
CREATE OR REPLACE FUNCTION d2_history_partition(p_day date) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_name text := 'execution_history_' || to_char(p_day, 'YYYYMMDD');
BEGIN
    IF to_regclass(v_name) IS NOT NULL THEN
        RETURN;
    END IF;
    EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF execution_history FOR VALUES FROM (%L) TO (%L)',
                   v_name, p_day::timestamp AT TIME ZONE 'UTC', (p_day + 1)::timestamp AT TIME ZONE 'UTC');
EXCEPTION WHEN duplicate_table OR unique_violation THEN
    NULL;
END $$;

-- ---------------------------------------------------------------------------------------------
-- Rotate: retention for the history. Makes today's and tomorrow's partitions ahead of need (so the archiver
-- does not have to), and drops every day that ended more than p_retention ago: a history row is kept at least
-- the retention and at most a day longer. Dropping a day is catalog work, milliseconds however many rows it
-- holds. One replica at a time: while one rotates (the advisory lock), the others skip the pass.
-- Making or dropping a partition locks execution_history exclusively, which waits for every reader of the
-- history and makes everyone after it wait too, the archiver included. So each step waits at most lock_timeout
-- and otherwise gives up until the next pass, a minute later, instead of stalling the scheduler's loop behind a
-- long report.
-- Returns how many days were dropped.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION d2_rotate_history(p_retention interval) RETURNS integer
LANGUAGE plpgsql SET lock_timeout = '500ms' AS $$
DECLARE
    p record;
    v_today date := (now() AT TIME ZONE 'UTC')::date;
    v_dropped integer := 0;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('d2_rotate_history')) THEN
        RETURN 0;
    END IF;
    BEGIN
        PERFORM d2_history_partition(v_today);
        PERFORM d2_history_partition(v_today + 1);
    EXCEPTION WHEN lock_not_available THEN
        NULL;   -- the archiver makes a missing day itself
    END;
    FOR p IN
        SELECT c.relname AS name
          FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'execution_history'::regclass
           AND (to_date(right(c.relname, 8), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC' <= now() - p_retention
         ORDER BY 1
    LOOP
        BEGIN
            EXECUTE format('DROP TABLE %I', p.name);
            v_dropped := v_dropped + 1;
        EXCEPTION WHEN lock_not_available THEN
            RETURN v_dropped;   -- a reader holds the history; this day and later ones wait for the next pass
        END;
    END LOOP;
    RETURN v_dropped;
END $$;

-- ---------------------------------------------------------------------------------------------
-- Forget: one-shot jobs whose last execution finished more than p_retention ago are deleted, p_limit at a
-- time, so a one-shot job's idempotency key is remembered as long as its history: the retention is the
-- idempotency window. These are rows of jobs, deleted one by one -- the part of retention a partition cannot
-- take away, because the key must stay unique while it is remembered -- so it goes in short batches, oldest
-- first, found through jobs_forgettable. Recurring jobs stay.
-- Returns how many jobs were deleted.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION d2_forget_jobs(p_retention interval, p_limit integer) RETURNS integer
LANGUAGE sql AS $$
    WITH gone AS (
        DELETE FROM jobs j
         WHERE j.id IN (SELECT f.id FROM jobs f
                         WHERE f.schedule_kind = 'once' AND f.history_until < now() - p_retention
                           AND f.next_fire_at IS NULL
                           AND NOT EXISTS (SELECT 1 FROM occurrences o WHERE o.job_id = f.id)
                         ORDER BY f.history_until
                         LIMIT p_limit
                         FOR UPDATE SKIP LOCKED)
        RETURNING 1
    )
    SELECT count(*)::integer FROM gone
$$;

-- Cancel every unfinished occurrence of a job: waiting/ready ones at once, running ones
-- cooperatively (the worker hears 'cancel' on its next heartbeat and completes as cancelled).
CREATE OR REPLACE FUNCTION d2_cancel_open(p_job_id bigint, p_reason text) RETURNS void
LANGUAGE sql AS $$
    SELECT 1 FROM occurrences WHERE job_id = p_job_id AND finished_at IS NULL
     ORDER BY id FOR UPDATE;
    UPDATE attempts a SET cancel_requested = true
      FROM occurrences o
     WHERE o.job_id = p_job_id AND o.finished_at IS NULL AND o.state = 'running'
       AND a.token = o.current_token AND a.state = 'running';
    UPDATE occurrences SET reason = p_reason
     WHERE job_id = p_job_id AND finished_at IS NULL AND state = 'running';
    UPDATE occurrences SET state = 'cancelled', reason = p_reason, finished_at = clock_timestamp()
     WHERE job_id = p_job_id AND finished_at IS NULL AND state IN ('waiting', 'ready');
$$;

-- ---------------------------------------------------------------------------------------------
-- THE FENCING CHECK on the job's own write path (Kleppmann 2016): the storage refuses a token lower
-- than the highest it has accepted for that key. Every try is kept in ledger_effects as evidence.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION d2_fenced_ledger_write(p_key text, p_value text, p_token bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_n integer;
    v_holder bigint;
BEGIN
    INSERT INTO ledger AS l (key, value, fence_token) VALUES (p_key, p_value, p_token)
    ON CONFLICT (key) DO UPDATE
        SET value = excluded.value, fence_token = excluded.fence_token, written_at = clock_timestamp()
        WHERE l.fence_token <= excluded.fence_token
           -- Test-only switch for the drills' negative control: shows what happens without the fence.
           OR current_setting('d2.unsafe_disable_fencing', true) = 'on';
    GET DIAGNOSTICS v_n = ROW_COUNT;
    INSERT INTO ledger_effects (key, value, token, accepted) VALUES (p_key, p_value, p_token, v_n > 0);
    IF v_n = 0 THEN
        SELECT fence_token INTO v_holder FROM ledger WHERE key = p_key;
        INSERT INTO fence_rejections (token, path, occurrence_id, detail)
        SELECT p_token, 'ledger_write', a.occurrence_id,
               format('ledger key %s already written by token %s', p_key, v_holder)
        FROM (SELECT p_token AS token) t LEFT JOIN attempts a ON a.token = t.token;
    END IF;
    RETURN v_n > 0;
END $$;

-- ---------------------------------------------------------------------------------------------
-- A charge, the demo's non-idempotent effect, with BOTH defences (schema.sql, charges, says why one is not
-- enough). Per idempotency key, under one lock: a token lower than one that already tried is stale (the fence);
-- a key already applied is a duplicate (the dedup, which is what makes the effect happen once); else applied.
-- Returns the outcome; only 'applied' changes the balance, and a duplicate is success for the caller.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION d2_charge(p_key text, p_account text, p_amount bigint, p_token bigint) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_outcome text := 'applied';
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('d2_charge:' || p_key));
    IF EXISTS (SELECT 1 FROM charges WHERE idempotency_key = p_key AND token > p_token) THEN
        v_outcome := 'stale';
    ELSIF EXISTS (SELECT 1 FROM charges WHERE idempotency_key = p_key AND outcome = 'applied')
          -- Test-only switch for the negative control: the fence alone, without the dedup.
          AND coalesce(current_setting('d2.unsafe_disable_dedup', true), '') <> 'on' THEN
        v_outcome := 'duplicate';
    END IF;
    INSERT INTO charges (idempotency_key, account, amount, token, outcome)
    VALUES (p_key, p_account, p_amount, p_token, v_outcome);
    RETURN v_outcome;
END $$;
