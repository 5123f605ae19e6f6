"""The benchmark rig: a scratch database, a cluster of real processes, offered load, and what they recorded.

Everything measured is read back from the database's own history, on the database clock:

* **fire lag** = ``attempts.started_at - occurrences.fire_at`` (scheduled instant -> handler start);
* **throughput** = attempts that succeeded per second of ``finished_at``;
* **backlog** = occurrences due but not yet claimed, plus jobs due but not yet materialised, sampled each second;
* **lost** = scheduled jobs without a succeeded occurrence once the run has drained.

CPU and peak RSS come from ``/proc`` (psutil), per process, grouped by component: scheduler, worker, postgres
(the server processes of the benchmark's database plus the shared auxiliary ones) and harness (this process: the
load generator and the samplers). The machine's total CPU is measured too, so the sum can be checked against it.
"""

from __future__ import annotations

import math
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy import Engine, text
from sqlalchemy.exc import ProgrammingError

from d2kit import capacity
from d2kit.bench.machine_load import machine_times
from reference_impl import cleaner, db
from reference_impl.cluster import LocalCluster
from reference_impl.worker import WorkerConfig

LEAD_SECONDS = 3.0            # jobs are written this far ahead of their fire time (> the materialiser's lookahead)
GENERATOR_TICK_SECONDS = 0.1
SAMPLE_SECONDS = 1.0
EPOCH = "0001-01-01 00:00:00+00"  # a one-shot job's materialiser cursor before it fires (jobs.submit uses the same)

# One-shot no-op jobs i = first..last, fire time start + i/rate, spread over the bench tenants. The same row
# jobs.submit() writes, in bulk: the generator must cost little next to what it measures.
SCHEDULE_JOBS_SQL = text(
    "INSERT INTO jobs (tenant_id, name, handler, pool, schedule_kind, run_at, materialized_through, next_fire_at)"
    " SELECT 'bench-' || (i % :tenants), 'bench', 'noop', 'short', 'once', f.at, CAST(:epoch AS timestamptz), f.at"
    " FROM generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) AS i,"
    "      LATERAL (SELECT CAST(:start AS timestamptz) + make_interval(secs => i / CAST(:rate AS float8))) AS f (at)")
# A backlog as a 2-hour outage leaves it: jobs already materialised, occurrences ready and overdue.
BACKLOG_SQL = text(
    "WITH j AS ("
    "  INSERT INTO jobs (tenant_id, name, handler, pool, schedule_kind, run_at, materialized_through, next_fire_at)"
    "  SELECT 'bench-' || (i % :tenants), 'backlog', 'noop', 'short', 'once', now() - interval '1 second',"
    "         now() - interval '1 second', NULL"
    "  FROM generate_series(1, CAST(:n AS integer)) AS i RETURNING id, tenant_id, run_at)"
    " INSERT INTO occurrences (job_id, fire_at, tenant_id, pool, state, ready_at, max_attempts)"
    " SELECT id, run_at, tenant_id, 'short', 'ready', run_at, 3 FROM j")
# Finished executions as a system that has been running leaves them in the queue tables: one-shot jobs that fired,
# each with a succeeded occurrence and attempt, finished 30 minutes ago -- inside the hour before the archiver moves
# them to the history partitions, so they stay put while the benchmark runs. Written as already finished, which the
# state-machine triggers rightly refuse for an INSERT (a row is born new -> ready), so this one bulk load skips
# triggers for its own transaction.
HISTORY_SQL = text(
    "WITH j AS ("
    "  INSERT INTO jobs (tenant_id, name, handler, pool, schedule_kind, run_at, materialized_through, next_fire_at)"
    "  SELECT 'bench-' || (i % :tenants), 'history', 'noop', 'short', 'once', now() - interval '30 minutes',"
    "         now() - interval '30 minutes', NULL"
    "  FROM generate_series(1, CAST(:n AS integer)) AS i RETURNING id, tenant_id, run_at),"
    " o AS ("
    "  INSERT INTO occurrences (job_id, fire_at, tenant_id, pool, state, ready_at, attempts, max_attempts,"
    "                           current_token, finished_at)"
    "  SELECT id, run_at, tenant_id, 'short', 'succeeded', run_at, 1, 3, nextval('fencing_tokens'), run_at FROM j"
    "  RETURNING id, current_token, fire_at)"
    " INSERT INTO attempts (token, occurrence_id, attempt, worker_id, state, dispatched_at, started_at,"
    "                       lease_expires_at, finished_at)"
    " SELECT current_token, id, 1, 'history', 'succeeded', fire_at, fire_at, fire_at, fire_at FROM o")
