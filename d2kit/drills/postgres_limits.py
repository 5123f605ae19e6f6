"""What's your storage? Why not just Postgres? At what scale does SELECT ... WHERE next_run_at <= now() FOR UPDATE
SKIP LOCKED stop working, and what does the next thing look like?

PostgreSQL, because the hard guarantees here -- one occurrence per fire time, fencing tokens, exact caps --
are a unique key, a sequence and row locks in one transactional store, and because partial indexes keep
millions of future rows out of the poll's way: the claim and the materialiser touch about the same pages at
10 thousand scheduled rows as at 10 million. What hurts is not table size but churn -- every claim and
completion leaves dead row versions and dead index entries, and one long transaction holding an old snapshot
stops VACUUM from removing them, so a poll that scans from the bottom of its index wades through more of them
(d2_claim starts at the queue's head instead: claim_bounds) -- and, in this design, every claimer of a pool
queueing on one lock until the pool is split into sub-pools by tenant hash (built: pools.sub_pools, one lock each,
caps still exact). The next steps are batched claims and completions, NOTIFY instead
of tight polling, history kept out of the queue tables in time partitions that are dropped rather than
deleted from (built here: execution_history), per-table autovacuum, and no long transactions on the primary;
past one primary's write rate, shard pools across databases or move the ready queue to a log such as Kafka,
keeping PostgreSQL as the record.

How the drill does it: it measures the real claim (d2_claim + d2_complete cycles) and the real materialiser
pass with a small table and a large one (1M scheduled rows in quick mode, 10M in full, bulk-loaded with
generate_series), shows EXPLAIN (ANALYZE, BUFFERS) of the claim statement as deployed (read from pg_proc) and
of the due-jobs poll, then churns the queue while a REPEATABLE READ transaction holds a snapshot open, and
finally runs four claimers against one pool. ``measure_queries`` is the reusable entry for the benchmarks.
"""

from __future__ import annotations

import contextlib
import re
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.exc import ProgrammingError

from d2kit.drills.harness import Drill, Series
from reference_impl import materializer, tenants

FOLLOW_UP = 6
TENANTS = 5
POOL = "short"
BATCH = 10
DUE_JOBS = 500             # due one-shot jobs for a materialise pass (each pass is rolled back)
# The claim statement inside d2_claim, and the plpgsql variables it reads, bound to literals for EXPLAIN.
CLAIM_STATEMENT = re.compile(r"RETURN QUERY\s+(WITH\b.*?);\s*GET DIAGNOSTICS", re.S)
CLAIM_VARIABLES = {"p_pool": f"'{POOL}'", "p_worker": "'limits-explain'", "v_left": str(BATCH),
                   "p_lease_seconds": "30", "v_due_by": "now()", "v_sub_pools": "1", "v_sub": "0"}


@dataclass
class SizeMeasurement:
    """The claim and the materialiser, measured at one table size."""
    scheduled_rows: int
    claim_ms: dict[str, float]
    materialise_pass_ms: dict[str, float]
    claim_buffers: int
    claim_plan: str
    due_poll_plan: str
    sizes_mb: dict[str, float] = field(default_factory=dict)


# -- loading ----------------------------------------------------------------------------------------------
def prepare(engine: Engine) -> None:
    """Tenants to claim for, and DUE_JOBS one-shot jobs due now for materialise passes."""
    with engine.begin() as conn:
        for i in range(TENANTS):
            tenants.create_tenant(conn, f"t{i}")
        conn.execute(text(
            "INSERT INTO jobs (tenant_id, name, handler, pool, schedule_kind, run_at, materialized_through,"
            " next_fire_at) SELECT 't' || (g % :t), 'due-' || g, 'noop', :pool, 'once', now(), '0001-01-01', now()"
            " FROM generate_series(1, :n) g"), {"t": TENANTS, "pool": POOL, "n": DUE_JOBS})


