-- D2 Kit reference scheduler: the whole schema in one file.
-- This file is always the WHOLE current schema; the operations that change these tables live beside it in
-- operations.sql. `d2kit db upgrade` (db.init_schema) applies it to a new database, and to an existing one
-- after the pending migrations in migrations/, which hold only what IF NOT EXISTS cannot do (a new column on
-- an existing table, a changed index). So it stays idempotent: IF NOT EXISTS / OR REPLACE everywhere.
--
-- Every time in this schema comes from ONE clock: the database's (now() / clock_timestamp()).
-- Scheduler and worker wall clocks are recorded (processes.skew_ms) but never decide anything.

-- Which migrations this database has had (migrations/README.md). A new database records all of them.
CREATE TABLE IF NOT EXISTS schema_migrations (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- ---------------------------------------------------------------------------------------------
-- Tenants and pools
-- ---------------------------------------------------------------------------------------------
CREATE TABLE IF NOT EXISTS tenants (
    id            text PRIMARY KEY,
    api_key_hash  text NOT NULL UNIQUE,          -- sha256 of a random 32-byte key; the key is shown once
    max_running   integer NOT NULL DEFAULT 100 CHECK (max_running > 0),   -- per pool, at every instant
    weight        integer NOT NULL DEFAULT 1 CHECK (weight > 0),          -- share of a contended pool
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- A pool is a set of workers for one class of job duration, so 6-hour jobs never queue
-- in front of 100 ms ones. The token bucket bounds dispatches/s across ALL replicas and
-- workers (catch-up storms drain at this rate); NULL admission_rate means unlimited.
CREATE TABLE IF NOT EXISTS pools (
    name            text PRIMARY KEY,
    admission_rate  double precision CHECK (admission_rate IS NULL OR admission_rate > 0),
    tokens          double precision NOT NULL DEFAULT 0,
    refilled_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- A job's default max runtime in this pool (jobs.max_runtime overrides it): past it the attempt is cancelled,
    -- then ends timed_out, so a hung handler cannot hold its slot forever. Heartbeats come from the worker
    -- process, not the handler: without this a hung handler keeps its lease alive indefinitely.
    max_runtime     interval NOT NULL DEFAULT '10 minutes' CHECK (max_runtime > '0'),
    -- Claims of a pool are serial per sub-pool, its tenants split by hash (d2_sub_pool in operations.sql): more
    -- than one only when one claimer at a time is too few (the design doc, section 8, has the measurement).
    sub_pools       integer NOT NULL DEFAULT 1 CHECK (sub_pools BETWEEN 1 AND 64)
);
INSERT INTO pools (name, max_runtime) VALUES ('short', '10 minutes'), ('long', '7 hours') ON CONFLICT DO NOTHING;

-- ---------------------------------------------------------------------------------------------
-- Jobs: what the user asked for. One row per one-shot or recurring job.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE IF NOT EXISTS jobs (
    id                   bigserial PRIMARY KEY,
    tenant_id            text NOT NULL REFERENCES tenants (id),
    name                 text NOT NULL,
    handler              text NOT NULL,
    payload              jsonb NOT NULL DEFAULT '{}',
    pool                 text NOT NULL REFERENCES pools (name),
    schedule_kind        text NOT NULL CHECK (schedule_kind IN ('once', 'cron')),
    run_at               timestamptz,                       -- once
    cron                 text,                              -- cron (5 or 6 fields)
    timezone             text NOT NULL DEFAULT 'UTC',       -- IANA name; cron is read in this zone
    dst_gap              text NOT NULL DEFAULT 'shift' CHECK (dst_gap IN ('skip', 'shift')),
    dst_overlap          text NOT NULL DEFAULT 'first' CHECK (dst_overlap IN ('first', 'both')),
    misfire_policy       text NOT NULL DEFAULT 'run_once' CHECK (misfire_policy IN ('skip', 'run_once', 'run_all')),
    catchup_window       interval NOT NULL DEFAULT '1 day',
    max_catchup          integer NOT NULL DEFAULT 100 CHECK (max_catchup > 0),
    overlap_policy       text NOT NULL DEFAULT 'allow'
                         CHECK (overlap_policy IN ('allow', 'skip', 'buffer_one', 'buffer_all', 'cancel_other')),
    max_attempts         integer NOT NULL DEFAULT 3 CHECK (max_attempts > 0),
    -- What a lost attempt means (the worker died, was partitioned or hung past its lease; d2_settle decides):
    -- at_least_once retries it, so the handler may run twice: its effects deduplicate on the occurrence's key;
    -- at_most_once never starts an occurrence twice: an attempt that does not succeed, whether lost, timed out
    -- or failed, makes the occurrence dead with the reason (it may have started, so it is not run again).
    delivery             text NOT NULL DEFAULT 'at_least_once' CHECK (delivery IN ('at_least_once', 'at_most_once')),
    retry_base_seconds   double precision NOT NULL DEFAULT 1 CHECK (retry_base_seconds >= 0),
    max_runtime          interval CHECK (max_runtime > '0'),  -- NULL: the pool's
    idempotency_key      text,
    paused               boolean NOT NULL DEFAULT false,
    deleted_at           timestamptz,
    -- The materialiser's cursor: every fire time <= materialized_through has its occurrence row.
    materialized_through timestamptz NOT NULL CHECK (isfinite(materialized_through)),
    next_fire_at         timestamptz,                       -- NULL: nothing left to fire
    history_until        timestamptz,                       -- once: when its last archived execution finished
    schedule_error       text,                              -- why the last materialise pass could not plan it
    created_at           timestamptz NOT NULL DEFAULT now(),
    -- Where its next occurrences go when its observed run times say so (d2_route_by_duration): 'long' for a job
    -- declared short whose recent runs take long. NULL: the declared pool above.
    routed_pool          text REFERENCES pools (name),
    UNIQUE (tenant_id, idempotency_key),
    CHECK ((schedule_kind = 'once') = (run_at IS NOT NULL)),
    CHECK ((schedule_kind = 'cron') = (cron IS NOT NULL)),
    CONSTRAINT at_most_once_is_one_attempt CHECK (delivery = 'at_least_once' OR max_attempts = 1)
);
-- The materialiser's poll: "which jobs have a fire time coming up?"
CREATE INDEX IF NOT EXISTS jobs_due ON jobs (next_fire_at)
    WHERE next_fire_at IS NOT NULL AND NOT paused AND deleted_at IS NULL;
-- A tenant's job list (GET /v1/jobs, `d2kit jobs list`): newest first, a page at a time by id.
CREATE INDEX IF NOT EXISTS jobs_by_tenant ON jobs (tenant_id, id);
-- Retention forgets a one-shot job once its history is older than the retention (d2_forget_jobs), oldest first.
CREATE INDEX IF NOT EXISTS jobs_forgettable ON jobs (history_until) WHERE schedule_kind = 'once';

-- ---------------------------------------------------------------------------------------------
-- Occurrences: one row per (job, scheduled fire time), including the ones that never run.
--
-- State machine (enforced by the trigger below; 'new' is the insert):
--
--     new ──► waiting ──► ready ──► running ──► succeeded
--      │        │           │  ▲        │
--      │        │           │  └────────┤ (attempt failed / lease lost, at_least_once, attempts left: retry)
--      │        ▼           ▼           ├──► dead       (attempts exhausted, or at_most_once; reason says why)
--      ├──────► skipped ◄───┘           └──► cancelled  (job deleted, cancel_other, explicit cancel)
--      └──► ready                waiting/ready ──► cancelled
--
--   waiting   : buffered behind a running occurrence of the same job (overlap_policy buffer_*/cancel_other)
--   ready     : may be claimed once ready_at <= now() (fire time, or retry backoff), or a claim-ahead window
--               before it; its handler never starts before ready_at (d2_claim in operations.sql)
--   running   : an attempt holds a lease; current_token is that attempt's fencing token
--   skipped   : never run, with a reason (misfire:skip, outside_catchup_window, overlap:skip, dst_gap:skip ...)
--   succeeded, dead, skipped, cancelled are terminal.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE IF NOT EXISTS occurrences (
    id             bigserial PRIMARY KEY,
    job_id         bigint NOT NULL REFERENCES jobs (id),
    fire_at        timestamptz NOT NULL,         -- the scheduled instant (UTC)
    tenant_id      text NOT NULL,                -- copied from the job so the claim needs no join
    pool           text NOT NULL,
    trigger        text NOT NULL DEFAULT 'schedule' CHECK (trigger IN ('schedule', 'manual')),
    state          text NOT NULL,
    ready_at       timestamptz NOT NULL,         -- earliest dispatch: fire_at, or now() + retry backoff
    attempts       integer NOT NULL DEFAULT 0,
    max_attempts   integer NOT NULL,
    current_token  bigint,                       -- fencing token of the only attempt allowed to finish it
    reason         text,                         -- why skipped / dead / cancelled
    created_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz,                  -- set exactly when the state becomes terminal
    -- THE guarantee against double materialisation: whichever replica, however it crashed,
    -- an occurrence can exist once.
    UNIQUE (job_id, fire_at),
    CONSTRAINT finished_iff_terminal CHECK ((finished_at IS NULL) = (state IN ('waiting', 'ready', 'running')))
);
-- The claim probes this index once per tenant: ready work in a pool, oldest first. The id is in the key
-- because the claim orders by (ready_at, id): without it every probe reads and sorts ALL of a tenant's due rows,
-- so a claim slows down as the backlog grows -- exactly when it must be fast.
CREATE INDEX IF NOT EXISTS occurrences_ready ON occurrences (pool, tenant_id, ready_at, id)
    WHERE state = 'ready';
-- Counting running attempts per tenant (caps) reads only the running rows; the token in the key lets the claim
-- count only those dispatched since its last refresh (claim_bounds, below).
CREATE INDEX IF NOT EXISTS occurrences_running ON occurrences (pool, tenant_id, current_token)
    WHERE state = 'running';
-- Overlap policies ask "does this job have an unfinished occurrence?" The predicate is finished_at, not the
-- state, on purpose: a state predicate would make this index usable by the claim's "state = 'ready'", and with
-- statistics taken while nothing was ready the planner chose it -- reading and sorting every ready row of the
-- pool on each claim (measured: 130 ms per claim behind a 20k backlog, instead of ~1 ms).
CREATE INDEX IF NOT EXISTS occurrences_unfinished ON occurrences (job_id, fire_at)
    WHERE finished_at IS NULL;
-- Buffered occurrences (overlap buffer_*/cancel_other) waiting for their job's previous run: the reaper's sweep and
-- d2_promote_waiting look only here. Without it the sweep read the whole table twice a second.
CREATE INDEX IF NOT EXISTS occurrences_waiting ON occurrences (job_id)
    WHERE state = 'waiting';
-- The archiver (d2_archive) moves the oldest finished executions first.
CREATE INDEX IF NOT EXISTS occurrences_finished ON occurrences (finished_at)
    WHERE finished_at IS NOT NULL;

-- ---------------------------------------------------------------------------------------------
-- Claim bounds: where the claim starts reading, per (pool, tenant). A cache, refreshed by d2_claim at most
-- once a second (d2_refresh_claim_bounds); truncating it loses nothing.
--
-- Why: a claim moves rows out of occurrences_ready and occurrences_running, and each move leaves a dead index
-- entry behind. Normally the next scan marks it dead and skips it from then on. While ANY transaction holds an
-- old snapshot (a 5-minute report on the primary), no entry made after that snapshot can be marked: every
-- claim would walk all rows claimed, and all rows finished, since the snapshot began -- 250,000 entries after
-- 5 minutes at 833/s, several times per claim. The queue's dead entries lie BELOW its live head (oldest ready
-- first; tokens only grow), so the claim starts at the head it last found instead of at the bottom:
--   ready_from      no ready row is older than this, except one written late since the last refresh (a
--                   catch-up fire): it waits at most one refresh, because every refresh reads from the bottom.
--   running_before  running rows with a token <= running_token_from, counted at the refresh. The claim adds the
--                   running rows with a newer token. Some counted ones may have finished since, so the sum
--                   can be too high, never too low: a cap it says might bind is checked by an exact count.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE IF NOT EXISTS claim_bounds (
    pool                text NOT NULL,
    tenant_id           text NOT NULL,
    ready_from          timestamptz NOT NULL,
    running_token_from  bigint NOT NULL,
    running_before      bigint NOT NULL,
    refreshed_at        timestamptz NOT NULL,
    PRIMARY KEY (pool, tenant_id)
);

-- ---------------------------------------------------------------------------------------------
-- Attempts: one row per dispatch. The primary key IS the fencing token: drawn from a sequence,
-- so it only grows (a crash skips cached values, never reuses one). CACHE 1, the default, on purpose:
-- tokens are then handed out in the order they are asked for, which claim_bounds relies on.
--
--     new ──► running ──► succeeded | failed | lost (lease expired) | cancelled
--                              | timed_out (ran past its max runtime: cancelled, then abandoned by its worker)
-- ---------------------------------------------------------------------------------------------
CREATE SEQUENCE IF NOT EXISTS fencing_tokens;
CREATE TABLE IF NOT EXISTS attempts (
    token             bigint PRIMARY KEY,
    occurrence_id     bigint NOT NULL REFERENCES occurrences (id),
    attempt           integer NOT NULL,
    worker_id         text NOT NULL,
    state             text NOT NULL,
    dispatched_at     timestamptz NOT NULL DEFAULT now(),
    started_at        timestamptz,                 -- handler start, on the database clock
    heartbeat_at      timestamptz,
    lease_expires_at  timestamptz NOT NULL,        -- database clock; only the database compares it
    deadline          timestamptz,                 -- dispatch + max runtime: past it, the attempt is timed out
    finished_at       timestamptz,
    cancel_requested  boolean NOT NULL DEFAULT false,
    error             text
);
-- No index on the columns a completion or a heartbeat changes (state, lease_expires_at, finished_at): then both
-- are HOT updates -- the new row version goes on the same page and no index gets an entry -- where the page has
-- room, which the fillfactor below keeps. The reaper finds expired leases through occurrences_running instead: a
-- running attempt is always its running occurrence's current_token.
CREATE INDEX IF NOT EXISTS attempts_occurrence ON attempts (occurrence_id);

-- ---------------------------------------------------------------------------------------------
-- Execution history: every finished execution, partitioned by day (UTC) of finished_at.
-- occurrences and attempts are the QUEUE: what is in flight, plus the last hour of finished executions
-- (storage.archive_after_minutes in designs/d2/scale.yaml). Then d2_archive moves each finished occurrence
-- here, with its attempts folded into attempt_log, in one transaction. Retention drops whole days
-- (d2_rotate_history): history is never deleted row by row, so it leaves no dead tuples for vacuum to
-- chase, and the queue tables stay the same size however many days are kept. (Only a one-shot job's own row
-- is deleted by retention, d2_forget_jobs: its idempotency key is remembered that long.)
-- Why an occurrence may leave the UNIQUE (job_id, fire_at) above: it moves only once its job's cursor
-- (materialized_through) is at or past its fire time, and the materialiser only writes fire times after the
-- cursor, which never moves back. A manual run's fire time is the instant it was asked for.
-- The columns are the occurrence's, so all_occurrences below is a plain UNION ALL.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE IF NOT EXISTS execution_history (
    id             bigint NOT NULL,              -- the occurrence's id
    job_id         bigint NOT NULL,              -- no foreign key: a one-shot job goes when its history does
    fire_at        timestamptz NOT NULL,
    tenant_id      text NOT NULL,
    pool           text NOT NULL,
    trigger        text NOT NULL,
    state          text NOT NULL CHECK (state IN ('succeeded', 'dead', 'skipped', 'cancelled')),
    ready_at       timestamptz NOT NULL,
    attempts       integer NOT NULL,
    max_attempts   integer NOT NULL,
    current_token  bigint,
    reason         text,
    created_at     timestamptz NOT NULL,
    finished_at    timestamptz NOT NULL,
    attempt_log    jsonb NOT NULL,               -- its attempts, oldest first, each with the columns of attempts
    archived_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (id, finished_at)
) PARTITION BY RANGE (finished_at);
CREATE INDEX IF NOT EXISTS execution_history_job ON execution_history (job_id, fire_at);