HISTORY_ROWS = 100_000  # every rig starts with this much history: a benchmark of a system that has been running
HISTORY_CHUNK = 1_000_000
# The samplers run every second or faster, so they must read what the claim reads -- one range of the partial
# index per (pool, tenant), stopping at now() -- never the table: with 10M rows scheduled for later a plain
# count(*) WHERE ready_at <= now() was a sequential scan several times a second, and a flattened join chose a
# 50 ms plan against a fresh backlog. ORDER BY (ready_at, id) + LIMIT, exactly as in d2_claim, keeps each
# lateral subquery a per-(pool, tenant) range scan of occurrences_ready that the planner cannot flatten.
# By stage, so a run that falls behind says where: due occurrences no worker has claimed yet, and due fire times
# no scheduler has materialised yet.
BACKLOG_NOW_SQL = text(
    "SELECT (SELECT count(*) FROM pools p CROSS JOIN tenants t CROSS JOIN LATERAL ("
    "          SELECT 1 FROM occurrences o WHERE o.state = 'ready' AND o.pool = p.name"
    "          AND o.tenant_id = t.id AND o.ready_at <= now() ORDER BY o.ready_at, o.id LIMIT 10000000) due)"
    "       AS unclaimed,"
    "       (SELECT count(*) FROM jobs WHERE next_fire_at <= now() AND NOT paused AND deleted_at IS NULL)"
    "       AS unmaterialised")
# "Are at least :cap occurrences due?" for the saturation loop: bounded work, whatever the backlog.
DUE_AT_LEAST_SQL = text(
    "SELECT count(*) >= :cap FROM (SELECT 1 FROM pools p CROSS JOIN tenants t CROSS JOIN LATERAL ("
    "    SELECT 1 FROM occurrences o WHERE o.state = 'ready' AND o.pool = p.name AND o.tenant_id = t.id"
    "    AND o.ready_at <= now() ORDER BY o.ready_at, o.id LIMIT :cap) due LIMIT :cap) x")
# Nothing due, claimed or unmaterialised. Bench jobs allow overlap, so none is ever 'waiting'.
IDLE_SQL = text(
    "SELECT NOT EXISTS (SELECT 1 FROM pools p CROSS JOIN tenants t CROSS JOIN LATERAL ("
    "                     SELECT 1 FROM occurrences o WHERE o.state = 'ready' AND o.pool = p.name"
    "                     AND o.tenant_id = t.id AND o.ready_at <= now() ORDER BY o.ready_at, o.id LIMIT 1) due)"
    "   AND NOT EXISTS (SELECT 1 FROM occurrences WHERE state = 'running')"
    "   AND NOT EXISTS (SELECT 1 FROM jobs WHERE next_fire_at <= now() AND NOT paused AND deleted_at IS NULL)")
# The measurements below read the whole record (all_occurrences / all_attempts, schema.sql): with a short archive
# delay the archiver moves executions to the history partitions while the run is still going.
LAG_SQL = text(
    "SELECT count(*) AS n,"
    "       percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY lag_ms) AS p,"
    "       max(lag_ms) AS max"
    " FROM (SELECT extract(epoch FROM a.started_at - o.fire_at) * 1000 AS lag_ms"
    "       FROM all_occurrences o JOIN all_attempts a ON a.token = o.current_token"
    "       WHERE o.fire_at >= :since AND o.fire_at < :until AND a.started_at IS NOT NULL) x")
COMPLETED_SQL = text(
    "SELECT count(*), min(finished_at), max(finished_at) FROM all_attempts"
    " WHERE state = 'succeeded' AND finished_at >= :since AND finished_at < :until")