def add_scheduled(engine: Engine, rows: int) -> float:
    """Bulk-load ``rows`` future occurrences (state 'ready', ready_at a day or more ahead) over rows/10 future
    jobs -- what 10M scheduled jobs look like to the poll. Returns seconds taken."""
    started = time.monotonic()
    with engine.begin() as conn:
        _skip_triggers_if_allowed(conn)
        first = conn.execute(text("SELECT coalesce(max(id), 0) + 1 FROM jobs")).scalar_one()
        jobs = max(1, rows // 10)
        conn.execute(text(
            "INSERT INTO jobs (id, tenant_id, name, handler, pool, schedule_kind, run_at, materialized_through,"
            " next_fire_at) SELECT g, 't' || (g % :t), 'future-' || g, 'noop', :pool, 'once', f, '0001-01-01', f"
            " FROM generate_series(CAST(:a AS bigint), CAST(:b AS bigint)) g,"
            " LATERAL (SELECT now() + interval '1 day' + g * interval '1 second' AS f) x"),
            {"t": TENANTS, "pool": POOL, "a": first, "b": first + jobs - 1})
        conn.execute(text(
            "INSERT INTO occurrences (job_id, fire_at, tenant_id, pool, state, ready_at, max_attempts)"
            " SELECT j, f, 't' || (j % :t), :pool, 'ready', f, 3"
            " FROM generate_series(1, CAST(:n AS bigint)) g,"
            " LATERAL (SELECT :first + g % :jobs AS j, now() + interval '1 day' + g * interval '1 second' AS f) x"),
            {"t": TENANTS, "pool": POOL, "n": rows, "first": first, "jobs": jobs})
        conn.execute(text("SELECT setval('jobs_id_seq', (SELECT max(id) FROM jobs))"))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE jobs, occurrences"))
    return time.monotonic() - started


def add_ready(engine: Engine, rows: int) -> None:
    """``rows`` occurrences ready now (due in the past), for claims to take."""
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO occurrences (job_id, fire_at, tenant_id, pool, state, ready_at, max_attempts)"
            " SELECT j.id, now() - interval '1 hour' - g * interval '1 millisecond', j.tenant_id, :pool, 'ready',"
            "        now() - interval '1 hour' - g * interval '1 millisecond', 3"
            " FROM generate_series(1, :n) g JOIN jobs j ON j.id = 1 + g % :due"),
            {"pool": POOL, "n": rows, "due": DUE_JOBS})


def _skip_triggers_if_allowed(conn) -> None:
    """The rows are valid by construction ('ready' is a legal first state, the jobs exist): skip the state-machine
    trigger and FK checks for the bulk load when we may (superuser), ~3x faster; otherwise keep them."""
    savepoint = conn.begin_nested()
    try:
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        savepoint.commit()
    except ProgrammingError:
        savepoint.rollback()


# -- measuring ------------------------------------------------------------------------------------------------
def claim_cycle(engine: Engine, worker: str = "limits-probe") -> tuple[float, int]:
    """One real claim (d2_claim) of up to BATCH, then their completion. Returns (claim ms, rows claimed)."""
    started = time.perf_counter()
    with engine.begin() as conn:
        tokens = [r[0] for r in conn.execute(text("SELECT token FROM d2_claim(:p, :w, :n, 30)"),
                                             {"p": POOL, "w": worker, "n": BATCH})]
    elapsed = (time.perf_counter() - started) * 1000
    if tokens:
        with engine.begin() as conn:
            conn.execute(text("SELECT * FROM d2_complete(:t, :ok, :e, :s)"), {
                "t": tokens, "ok": [True] * len(tokens), "e": [None] * len(tokens), "s": [None] * len(tokens)})
    return elapsed, len(tokens)


def materialise_pass_ms(engine: Engine) -> float:
    """One real materialiser pass over the DUE_JOBS due jobs, rolled back so the next pass finds them again."""
    with engine.connect() as conn:
        started = time.perf_counter()
        materializer.materialise_due(conn)
        elapsed = (time.perf_counter() - started) * 1000
        conn.rollback()
    return elapsed


def claim_plan(engine: Engine, from_bottom: bool = False) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of the claim statement exactly as deployed: taken from d2_claim's source in
    pg_proc, its variables bound to literals, run in a transaction that is rolled back. ``from_bottom``: as if
    there were no claim_bounds -- every scan from the bottom of its index (the control for what they save)."""
    with engine.connect() as conn:
        if from_bottom:
            conn.execute(text("UPDATE claim_bounds SET ready_from = '-infinity', running_token_from = 0,"
                              " running_before = 0"))
        source = conn.execute(text("SELECT prosrc FROM pg_proc WHERE proname = 'd2_claim'")).scalar_one()
        statement = CLAIM_STATEMENT.search(source).group(1)
        for variable, literal in CLAIM_VARIABLES.items():
            statement = re.sub(rf"\b{variable}\b", literal, statement)
        plan = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) " + statement).all()
        conn.rollback()
    return "\n".join(row[0] for row in plan)


def due_poll_plan(engine: Engine) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of the materialiser's due-jobs poll (materializer.DUE_JOBS_SQL)."""
    with engine.connect() as conn:
        rows = conn.execute(text("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) " + materializer.DUE_JOBS_SQL.text),
                            {"lookahead": materializer.LOOKAHEAD.total_seconds(),
                             "n": materializer.JOBS_PER_PASS}).all()
        conn.rollback()
    return "\n".join(row[0] for row in rows)


