"""The materialiser (River calls it the periodic enqueuer): due fire times become occurrence rows.

Every scheduler replica runs it; there is no leader. Each pass takes a batch of due jobs with
``FOR UPDATE SKIP LOCKED`` -- two replicas never work on the same job at once -- and even if that were
bypassed, ``UNIQUE (job_id, fire_at)`` makes a second materialisation of a fire time a no-op. A replica
SIGKILLed mid-pass rolls its transaction back; the job's cursor did not move, so another replica does the
same work again a moment later. Nothing is lost, nothing is doubled.

Occurrences are materialised ``LOOKAHEAD`` ahead with ``ready_at = fire_at``, so a worker claims them the
moment they are due instead of waiting for a scheduler tick.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

from sqlalchemy import Connection, text

from reference_impl import policies, schedule

log = logging.getLogger("d2kit.materializer")

LOOKAHEAD = timedelta(seconds=2)
JOBS_PER_PASS = 500
FIRES_PER_JOB_PER_PASS = 5_000  # bounds one transaction; a long catch-up continues next pass
# Bounds the fire times one job enumerates in a pass (a per-second cron after a day's outage has 86,400), and so
# its planning time, which must fit the pass's planning budget below: enumerating 100,000 took ~5 s, and that job,
# first in line with the oldest due time, ended every pass of every replica. Enumerating max_catchup past what a
# pass writes keeps run_all exact: when even the last fire time enumerated was missed, at least max_catchup newer
# missed ones follow, so none of those written now is among the newest max_catchup.
ENUMERATION_LIMIT = FIRES_PER_JOB_PER_PASS + policies.MAX_CATCHUP_LIMIT
# Planning runs inside the pass's transaction, while it holds its jobs' row locks, and leaves that transaction idle:
# PostgreSQL ends a transaction idle for idle_in_transaction_session_timeout (db.py), with all the pass's work. A
# catch-up plans ~100 us per missed fire time (croniter), so 333 jobs with two hours of per-minute fire times plan
# for ~4 s on an idle machine -- every such pass would be ended and redone. So a pass plans for at most a third of
# the session's timeout (read from the session, whatever it is set to) and leaves the rest of its due jobs,
# untouched, to the next pass: the unit of a pass's work is planning time, not jobs.
PLANNING_SHARE_OF_IDLE_TIMEOUT = 1 / 3
PLANNING_BUDGET_WITHOUT_TIMEOUT = timedelta(seconds=1)  # bounds how long a pass holds its locks all the same

DUE_JOBS = (
    "SELECT id, schedule_kind, run_at, cron, timezone, dst_gap, dst_overlap, misfire_policy, catchup_window,"
    " max_catchup, materialized_through, now() AS db_now,"
    " (SELECT setting::int FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout') AS idle_timeout_ms"
    " FROM jobs"
    " WHERE next_fire_at <= now() + make_interval(secs => :lookahead) AND NOT paused AND deleted_at IS NULL"
    " ORDER BY next_fire_at LIMIT :n")
DUE_JOBS_SQL = text(DUE_JOBS + " FOR UPDATE SKIP LOCKED")
PARK_FOR = timedelta(minutes=1)
# A job that cannot be planned is not dropped: it keeps its cursor, says why, and is tried again later.
PARK_SQL = text("UPDATE jobs SET schedule_error = :error, next_fire_at = now() + make_interval(secs => :retry)"
                " WHERE id = :id")
# In psycopg's own placeholders (exec_driver_sql), so that its arrays go in binary (db.driver_connection says why).
MATERIALISE_SQL = ("SELECT d2_materialise(CAST(%(job_ids)b AS bigint[]), CAST(%(fire_ats)b AS timestamptz[]),"
                   " CAST(%(reasons)b AS text[]), CAST(%(cursor_ids)b AS bigint[]),"
                   " CAST(%(throughs)b AS timestamptz[]), CAST(%(nexts)b AS timestamptz[]))")


def plan_job(job, now: datetime) -> tuple[list[schedule.FireTime], datetime, datetime | None]:
    """For one due job: the fire times to write now (decided by the misfire policy), the new cursor, and
    the next fire time after it."""
    sched = schedule.Schedule(kind=job.schedule_kind, run_at=job.run_at, cron=job.cron, timezone=job.timezone,
                              dst_gap=job.dst_gap, dst_overlap=job.dst_overlap)
    horizon = now + LOOKAHEAD
    fires = schedule.fire_times(sched, job.materialized_through, horizon, limit=ENUMERATION_LIMIT)
    truncated = len(fires) == ENUMERATION_LIMIT
    catch_up = policies.CatchUp(job.misfire_policy, job.catchup_window, job.max_catchup)
    newer_missed_follow = truncated and fires[-1].at < now - policies.MISFIRE_THRESHOLD
    decided = policies.classify(fires, now, catch_up, newer_missed_follow)
    if len(decided) > FIRES_PER_JOB_PER_PASS or truncated:
        chunk = decided[:FIRES_PER_JOB_PER_PASS]
        through = chunk[-1].at
        return chunk, through, schedule.next_fire_after(sched, through)
    return decided, horizon, schedule.next_fire_after(sched, horizon)


def materialise_due(conn: Connection) -> int:
    """One pass over due jobs, in the caller's transaction. Returns occurrence rows inserted."""
    return materialise(conn, conn.execute(DUE_JOBS_SQL, {"lookahead": LOOKAHEAD.total_seconds(),
                                                         "n": JOBS_PER_PASS}).all())


def planning_budget(idle_timeout_ms: int) -> float:
    """Seconds a pass may plan before it writes what it has (see PLANNING_SHARE_OF_IDLE_TIMEOUT)."""
    if idle_timeout_ms <= 0:
        return PLANNING_BUDGET_WITHOUT_TIMEOUT.total_seconds()
    return idle_timeout_ms / 1000 * PLANNING_SHARE_OF_IDLE_TIMEOUT


def materialise(conn: Connection, jobs) -> int:
    """Write the fire times of ``jobs`` (rows of DUE_JOBS_SQL, locked by the caller) from their cursors on, and move
    the cursors. Returns occurrence rows inserted."""
    if not jobs:
        return 0
    now = jobs[0].db_now  # the transaction's now(): the same instant the due test used
    deadline = time.monotonic() + planning_budget(jobs[0].idle_timeout_ms)
    job_ids, fire_ats, reasons = [], [], []
    cursor_ids, throughs, nexts = [], [], []
    planned = []
    for looked_at, job in enumerate(jobs):
        if looked_at and time.monotonic() >= deadline:
            break  # the rest keep their cursors and stay due; the commit releases them to the next pass
        try:
            planned.append((job, *plan_job(job, now)))
        except Exception as exc:  # one job that cannot be planned must not stop every replica's passes
            conn.execute(PARK_SQL, {"id": job.id, "error": f"{type(exc).__name__}: {exc}"[:500],
                                    "retry": PARK_FOR.total_seconds()})
            log.error("job %s cannot be planned, parked for %s: %s", job.id, PARK_FOR, exc)
    for job, fires, through, next_fire in planned:
        for fire in fires:
            job_ids.append(job.id)
            fire_ats.append(fire.at)
            reasons.append(fire.skip_reason)
        cursor_ids.append(job.id)
        throughs.append(through)
        nexts.append(next_fire)
    return conn.exec_driver_sql(MATERIALISE_SQL, {
        "job_ids": job_ids, "fire_ats": fire_ats, "reasons": reasons, "cursor_ids": cursor_ids, "throughs": throughs,
        "nexts": nexts}).scalar_one()