LOST_SQL = text(
    "SELECT count(*) FROM jobs j WHERE j.run_at >= :since AND j.run_at < :until"
    " AND NOT EXISTS (SELECT 1 FROM all_occurrences o WHERE o.job_id = j.id AND o.state = 'succeeded')")
SIZES_SQL = text("SELECT (SELECT count(*) FROM occurrences), (SELECT count(*) FROM execution_history)")
POSTGRES_PIDS_SQL = text("SELECT pid FROM pg_stat_activity WHERE datname = current_database() OR datname IS NULL")
SERIES_SQL = text(
    "WITH done AS ("
    "  SELECT floor(extract(epoch FROM a.finished_at - :origin))::int AS second, count(*) AS completed"
    "  FROM all_attempts a WHERE a.state = 'succeeded' AND a.finished_at >= :origin AND a.finished_at < :until"
    "  GROUP BY 1"
    "), lag AS ("
    "  SELECT floor(extract(epoch FROM o.fire_at - :origin))::int AS second,"
    "         percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM a.started_at - o.fire_at) * 1000) AS p99"
    "  FROM all_occurrences o JOIN all_attempts a ON a.token = o.current_token"
    "  WHERE o.fire_at >= :origin AND o.fire_at < :until AND a.started_at IS NOT NULL GROUP BY 1"
    ")"
    " SELECT coalesce(d.second, l.second) AS second, coalesce(d.completed, 0) AS completed, l.p99"
    " FROM done d FULL JOIN lag l ON l.second = d.second ORDER BY 1")


Progress = Callable[[str], None]  # how a long run reports what it is doing (a rich spinner, or nothing)


def quiet(_: str) -> None:
    """The progress callback that says nothing."""


@dataclass(frozen=True)
class ClusterShape:
    """What runs: scheduler replicas and short-pool workers, with the worker knobs the batch curve varies."""
    schedulers: int = 1
    workers: int = 2
    # Slots per worker. In flight = rate x cycle (Little's law), and on a disk whose WAL flush takes milliseconds a
    # claim-run-complete cycle is ~15 ms, so 2 x 32 slots capped the rate near 4,000/s by construction: at 4,000/s
    # offered (alternating, machine alone) 32 slots gave p99 lag 31 and 328 ms, 64 gave 34 and 33 ms for less CPU.
    # The peers get the same number (peers.run_peer).
    concurrency: int = 64
    claim_batch: int = 64
    # At the peak every poll finds a few rows, so the period sets the claim round trips per execution. With claiming
    # ahead it no longer sets the fire lag, so the bench runs the worker's own default, 50 ms: the poll_period part
    # measured the least CPU there, with about the same p99 lag as the shorter periods (load/results/latest.json).
    poll_seconds: float = 0.05
    # None: the worker's default, claiming what comes due within two poll periods (worker.py); 0 turns claiming
    # ahead off (the poll_period part's control).
    claim_ahead_seconds: float | None = None
    tenants: int = 10
    # The short pool's claim split by tenant hash (pools.sub_pools): one claimer per sub-pool at a time. One, the
    # default: two (the bench's 10 tenants hash 5 and 5) raised throughput at saturation but also the p99 fire lag at
    # moderate rates (fresh clone of 72bd9fc, alone: the maximum-rate search stopped at 2,000/s on lag), for a
    # reason not yet found.
    sub_pools: int = 1
    # How long finished executions stay in the queue tables; the history part shortens it to archive at peak.
    archive_after_seconds: float = cleaner.DEFAULT_ARCHIVE_AFTER.total_seconds()

    def describe(self) -> dict[str, float]:
        return {"schedulers": self.schedulers, "worker_processes": self.workers, "concurrency": self.concurrency,
                "claim_batch": self.claim_batch, "poll_seconds": self.poll_seconds,
                "claim_ahead_seconds": self.claim_ahead, "tenants": self.tenants, "sub_pools": self.sub_pools,
                "archive_after_seconds": self.archive_after_seconds}

    @property
    def claim_ahead(self) -> float:
        """The claim-ahead window the workers run with (their own default when the shape leaves it unset)."""
        return WorkerConfig("bench", poll_seconds=self.poll_seconds,
                            claim_ahead_seconds=self.claim_ahead_seconds).claim_ahead