def top_buffers(plan: str) -> int:
    """Shared buffers (hit + read) the whole statement touched: the top node's Buffers line."""
    line = next(line for line in plan.splitlines() if "Buffers: shared" in line)
    return sum(int(n) for n in re.findall(r"(?:hit|read)=(\d+)", line))


def heap_fetches(plan: str) -> int:
    """Heap rows the statement visited from its index-only scans: each dead index entry it walks costs one."""
    return sum(int(n) for n in re.findall(r"Heap Fetches: (\d+)", plan))


def sizes_mb(engine: Engine) -> dict[str, float]:
    with engine.connect() as conn:
        return {name: round(size / 2**20, 1) for name, size in conn.execute(text(
            "SELECT relname, pg_relation_size(oid) FROM pg_class WHERE relname IN ('occurrences', 'jobs',"
            " 'occurrences_ready', 'occurrences_pkey', 'occurrences_job_id_fire_at_key', 'jobs_due')"
            " ORDER BY relname"))}


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50": round(statistics.median(ordered), 2), "p99": round(ordered[int(len(ordered) * 0.99) - 1], 2),
            "n": len(ordered)}


def measure_queries(engine: Engine, cycles: int = 200) -> SizeMeasurement:
    """THE reusable measurement: at the database's current size, the claim's latency over ``cycles`` real
    claim/complete cycles, a materialise pass's latency, both plans and the claim's buffer count.
    Needs ``prepare`` once and enough ready rows (``add_ready``) for ``cycles`` x BATCH claims."""
    with engine.connect() as conn:
        scheduled = conn.execute(text("SELECT count(*) FROM occurrences WHERE ready_at > now()")).scalar_one()
    claims = [claim_cycle(engine)[0] for _ in range(cycles)]
    passes = [materialise_pass_ms(engine) for _ in range(max(5, cycles // 20))]
    plan = claim_plan(engine)
    return SizeMeasurement(scheduled, _percentiles(claims), _percentiles(passes), top_buffers(plan), plan,
                           due_poll_plan(engine), sizes_mb(engine))


@contextlib.contextmanager
def old_snapshot(engine: Engine) -> Iterator[None]:
    """A long REPEATABLE READ transaction holding its snapshot: an analytics query, a forgotten psql session."""
    holder = engine.connect()
    try:
        holder.exec_driver_sql("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.exec_driver_sql("SELECT count(*) FROM pools").all()  # the snapshot is taken here
        yield
    finally:
        holder.rollback()
        holder.close()


def vacuum_dead_tuples(engine: Engine) -> int:
    """VACUUM the queue table and return the dead row versions it could NOT remove."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM occurrences")
        time.sleep(0.6)  # the statistics collector reports the vacuum's result asynchronously
        return conn.execute(text(
            "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'occurrences'")).scalar_one()


def concurrent_claimers(engine: Engine, claimers: int, seconds: float) -> dict[str, Any]:
    """``claimers`` threads claiming from one pool for ``seconds``: claims/s, and how often pg_stat_activity
    caught them waiting on a lock (the sub-pool lock every claim takes)."""
    stop = threading.Event()
    done: list[int] = []
    waits = {"samples": 0, "waiting_on_lock": 0}

    def claim_loop(i: int) -> None:
        n = 0
        while not stop.is_set():
            n += claim_cycle(engine, f"limits-claimer-{i}")[1] > 0
        done.append(n)

    threads = [threading.Thread(target=claim_loop, args=(i,)) for i in range(claimers)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + seconds
    with engine.connect() as conn:
        while time.monotonic() < deadline:
            row = conn.execute(text(
                "SELECT count(*), count(*) FILTER (WHERE wait_event_type = 'Lock') FROM pg_stat_activity"
                " WHERE datname = current_database() AND query LIKE '%d2_claim%' AND state = 'active'"
                " AND pid <> pg_backend_pid()")).one()
            conn.rollback()
            waits["samples"] += row[0]
            waits["waiting_on_lock"] += row[1]
            time.sleep(0.01)
    stop.set()
    for thread in threads:
        thread.join()
    return {"claimers": claimers, "claim_cycles_per_s": round(sum(done) / seconds, 1),
            "active_claims_seen_waiting_on_a_lock": f"{waits['waiting_on_lock']} of {waits['samples']}"}


# -- the drill ----------------------------------------------------------------------------------------------
def run(drill: Drill) -> None:
    large = 1_000_000 if drill.quick else 10_000_000
    churn_cycles = 1_000 if drill.quick else 3_000
    drill.live_stats = False  # counting a 10M-row table twice a second would be the load
    drill.show_lanes = False  # one probe process, no workers: the panels are the picture
    drill.scale("scheduled rows", f"10,000 vs {large:,} future occurrences (10M in full mode)"
                if drill.quick else f"10,000 vs {large:,} future occurrences")
    drill.scale("churn", f"{churn_cycles * BATCH:,} claims+completions while an old snapshot is held")

    with drill.phase("small table: 10k scheduled rows"):
        prepare(drill.engine)
        add_scheduled(drill.engine, 10_000)
        add_ready(drill.engine, BATCH * (2 * 200 + 2 * churn_cycles + 4_000))  # enough for every claim below
        small = measure_queries(drill.engine)
    with drill.phase(f"large table: {large:,} scheduled rows"):
        load_s = add_scheduled(drill.engine, large - 10_000)
        big = measure_queries(drill.engine)
    latency = Series("claim latency", "ms")
    drill.series.append(latency)

    with drill.phase("churn with an old snapshot held open"):
        baseline = _sampled(drill, latency, churn_cycles // 5)
        with drill.fault("REPEATABLE READ transaction holds a snapshot"), old_snapshot(drill.engine):
            held_tail = _sampled(drill, latency, churn_cycles)[-churn_cycles // 5:]
            time.sleep(1.1)   # past claim_bounds' refresh period: the next claim refreshes them, as it would in use
            claim_cycle(drill.engine)
            walked = {"from_its_bounds": heap_fetches(claim_plan(drill.engine)),
                      "from_the_bottom": heap_fetches(claim_plan(drill.engine, from_bottom=True))}
            dead_while_held = vacuum_dead_tuples(drill.engine)
        dead_after_release = vacuum_dead_tuples(drill.engine)
        after_vacuum = _sampled(drill, latency, churn_cycles // 5)
    with drill.phase("lock contention: 1 vs 4 claimers on one pool"):
        one, four = concurrent_claimers(drill.engine, 1, 2.0), concurrent_claimers(drill.engine, 4, 2.0)

    _verdict(drill, small, big, large)
    drill.check("an old snapshot stops cleanup: VACUUM could not remove the churn's dead rows while it was held, "
                "and could once it was gone", dead_while_held >= churn_cycles * BATCH // 2
                and dead_after_release < dead_while_held // 10,
                {"dead_rows_vacuum_left_while_held": dead_while_held,
                 "dead_rows_vacuum_left_after_release": dead_after_release})
    drill.check("...but the claim does not walk them: it starts at the queue's head (claim_bounds) and visits under "
                "a tenth of the heap rows a scan from the bottom of its indexes would, which walks at least one "
                "dead entry per row claimed during the hold",
                walked["from_the_bottom"] >= churn_cycles * BATCH
                and walked["from_its_bounds"] * 10 < walked["from_the_bottom"],
                {"heap_fetches": walked, "rows_claimed_while_held": churn_cycles * BATCH})
    with drill.engine.connect() as conn:
        open_attempts = conn.execute(text("SELECT count(*) FROM attempts WHERE state = 'running'")).scalar_one()
    drill.check("nothing claimed while measuring was left dispatched but not completed", open_attempts == 0,
                {"attempts_running": open_attempts})
    drill.metrics.update({
        f"load {large:,} rows (s)": round(load_s, 1),
        "claim ms, 10k rows": small.claim_ms, f"claim ms, {large:,} rows": big.claim_ms,
        "materialise pass ms (500 due jobs), 10k rows": small.materialise_pass_ms,
        f"materialise pass ms (500 due jobs), {large:,} rows": big.materialise_pass_ms,
        "claim buffers, 10k -> large": f"{small.claim_buffers} -> {big.claim_buffers}",
        "sizes MB at the large size": big.sizes_mb,
        "claim ms p50: no snapshot -> end of held snapshot -> after VACUUM": " -> ".join(
            str(_percentiles(part)["p50"]) for part in (baseline, held_tail, after_vacuum)),
        "claimers on one pool": [one, four],
    })
    drill.sections += [
        ("Where SKIP LOCKED polling starts to hurt, measured", _where_it_hurts(small, big, large, baseline,
                                                                               held_tail, walked, one, four)),
        (f"Claim plan at {large:,} scheduled rows (d2_claim's statement as deployed)", _code(big.claim_plan)),
        ("Claim plan at 10,000 scheduled rows", _code(small.claim_plan)),
        (f"Due-jobs poll plan at {large:,} scheduled rows", _code(big.due_poll_plan)),
        ("Due-jobs poll plan at 10,000 scheduled rows", _code(small.due_poll_plan)),
    ]


def _sampled(drill: Drill, series: Series, cycles: int) -> list[float]:
    """``cycles`` claim cycles, each latency also drawn on the timeline; returns the latencies."""
    samples = []
    for _ in range(cycles):
        samples.append(claim_cycle(drill.engine)[0])
        series.points.append((drill.now(), samples[-1]))
    return samples


def _verdict(drill: Drill, small: SizeMeasurement, big: SizeMeasurement, large: int) -> None:
    # Only the large table is a claim about the design: on a tiny table a Seq Scan is the planner's right call.
    for label, plan, index, table in (("claim", big.claim_plan, "occurrences_ready", "occurrences"),
                                      ("materialiser's due-jobs poll", big.due_poll_plan, "jobs_due", "jobs")):
        drill.check(f"at {large:,} scheduled rows the {label} reads through the partial index {index} "
                    f"(no Seq Scan on {table})", index in plan and f"Seq Scan on {table}" not in plan,
                    {"scans": [line.strip() for line in plan.splitlines() if "Scan" in line][:6]})
    drill.check(f"the claim's work does not grow with the table: at {large:,} rows it touches at most 2x the "
                "buffers it touches at 10k", big.claim_buffers <= 2 * small.claim_buffers,
                {"buffers_10k": small.claim_buffers, f"buffers_{large}": big.claim_buffers})


def _code(plan: str) -> str:
    return "```text\n" + plan + "\n```"


def _where_it_hurts(small, big, large, baseline, held_tail, walked, one, four) -> str:
    return "\n".join([
        f"* **Table size does not hurt (yet).** Claim p50 {small.claim_ms['p50']} ms at 10k scheduled rows, "
        f"{big.claim_ms['p50']} ms at {large:,}; the claim touched {small.claim_buffers} -> {big.claim_buffers} "
        "buffers. The partial index on `state = 'ready'` is ordered by (pool, tenant, ready_at, id), so future "
        "rows sit past the end of every probe's range.",
        "* **Churn with an old snapshot does, unless the claim starts at the head.** While one REPEATABLE READ "
        "transaction stays open, every claim and completion leaves dead row versions and dead index entries that "
        "VACUUM may not remove, and a probe from the bottom of the index walks all of them (the PlanetScale and "
        "brandur write-ups cited in the anchors show that curve). d2_claim starts its scans where the queue's head "
        f"was at its last refresh (claim_bounds, at most 1 s old): claim p50 {_percentiles(baseline)['p50']} ms "
        f"before, {_percentiles(held_tail)['p50']} ms at the end of the hold, {walked['from_its_bounds']:,} heap "
        f"rows visited from its bounds against {walked['from_the_bottom']:,} from the bottom. VACUUM still cannot "
        "clean up while the snapshot is open, so the tables grow: in production this is the analytics query or "
        "the idle-in-transaction session, and it belongs on a replica.",
        f"* **Claimers on one pool serialise.** {one['claim_cycles_per_s']} claim cycles/s (batch {BATCH}) with one "
        f"claimer, {four['claim_cycles_per_s']} with four (active claims seen waiting on a lock: "
        f"{four['active_claims_seen_waiting_on_a_lock']}). That is the price of exact per-tenant caps and one "
        "admission bucket per pool: the claim's lock (one per sub-pool; this pool is one).",
        "",
        "**What the design does next, in order:** batch the claim and the completion (one round trip for many "
        "occurrences); replace tight polling with LISTEN/NOTIFY plus a slow poll; keep history out of the hot "
        "table (built: finished executions move to execution_history after an hour, partitioned by day, and "
        "retention drops whole days instead of deleting rows) with autovacuum tuned per table; forbid long "
        "transactions on the primary (statement and idle-in-transaction timeouts, analytics on a replica); split "
        "a hot pool into sub-pools by tenant hash (built: pools.sub_pools; caps stay exact per tenant); past one "
        "primary's write rate, shard pools across "
        "databases or move the ready queue to a partitioned log (Kafka) and keep PostgreSQL as the system of "
        "record for occurrences and attempts.",
    ])
