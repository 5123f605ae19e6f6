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
from datetime import datetime, timedelta

from sqlalchemy import Connection, text

from reference_impl import policies, schedule

log = logging.getLogger("d2kit.materializer")

LOOKAHEAD = timedelta(seconds=2)
JOBS_PER_PASS = 500
FIRES_PER_JOB_PER_PASS = 5_000  # bounds one transaction; a long catch-up continues next pass
ENUMERATION_LIMIT = 100_000     # bounds the CPU spent enumerating a per-second cron after a long outage

DUE_JOBS = (
    "SELECT id, schedule_kind, run_at, cron, timezone, dst_gap, dst_overlap, misfire_policy, catchup_window,"
    " max_catchup, materialized_through, now() AS db_now FROM jobs"
    " WHERE next_fire_at <= now() + make_interval(secs => :lookahead) AND NOT paused AND deleted_at IS NULL"
    " ORDER BY next_fire_at LIMIT :n")
DUE_JOBS_SQL = text(DUE_JOBS + " FOR UPDATE SKIP LOCKED")
PARK_FOR = timedelta(minutes=1)
# A job that cannot be planned is not dropped: it keeps its cursor, says why, and is tried again later.
PARK_SQL = text("UPDATE jobs SET schedule_error = :error, next_fire_at = now() + make_interval(secs => :retry)"
                " WHERE id = :id")
MATERIALISE_SQL = text("SELECT d2_materialise(:job_ids, :fire_ats, :reasons, :cursor_ids, :throughs, :nexts)")


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


class Materialiser:
    """A replica's materialise service: passes of at most ``jobs_per_pass`` due jobs, which shrinks when a pass
    does not finish. Planning happens inside the pass's transaction, while it holds the jobs' row locks, and the
    session's idle_in_transaction_session_timeout (db.py) ends a transaction that waits on its client that long:
    a catch-up pass on a starved CPU (500 jobs, hours of missed fire times each) can plan for longer, and would
    then be ended, retried with the same jobs, and ended again -- a replica that never catches up. So, as TCP's
    congestion window: after a pass that did not finish the next takes half as many jobs, and that half becomes
    the threshold; each pass that finishes grows by a quarter up to the threshold and by a fiftieth of
    JOBS_PER_PASS above it, up to JOBS_PER_PASS. (Growing by a quarter all the way was back at the size that
    failed within three passes: on a loaded CI machine a catch-up lost one pass's work every ~6 s for minutes.)"""

    def __init__(self) -> None:
        self.jobs_per_pass = JOBS_PER_PASS
        self.threshold = JOBS_PER_PASS
        self._unfinished = False

    def __call__(self, conn: Connection) -> int:
        if self._unfinished:
            self.jobs_per_pass = self.threshold = max(1, self.jobs_per_pass // 2)
            log.warning("the last materialise pass did not finish: the next ones take %d jobs", self.jobs_per_pass)
        self._unfinished = True
        inserted = materialise_due(conn, self.jobs_per_pass)
        self._unfinished = False
        grown = self.jobs_per_pass + (self.jobs_per_pass // 4 + 1 if self.jobs_per_pass < self.threshold
                                      else JOBS_PER_PASS // 50)
        self.jobs_per_pass = min(JOBS_PER_PASS, grown)
        return inserted


def materialise_due(conn: Connection, jobs_per_pass: int = JOBS_PER_PASS) -> int:
    """One pass over due jobs, in the caller's transaction. Returns occurrence rows inserted."""
    return materialise(conn, conn.execute(DUE_JOBS_SQL, {"lookahead": LOOKAHEAD.total_seconds(),
                                                         "n": jobs_per_pass}).all())


def materialise(conn: Connection, jobs) -> int:
    """Write the fire times of ``jobs`` (rows of DUE_JOBS_SQL, locked by the caller) from their cursors on, and move
    the cursors. Returns occurrence rows inserted."""
    if not jobs:
        return 0
    now = jobs[0].db_now  # the transaction's now(): the same instant the due test used
    job_ids, fire_ats, reasons = [], [], []
    cursor_ids, throughs, nexts = [], [], []
    planned = []
    for job in jobs:
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
    return conn.execute(MATERIALISE_SQL, {"job_ids": job_ids, "fire_ats": fire_ats, "reasons": reasons,
                                          "cursor_ids": cursor_ids, "throughs": throughs,
                                          "nexts": nexts}).scalar_one()