# -- CPU and memory of every process, by component -----------------------------------------------------------
def postgres_pids(engine: Engine) -> list[int]:
    """The server processes working for this database: its backends and autovacuum workers, plus the shared
    auxiliary processes (WAL writer, checkpointer, ...). Other databases' backends on the same server -- other
    people's tests on this shared machine -- are not ours and are left out."""
    try:
        with engine.begin() as conn:
            return list(conn.execute(POSTGRES_PIDS_SQL).scalars())
    except Exception:  # a sample lost to a busy server is a gap, not a failed run
        return []


def peak_rss_mb(pid: int) -> float | None:
    """The kernel's high-water mark of resident memory (VmHWM): the true peak, not a sampled one."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class ProcessMeter:
    """CPU seconds per component between ``start()`` and ``stop()``; sampled meanwhile so that processes which
    come and go (database backends) are counted too."""

    def __init__(self, components: dict[str, list[int]], engine: Engine):
        self.components = components  # component -> pids
        self.engine = engine          # postgres' processes are re-listed at every sample
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._owner: dict[int, str] = {}
        self._started = False
        self._t0 = 0.0
        self._machine0 = (0.0, 0.0)
        self.seconds = 0.0
        self.machine_busy = 0.0
        self.machine_total = 0.0

    def sample(self) -> None:
        owners = {pid: name for name, pids in self.components.items() for pid in pids}
        owners.update({pid: "postgres" for pid in postgres_pids(self.engine)})
        for pid, owner in owners.items():
            try:
                times = psutil.Process(pid).cpu_times()
            except psutil.Error:
                continue
            used = times.user + times.system
            self._owner[pid] = owner
            # A process first seen after start() was born during the window: all its CPU counts.
            self._first.setdefault(pid, used if not self._started else 0.0)
            self._last[pid] = used

    def start(self) -> None:
        self.sample()
        self._started = True
        self._t0 = time.monotonic()
        self._machine0 = machine_times()

    def stop(self) -> None:
        self.sample()
        self.seconds = time.monotonic() - self._t0
        total, idle = machine_times()
        self.machine_total = total - self._machine0[0]
        self.machine_busy = self.machine_total - (idle - self._machine0[1])

    def cpu_percent(self) -> dict[str, float]:
        """Per component, in percent of the WHOLE machine (100 = every core busy), plus 'machine' (everything
        running on it, including what is not ours)."""
        cores = psutil.cpu_count() or 1
        per: dict[str, float] = {}
        for pid, owner in self._owner.items():
            per[owner] = per.get(owner, 0.0) + self._last[pid] - self._first[pid]
        result = {name: round(100 * used / (max(self.seconds, 1e-9) * cores), 1) for name, used in sorted(per.items())}
        result["machine"] = round(100 * self.machine_busy / max(self.machine_total, 1e-9), 1)
        # Everything else on this shared machine (other people's tests, drills, browsers): the noise floor.
        result["other_processes"] = round(max(0.0, result["machine"] - sum(v for k, v in result.items()
                                                                          if k != "machine")), 1)
        return result


def our_cpu_percent(cpu: dict[str, float] | None) -> float | None:
    """CPU of our processes and PostgreSQL, as % of the machine: other users of a shared machine left out."""
    return None if not cpu else round(sum(v for k, v in cpu.items() if k not in ("machine", "other_processes")), 1)


def machine() -> dict[str, object]:
    """The machine the numbers were measured on."""
    model = "unknown"
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cores": psutil.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "cpu_model": model}


# -- the rig ---------------------------------------------------------------------------------------------------
@dataclass
class Rig:
    """A scratch database with the schema and the bench tenants, and a cluster of real processes on it."""
    url: str
    engine: Engine
    cluster: LocalCluster
    shape: ClusterShape

    def start_workers(self, count: int | None = None, first: int = 1) -> None:
        shape = self.shape
        for i in range(first, first + (shape.workers if count is None else count)):
            self.cluster.start_worker(f"bench-worker-{i}", pool="short", concurrency=shape.concurrency,
                                      extra_args=["--batch", str(shape.claim_batch), "--poll", str(shape.poll_seconds),
                                                  "--ahead", str(shape.claim_ahead)])

    def wait_registered(self, timeout: float = 60.0) -> None:
        """Until every cluster member has registered itself in ``processes`` (imports take a second or two)."""
        deadline = time.monotonic() + timeout
        wanted = {name for name, member in self.cluster.members.items() if member.alive}
        while time.monotonic() < deadline:
            with self.engine.begin() as conn:
                seen = set(conn.execute(text("SELECT id FROM processes WHERE stopped_at IS NULL")).scalars())
            if wanted <= seen:
                return
            dead = [name for name, alive in self.cluster.alive().items() if not alive]
            if dead:
                raise RuntimeError(f"cluster members exited at start: {dead} (logs in {self.cluster.log_dir})")
            time.sleep(0.2)
        raise TimeoutError(f"not registered after {timeout:.0f}s: {sorted(wanted - seen)}")

    def components(self) -> dict[str, list[int]]:
        groups: dict[str, list[int]] = {"harness": [psutil.Process().pid]}
        for member in self.cluster.members.values():
            if member.alive:
                groups.setdefault(member.kind, []).append(member.popen.pid)
        return groups

    def peak_rss(self) -> dict[str, float]:
        """Highest peak RSS (MB) of any one process of each kind that is still alive."""
        peaks: dict[str, float] = {}
        for kind, pids in self.components().items():
            values = [v for v in (peak_rss_mb(pid) for pid in pids) if v is not None]
            if values:
                peaks[kind] = round(max(values), 1)
        return peaks

    def db_now(self) -> datetime:
        with self.engine.begin() as conn:
            return conn.execute(text("SELECT clock_timestamp()")).scalar_one()

    def backlog(self) -> dict[str, int]:
        """Due and not yet claimed, by stage (BACKLOG_NOW_SQL)."""
        with self.engine.begin() as conn:
            return dict(conn.execute(BACKLOG_NOW_SQL).mappings().one())

    def due_at_least(self, cap: int) -> bool:
        with self.engine.begin() as conn:
            return conn.execute(DUE_AT_LEAST_SQL, {"cap": cap}).scalar_one()

    def idle(self) -> bool:
        with self.engine.begin() as conn:
            return conn.execute(IDLE_SQL).scalar_one()

    def wait_drained(self, timeout: float) -> bool:
        """Until nothing is due, claimed or unmaterialised (the last attempts completed), or ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.idle():
                return True
            time.sleep(0.25)
        return False