-- Readers of the whole record (status, the API, metrics) read these. The archiver moves a row in one
-- transaction, so one statement sees each execution exactly once: in the queue or in the history.
CREATE OR REPLACE VIEW all_occurrences AS
    SELECT id, job_id, fire_at, tenant_id, pool, trigger, state, ready_at, attempts, max_attempts, current_token,
           reason, created_at, finished_at
      FROM occurrences
    UNION ALL
    SELECT id, job_id, fire_at, tenant_id, pool, trigger, state, ready_at, attempts, max_attempts, current_token,
           reason, created_at, finished_at
      FROM execution_history;
CREATE OR REPLACE VIEW all_attempts AS
    SELECT token, occurrence_id, attempt, worker_id, state, dispatched_at, started_at, heartbeat_at,
           lease_expires_at, finished_at, cancel_requested, error
      FROM attempts
    UNION ALL
    SELECT a.token, h.id, a.attempt, a.worker_id, a.state, a.dispatched_at, a.started_at, a.heartbeat_at,
           a.lease_expires_at, a.finished_at, a.cancel_requested, a.error
      FROM execution_history h
     CROSS JOIN LATERAL jsonb_to_recordset(h.attempt_log) AS a (
           token bigint, attempt integer, worker_id text, state text, dispatched_at timestamptz,
           started_at timestamptz, heartbeat_at timestamptz, lease_expires_at timestamptz,
           finished_at timestamptz, cancel_requested boolean, error text);

