"""How do you guarantee a job scheduled for 09:00:00 doesn't run twice when you have three scheduler replicas
for availability?

All three replicas are active and none is a leader: each takes a batch of due jobs with SELECT ... FOR UPDATE
SKIP LOCKED, so no two replicas work on the same job at once, and an occurrence is a row keyed UNIQUE (job_id,
fire_at), so no replica, however it crashed and retried, can write the same fire time twice. A replica killed
mid-pass loses nothing: its transaction rolls back, the job's cursor does not move, and a surviving replica
does the same work a moment later. Dispatch is a compare-and-set on that row (ready to running under a row
lock), so one fire time gives one attempt unless a lease expires.

How the drill does it: thousands of one-shot jobs are all due at the same instant -- this drill's "09:00:00",
a few seconds ahead on the database clock. Three scheduler replicas and two workers run; when the batch starts
being materialised, one replica is SIGKILLed the moment pg_stat_activity shows it inside a transaction. The
invariants compare the occurrence rows with the schedule itself: one per job, each run once.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import text

from d2kit.drills import invariants, workload
from d2kit.drills.harness import Drill
from reference_impl import materializer

FOLLOW_UP = 2
SUBMIT_SECONDS_PER_JOB = 0.0015  # measured ~0.9 ms per jobs.submit on 2 cores, with headroom


def run(drill: Drill) -> None:
    count = 3_000 if drill.quick else 10_000
    drill.scale("jobs due at 09:00:00", f"{count:,} one-shot jobs due at the same instant, a few seconds ahead")
    drill.scale("replicas", "3 scheduler replicas; one SIGKILLed as the 09:00:00 batch is materialised")

    with drill.phase("start 3 replicas and 2 workers; submit the 09:00:00 jobs"):
        for i in (1, 2, 3):
            drill.cluster.start_scheduler(f"scheduler-{i}")
        for i in (1, 2):
            drill.cluster.start_worker(f"worker-{i}", concurrency=16)
        nine_oclock = workload.db_now(drill.engine) + timedelta(seconds=4 + count * SUBMIT_SECONDS_PER_JOB)
        job_ids = workload.submit_one_shots(drill.engine, "acme", count, nine_oclock, name="report-0900",
                                            handler="noop", pool="short")
        drill.metrics["09:00:00 (database clock)"] = str(nine_oclock)
        drill.mark(f"09:00:00: {count:,} jobs due", nine_oclock)

    with drill.phase("09:00:00: the batch is materialised; one replica dies"):
        lookahead = materializer.LOOKAHEAD.total_seconds()
        drill.wait_for("the batch's materialisation to start", lambda: drill.scalar(
            "SELECT now() >= CAST(:t AS timestamptz) - make_interval(secs => :la)", t=nine_oclock, la=lookahead),
            timeout=60, every=0.01)
        mid_transaction = drill.kill_mid_transaction("scheduler-2", timeout=lookahead)
        written = drill.scalar("SELECT count(*) FROM occurrences")
        drill.metrics["killed mid-transaction"] = mid_transaction
        drill.metrics["occurrences already written when it died"] = f"{written:,} of {count:,}"

    with drill.phase("the two survivors finish; workers run everything"):
        drill.settle(timeout=60 + count / 100, at_least=count)

    with drill.engine.begin() as conn:
        drill.add(invariants.one_occurrence_per_fire_time(conn, nine_oclock - timedelta(seconds=1),
                                                          nine_oclock + timedelta(seconds=1)))
        succeeded = conn.execute(text(
            "SELECT count(*) FROM occurrences WHERE state = 'succeeded' AND job_id = ANY(:ids)"),
            {"ids": job_ids}).scalar_one()
        drill.check("every 09:00:00 occurrence ran and succeeded", succeeded == count,
                    {"jobs": count, "succeeded": succeeded})
        attempts = dict(conn.execute(text(
            "SELECT n, count(*) FROM (SELECT count(*) AS n FROM attempts GROUP BY occurrence_id) x GROUP BY n")).all())
        drill.check("each occurrence was dispatched exactly once (no worker died, so no retry was due)",
                    set(attempts) == {1}, {"occurrences_by_attempt_count": {str(k): v for k, v in attempts.items()}})
        drill.add(invariants.no_double_success(conn))
        exit_code = drill.cluster.members["scheduler-2"].popen.returncode
        survivors = [m for m in ("scheduler-1", "scheduler-3") if drill.cluster.members[m].alive]
        drill.check("the fault was real: scheduler-2 died of SIGKILL at 09:00:00 and the other two carried on",
                    exit_code == -9 and len(survivors) == 2, {"scheduler-2 exit": exit_code, "survivors": survivors})
        drill.metrics["dispatch lateness after 09:00:00 (s)"] = invariants.dispatch_lateness(conn)