def seed_history(engine: Engine, executions: int, tenants: int, progress: Progress) -> None:
    """Write ``executions`` finished executions, then VACUUM ANALYZE and CHECKPOINT.

    Why every rig does this: PL/pgSQL caches each statement's plan, made with the table statistics of the moment.
    On an empty database the plans of d2_complete/d2_settle look attempts up by sequential scan (right for 0
    rows), and keep doing so while the table grows, until autovacuum's next ANALYZE -- up to a minute later --
    replans them. Measured: that alone halved a fresh database's drain rate. A production scheduler has history
    and statistics; the benchmark measures that steady state, not a database's first minute.

    The CHECKPOINT writes out what the bulk load dirtied (gigabytes after the scale part's 10M rows) now, instead of
    in the middle of the first measured run: measured, the first drain after a 10M-row load ran at 3,991/s and the
    third, once the checkpointer had caught up, at 5,250/s. Skipped, and said, where the role may not checkpoint."""
    for done in range(0, executions, HISTORY_CHUNK):
        progress(f"writing history: {done:,} of {executions:,} finished executions")
        with engine.begin() as conn:
            conn.execute(text("SET LOCAL session_replication_role = replica"))
            conn.execute(HISTORY_SQL, {"n": min(HISTORY_CHUNK, executions - done), "tenants": tenants})
    progress("VACUUM ANALYZE, CHECKPOINT")
    with engine.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        conn.execute(text("VACUUM ANALYZE"))
        try:
            conn.execute(text("CHECKPOINT"))
        except ProgrammingError as exc:  # needs superuser or pg_checkpoint (DATABASE_URL may be a plain role)
            progress(f"no CHECKPOINT before measuring: {exc.orig}")