-- Queue tables churn: every execution leaves dead versions of an occurrence and an attempt. The default autovacuum
-- trigger is a FRACTION of the table (20%), so the bigger the history, the longer dead entries pile up in the claim's
-- indexes between vacuums (measured: drains slowing round after round on an 11M-row table, never vacuumed). A fixed
-- count keeps vacuum's rhythm independent of table size; the visibility map lets it skip the pages nobody changed.
--
-- Room left free on each page at insert (fillfactor): an update whose new version does not fit on its row's page
-- goes to another page, and PostgreSQL first writes a lock record for the old version (so it can release the page
-- while it looks for room), dirties two pages instead of one, and can never be HOT. Every execution updates its
-- occurrence twice (claim, completion) and its attempt once or more (completion, heartbeats), within seconds of
-- the insert, while the page is still the one being filled. Measured at 4,000 executions/s (pg_waldump over a
-- sustained run): with no room on occurrences and jobs and a fifth on attempts, 7.2 lock records, 23.1 index
-- entries, 3,550 WAL bytes and 0.45 HOT updates per execution; with the settings below 5.3, 22.1, 3,209 and 0.95
-- (an attempt's completion is HOT). The cost is space: these pages start 70% and 50% full.
ALTER TABLE occurrences SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 20000,
                             autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 20000,
                             fillfactor = 70);