def _track_functions(engine: Engine) -> None:
    """Count calls and time of the d2_* functions in every later session (cost_per_execution). A superuser's
    setting: where DATABASE_URL's role may not, the run goes on without those two figures."""
    try:
        with engine.begin() as conn:
            conn.execute(text(f'ALTER DATABASE "{engine.url.database}" SET track_functions = \'pl\''))
    except ProgrammingError:
        pass


@contextmanager
def rig(shape: ClusterShape, prepare: Callable[[Engine], None] | None = None) -> Iterator[Rig]:
    """A fresh database on the server in use, ``shape``'s processes running on it; all removed afterwards.
    ``prepare(engine)`` runs on the empty schema before any process starts (e.g. to fill tables)."""
    with db.scratch_database(db.database_url(), "d2bench", pool_size=4, application_name="d2-bench") as (url, engine):
        with engine.begin() as conn:
            # Caps high enough never to bind: the bench measures dispatch, the noisy-tenant drill measures caps.
            conn.execute(text(
                "INSERT INTO tenants (id, api_key_hash, max_running) SELECT 'bench-' || i, md5('bench-' || i), 100000"
                " FROM generate_series(0, :n - 1) AS i"), {"n": shape.tenants})
            conn.execute(text("UPDATE pools SET sub_pools = :n WHERE name = 'short'"), {"n": shape.sub_pools})
        _track_functions(engine)
        seed_history(engine, HISTORY_ROWS, shape.tenants, quiet)
        if prepare is not None:
            prepare(engine)
        with LocalCluster(url, Path(tempfile.mkdtemp(prefix="d2bench-"))) as cluster:
            the_rig = Rig(url, engine, cluster, shape)
            for i in range(1, shape.schedulers + 1):
                cluster.start_scheduler(f"bench-scheduler-{i}",
                                        extra_args=["--archive-after-seconds", str(shape.archive_after_seconds)])
            the_rig.start_workers()
            the_rig.wait_registered()
            yield the_rig


# -- offered load ------------------------------------------------------------------------------------------------
class OfferedLoad(threading.Thread):
    """Schedules one-shot no-op jobs at ``rate``/s of the DATABASE clock, fire times evenly spaced from ``start``,
    for ``seconds``; each written ``LEAD_SECONDS`` before it fires, so the scheduler materialises it as it would a
    user's job. Bounded: it stops after ``rate * seconds`` jobs, or when ``halt`` is set."""

    def __init__(self, engine: Engine, rate: float, seconds: float, start: datetime, tenants: int):
        super().__init__(name="offered-load", daemon=True)
        self.engine, self.rate, self.start_at, self.tenants = engine, rate, start, tenants
        self.total = int(rate * seconds)
        self.scheduled = 0
        self.halt = threading.Event()
        self.error: Exception | None = None

    @property
    def end(self) -> datetime:
        return self.start_at + timedelta(seconds=self.total / self.rate)

    def run(self) -> None:
        try:
            while self.scheduled < self.total and not self.halt.is_set():
                with self.engine.begin() as conn:
                    now = conn.execute(text("SELECT clock_timestamp()")).scalar_one()
                    ahead = (now - self.start_at).total_seconds() + LEAD_SECONDS
                    due = min(self.total, math.ceil(ahead * self.rate))
                    if due > self.scheduled:
                        conn.execute(SCHEDULE_JOBS_SQL, {"first": self.scheduled, "last": due - 1, "rate": self.rate,
                                                         "start": self.start_at, "tenants": self.tenants,
                                                         "epoch": EPOCH})
                        self.scheduled = due
                self.halt.wait(GENERATOR_TICK_SECONDS)
        except Exception as exc:  # surfaced by the scenario: a generator that fell over invalidates the run
            self.error = exc


def insert_backlog(engine: Engine, n: int, tenants: int) -> tuple[datetime, datetime]:
    """``n`` overdue ready occurrences in ONE transaction (they appear at once when it commits). Returns database
    times (before, committed): every attempt finishing after ``before`` is the backlog's; the drain's clock
    starts at ``committed``."""
    with engine.begin() as conn:
        before = conn.execute(text("SELECT clock_timestamp()")).scalar_one()
        conn.execute(BACKLOG_SQL, {"n": n, "tenants": tenants})
    with engine.begin() as conn:
        return before, conn.execute(text("SELECT clock_timestamp()")).scalar_one()


# -- reading the history back ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Lag:
    count: int
    p50: float | None
    p95: float | None
    p99: float | None
    max: float | None

    def as_dict(self) -> dict[str, float | None]:
        return {k: (round(v, 1) if v is not None else None)
                for k, v in (("p50", self.p50), ("p95", self.p95), ("p99", self.p99), ("max", self.max))}


def fire_lag(engine: Engine, since: datetime, until: datetime) -> Lag:
    """Fire lag (ms) of occurrences scheduled in [since, until)."""
    with engine.begin() as conn:
        row = conn.execute(LAG_SQL, {"since": since, "until": until}).one()
    p = row.p or [None, None, None]
    return Lag(row.n, p[0], p[1], p[2], row.max)


# What one execution costs the database, read as deltas over a run and divided by the executions it finished:
# * row writes per table (pg_stat_user_tables: inserted + updated + deleted) -- job cursor, claim bounds,
#   occurrence, attempt, archive move; the processes table is liveness, per process rather than per execution;
# * index entries, at most: every insert and every update that is not HOT adds an entry to each index of its table
#   (a partial index only when the row matches its predicate, hence "at most"); HOT updates add none;
# * WAL bytes (pg_current_wal_lsn: the whole server's, so the bench's database must be alone on it);
# * transactions (pg_stat_database): a worker's calls are one statement each in autocommit, so for them a
#   transaction is one round trip; a scheduler pass is one transaction of a few statements;
# * calls and database time per execution of each d2_* function (pg_stat_user_functions, which needs
#   track_functions = 'pl' on the database: rig() sets it where the role may; else these two are left out).
# A backend publishes its counts at most about a second after its transaction, hence the pause before the second
# reading.
COST_TABLES_SQL = text(
    "SELECT s.relname, s.n_tup_ins, s.n_tup_upd, s.n_tup_del, s.n_tup_hot_upd,"
    "       (SELECT count(*) FROM pg_index i WHERE i.indrelid = s.relid) AS indexes"
    " FROM pg_stat_user_tables s WHERE s.relname <> 'processes'")
COST_TOTALS_SQL = text(
    "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn,"
    "       (SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database())")
COST_FUNCTIONS_SQL = text("SELECT funcname, calls, total_time, self_time FROM pg_stat_user_functions"
                          " WHERE funcname LIKE 'd2%'")
STATS_FLUSH_SECONDS = 2.0


def cost_counters(engine: Engine) -> dict[str, Any]:
    """The database's running totals that ``cost_per_execution`` turns into deltas; a day's history partition
    counts as execution_history."""
    rows: dict[str, int] = {}
    index_entries = updates = hot = 0
    with engine.begin() as conn:
        for name, ins, upd, dele, hot_upd, indexes in conn.execute(COST_TABLES_SQL):
            table = re.sub(r"_\d{8}$", "", name)
            rows[table] = rows.get(table, 0) + ins + upd + dele
            index_entries += (ins + upd - hot_upd) * indexes
            updates, hot = updates + upd, hot + hot_upd
        wal, transactions = conn.execute(COST_TOTALS_SQL).one()
        functions = {name: (calls, ms, own_ms) for name, calls, ms, own_ms in conn.execute(COST_FUNCTIONS_SQL)}
    return {"rows": rows, "index_entries": index_entries, "updates": updates, "hot_updates": hot,
            "wal_bytes": int(wal), "transactions": transactions, "functions": functions}