-- An attempt is inserted, then updated once or more within seconds (completion, heartbeats): half of each page is
-- left free, so every row on it can be updated in place (HOT, see the attempts table).
ALTER TABLE attempts SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 20000,
                          autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 20000,
                          fillfactor = 50);
-- A job's row is updated at every materialisation (its cursor moves).
ALTER TABLE jobs SET (fillfactor = 70);

-- ---------------------------------------------------------------------------------------------
-- The state machines, as data, and the trigger that makes an illegal transition fail.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE IF NOT EXISTS state_transitions (
    machine     text NOT NULL,
    from_state  text NOT NULL,
    to_state    text NOT NULL,
    PRIMARY KEY (machine, from_state, to_state)
);
INSERT INTO state_transitions (machine, from_state, to_state) VALUES
    ('occurrence', 'new', 'waiting'), ('occurrence', 'new', 'ready'), ('occurrence', 'new', 'skipped'),
    ('occurrence', 'waiting', 'ready'), ('occurrence', 'waiting', 'skipped'), ('occurrence', 'waiting', 'cancelled'),
    ('occurrence', 'ready', 'running'), ('occurrence', 'ready', 'skipped'), ('occurrence', 'ready', 'cancelled'),
    ('occurrence', 'running', 'succeeded'), ('occurrence', 'running', 'ready'),
    ('occurrence', 'running', 'dead'), ('occurrence', 'running', 'cancelled'),
    ('attempt', 'new', 'running'),
    ('attempt', 'running', 'succeeded'), ('attempt', 'running', 'failed'),
    ('attempt', 'running', 'lost'), ('attempt', 'running', 'cancelled'), ('attempt', 'running', 'timed_out')
ON CONFLICT DO NOTHING;

-- Raises for a transition the table does not list; only ever called for one (see the WHEN clauses below).
CREATE OR REPLACE FUNCTION reject_state_transition() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'illegal % transition: % -> %', TG_ARGV[0],
        CASE WHEN TG_OP = 'INSERT' THEN 'new' ELSE OLD.state END, NEW.state
        USING ERRCODE = 'check_violation';
END $$;

-- The triggers are compiled from the table: each one's WHEN clause lists the legal transitions, so a legal
-- transition costs one expression evaluated in C and only an illegal one calls the function above. (A PL/pgSQL
-- trigger that looked the pair up on every row cost ~7 us a row, five rows an execution: 14% of a core at
-- 4,000 executions/s.) The table stays the one place the machines are written down; after changing it, apply
-- this file again (d2kit db init) and the triggers follow.
DO $$
DECLARE
    m record;
BEGIN
    FOR m IN SELECT machine, machine || 's' AS tbl,
                    array_agg(to_state) FILTER (WHERE from_state = 'new') AS births,
                    array_agg(from_state || '>' || to_state) FILTER (WHERE from_state <> 'new') AS moves
             FROM state_transitions GROUP BY machine
    LOOP
        EXECUTE format('CREATE OR REPLACE TRIGGER %I BEFORE INSERT ON %I FOR EACH ROW'
                       ' WHEN (NEW.state <> ALL (%L::text[])) EXECUTE FUNCTION reject_state_transition(%L)',
                       m.tbl || '_state_machine_birth', m.tbl, m.births, m.machine);
        EXECUTE format('CREATE OR REPLACE TRIGGER %I BEFORE UPDATE OF state ON %I FOR EACH ROW'
                       ' WHEN (OLD.state <> NEW.state AND OLD.state || ''>'' || NEW.state <> ALL (%L::text[]))'
                       ' EXECUTE FUNCTION reject_state_transition(%L)',
                       m.tbl || '_state_machine', m.tbl, m.moves, m.machine);
    END LOOP;