def cost_per_execution(before: dict[str, Any], after: dict[str, Any], executions: int) -> dict[str, Any]:
    """Per execution finished between the two readings, next to the design's estimate (capacity.py)."""
    if not executions:
        return {"executions": 0}

    def per(delta: float, digits: int = 2) -> float:
        return round(delta / executions, digits)

    per_table = {table: per(rows - before["rows"].get(table, 0)) for table, rows in sorted(after["rows"].items())
                 if rows > before["rows"].get(table, 0)}
    updates = after["updates"] - before["updates"]
    functions = {name: tuple(now - then for now, then in zip(counts, before["functions"].get(name, (0, 0.0, 0.0)),
                                                            strict=True))
                 for name, counts in sorted(after["functions"].items())}
    called = {name: delta for name, delta in functions.items() if delta[0]}
    return {
        "executions": executions,
        "row_writes": {"per_table": per_table, "total": round(sum(per_table.values()), 2)},
        "index_entries_at_most": per(after["index_entries"] - before["index_entries"], 1),
        "hot_update_share": round((after["hot_updates"] - before["hot_updates"]) / updates, 2) if updates else None,
        "wal_bytes": per(after["wal_bytes"] - before["wal_bytes"], 0),
        "transactions": per(after["transactions"] - before["transactions"]),
        # Inside each function, its nested calls included (d2_complete's time includes d2_settle's).
        "calls": {name: per(calls, 3) for name, (calls, _, _) in called.items()},
        "database_us": {name: per(1000 * ms, 1) for name, (_, ms, _) in called.items()},
        # Its own statements only (the top statements: pgserver ships without pg_stat_statements, and every
        # statement on the hot path is one of these functions).
        "database_self_us": {name: per(1000 * own_ms, 1) for name, (_, _, own_ms) in called.items()},
        "estimate": {"row_writes": capacity.ROW_WRITES_PER_EXECUTION},
    }


def completed(engine: Engine, since: datetime, until: datetime) -> tuple[int, datetime | None, datetime | None]:
    with engine.begin() as conn:
        return tuple(conn.execute(COMPLETED_SQL, {"since": since, "until": until}).one())


def record_sizes(engine: Engine) -> tuple[int, int]:
    """Rows in the queue table (occurrences) and in the history (execution_history), counted exactly."""
    with engine.begin() as conn:
        return tuple(conn.execute(SIZES_SQL).one())


def lost(engine: Engine, since: datetime, until: datetime) -> int:
    """Jobs due in [since, until) that have no succeeded occurrence (call after the run drained)."""
    with engine.begin() as conn:
        return conn.execute(LOST_SQL, {"since": since, "until": until}).scalar_one()


def series(engine: Engine, origin: datetime, until: datetime) -> list[dict[str, float]]:
    """Per second since ``origin``: executions completed, and p99 fire lag of what was due that second."""
    with engine.begin() as conn:
        rows = conn.execute(SERIES_SQL, {"origin": origin, "until": until}).all()
    return [{"t": r.second, "completed_per_s": r.completed,
             "lag_p99_ms": round(r.p99, 1) if r.p99 is not None else None} for r in rows]


class BacklogSampler(threading.Thread):
    """The backlog (due, not yet claimed) once a second, plus CPU samples so short-lived processes count.
    ``count_backlog=False`` samples CPU only: counting a 50,000-row backlog every second is work of its own."""

    def __init__(self, the_rig: Rig, meter: ProcessMeter, count_backlog: bool = True):
        super().__init__(name="backlog-sampler", daemon=True)
        self.rig, self.meter, self.count_backlog = the_rig, meter, count_backlog
        self.samples: list[tuple[float, int]] = []            # (seconds, whole backlog)
        self.stage_max: dict[str, int] = {}                   # the largest backlog seen at each stage
        self.halt = threading.Event()
        self._t0 = time.monotonic()

    def run(self) -> None:
        while not self.halt.wait(SAMPLE_SECONDS):
            try:
                if self.count_backlog:
                    stages = self.rig.backlog()
                    self.samples.append((round(time.monotonic() - self._t0, 1), sum(stages.values())))
                    for stage, waiting in stages.items():
                        self.stage_max[stage] = max(waiting, self.stage_max.get(stage, 0))
                self.meter.sample()
            except Exception:  # a sample lost to a busy database is a gap in the series, not a failed run
                continue

    def growth_per_second(self) -> float:
        """Least-squares slope of the backlog over the second half of the run (0 = not growing)."""
        tail = self.samples[len(self.samples) // 2:]
        if len(tail) < 2:
            return 0.0
        n = len(tail)
        mean_t = sum(t for t, _ in tail) / n
        mean_b = sum(b for _, b in tail) / n
        var = sum((t - mean_t) ** 2 for t, _ in tail)
        return 0.0 if var == 0 else sum((t - mean_t) * (b - mean_b) for t, b in tail) / var