END $$;

-- ---------------------------------------------------------------------------------------------
-- Fencing evidence: every write refused because its token was stale.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE IF NOT EXISTS fence_rejections (
    id             bigserial PRIMARY KEY,
    token          bigint NOT NULL,
    path           text NOT NULL CHECK (path IN ('complete', 'ledger_write')),
    occurrence_id  bigint,
    detail         text NOT NULL,
    rejected_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The last line of defence's evidence: every fire time a materialise pass offered that already had its occurrence,
-- so UNIQUE (job_id, fire_at) refused it (d2_materialise). Normally empty -- a replica writes only fire times after
-- the job's cursor, under the job's row lock -- so a row here means a pass replayed a stale cursor.
CREATE TABLE IF NOT EXISTS duplicate_fire_refusals (
    id          bigserial PRIMARY KEY,
    job_id      bigint NOT NULL,
    fire_at     timestamptz NOT NULL,
    refused_by  text NOT NULL DEFAULT current_setting('application_name'),   -- the session (replica) that offered it
    refused_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The worker's side of the lease (lease.py): every attempt whose lease its worker stopped trusting -- by its own
-- monotonic clock (the watchdog), or because a heartbeat answered that the attempt was lost -- reported with the
-- attempt's completion, so after a partition it arrives late. The times are on the DATABASE clock, yet the worker
-- reads no wall clock to get them: each is an upper bound, the attempt's dispatched_at (now() in the claim, which
-- began after the worker sent it) + the monotonic time elapsed since the worker sent the claim.
CREATE TABLE IF NOT EXISTS lease_distrust (
    token               bigint PRIMARY KEY,
    worker_id           text NOT NULL,
    source              text NOT NULL CHECK (source IN ('monotonic_clock', 'database')),
    distrusted_by       timestamptz NOT NULL,   -- the worker stopped trusting the lease at or before this
    handler_stopped_by  timestamptz,            -- its handler returned at or before this (NULL: it never did)
    reported_at         timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The demo "job's own write path": a ledger whose rows remember the highest token that wrote them.
CREATE TABLE IF NOT EXISTS ledger (
    key          text PRIMARY KEY,
    value        text NOT NULL,
    fence_token  bigint NOT NULL,
    written_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- The demo of a NON-idempotent effect, a charge: each applied row adds its amount to the account's balance.
-- A fencing token cannot make it exactly-once: it refuses a stale attempt only AFTER a newer one has written,
-- and a stale attempt that charges first is accepted -- then the retry charges again. What makes it happen once
-- is the write path deduplicating on the occurrence's idempotency key (d2_charge); the token adds protection
-- against a stale attempt that arrives after a newer one. Every try is a row: applied, duplicate or stale.
CREATE TABLE IF NOT EXISTS charges (
    id               bigserial PRIMARY KEY,
    idempotency_key  text NOT NULL,
    account          text NOT NULL,
    amount           bigint NOT NULL,
    token            bigint NOT NULL,
    outcome          text NOT NULL CHECK (outcome IN ('applied', 'duplicate', 'stale')),
    at               timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS charges_key ON charges (idempotency_key);
CREATE TABLE IF NOT EXISTS ledger_effects (
    id           bigserial PRIMARY KEY,
    key          text NOT NULL,
    value        text NOT NULL,
    token        bigint NOT NULL,
    accepted     boolean NOT NULL,
    at           timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- ---------------------------------------------------------------------------------------------
-- Processes: liveness and clock skew of every scheduler and worker (observability only).
-- ---------------------------------------------------------------------------------------------
CREATE TABLE IF NOT EXISTS processes (
    id            text PRIMARY KEY,
    kind          text NOT NULL CHECK (kind IN ('scheduler', 'worker')),
    pool          text,
    pid           integer,
    host          text,
    started_at    timestamptz NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz,
    skew_ms       double precision,      -- process wall clock minus database clock, at its last heartbeat
    stopped_at    timestamptz
);
