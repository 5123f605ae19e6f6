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
row locks and cursors alone keep the survivors from writing a fire time twice, so the unique key -- the last line
of defence -- is exercised on purpose: a rogue replica reads a batch of the due jobs without its lock, stalls
until the others have written and committed them, then replays the pass from its stale cursors through the
product's own materialise code. The key must refuse every fire time it offers, and each refusal is recorded
(duplicate_fire_refusals). The invariants compare the occurrence rows with the schedule itself: one per job,
each run once.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import text

from d2kit.drills import invariants, workload
from d2kit.drills.harness import Drill
from reference_impl import db, materializer

FOLLOW_UP = 2
NEGATIVE_CONTROL = ("the occurrences table without its unique key on (job_id, fire_at) (and the inserts without the "
                    "ON CONFLICT that needs it): the rogue replica's replay writes every fire time a second time")
ROGUE = "scheduler-rogue"
SUBMIT_SECONDS_PER_JOB = 0.0015  # measured ~0.9 ms per jobs.submit on 2 cores, with headroom


def run(drill: Drill) -> None:
    count = 3_000 if drill.quick else 10_000
    drill.scale("jobs due at 09:00:00", f"{count:,} one-shot jobs due at the same instant, a few seconds ahead")
    drill.scale("replicas", "3 scheduler replicas; one SIGKILLed as the 09:00:00 batch is materialised")

    if drill.negative_control:
        _remove_unique_key(drill)
        drill.notes.append("**UNIQUE (job_id, fire_at) REMOVED (negative control).**")

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
        stale = _read_due_jobs_without_lock(drill)
        mid_transaction = drill.kill_mid_transaction("scheduler-2", timeout=lookahead)
        written = drill.scalar("SELECT count(*) FROM occurrences")
        drill.metrics["killed mid-transaction"] = mid_transaction
        drill.metrics["occurrences already written when it died"] = f"{written:,} of {count:,}"

    with drill.phase("a rogue replica replays its stale pass over fire times already written"):
        drill.wait_for("the survivors to write the whole batch", lambda: drill.scalar(
            "SELECT count(*) >= :n FROM occurrences", n=count), timeout=60 + count / 100)
        with drill.fault(f"{ROGUE} replays a pass from stale cursors"):
            replay = _replay(drill, stale)
        drill.metrics["rogue replica's replay"] = replay

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
        _check_refusals(drill, conn, replay)
        exit_code = drill.cluster.members["scheduler-2"].popen.returncode
        survivors = [m for m in ("scheduler-1", "scheduler-3") if drill.cluster.members[m].alive]
        drill.check("the fault was real: scheduler-2 died of SIGKILL at 09:00:00 and the other two carried on",
                    exit_code == -9 and len(survivors) == 2, {"scheduler-2 exit": exit_code, "survivors": survivors})
        drill.metrics["dispatch lateness after 09:00:00 (s)"] = invariants.dispatch_lateness(conn)


def _read_due_jobs_without_lock(drill: Drill) -> list:
    """The rogue replica's read: the materialiser's own query for a batch of due jobs, without FOR UPDATE."""
    with drill.engine.begin() as conn:
        return conn.execute(text(materializer.DUE_JOBS), {"lookahead": materializer.LOOKAHEAD.total_seconds(),
                                                          "n": materializer.JOBS_PER_PASS}).all()


def _replay(drill: Drill, stale: list) -> dict[str, int]:
    """The rogue replica writes the pass it planned from its stale rows, through materializer.materialise, as a
    session of its own (application_name d2-scheduler-rogue, so the refusals name it)."""
    ids = [job.id for job in stale]
    already = drill.scalar("SELECT count(*) FROM occurrences WHERE job_id = ANY(:ids)", ids=ids)
    engine = db.make_engine(drill.url, pool_size=1, application_name=f"d2-scheduler-{ROGUE}")
    try:
        with engine.begin() as conn:
            inserted = materializer.materialise(conn, stale)
    finally:
        engine.dispose()
    return {"stale_jobs": len(stale), "fire_times_already_written": already, "inserted": inserted}


def _check_refusals(drill: Drill, conn, replay: dict[str, int]) -> None:
    refusals = dict(conn.execute(text(
        "SELECT refused_by, count(*) FROM duplicate_fire_refusals GROUP BY 1")).all())
    by_rogue = refusals.pop(f"d2-scheduler-{ROGUE}", 0)
    drill.check("the fault was real: a rogue replica replayed a pass from stale cursors over fire times already "
                "written", replay["stale_jobs"] > 0 and replay["fire_times_already_written"] == replay["stale_jobs"],
                replay)
    drill.check("the unique key refused every fire time the rogue replica replayed, and each refusal is recorded "
                "(duplicate_fire_refusals)", replay["inserted"] == 0 and by_rogue == replay["stale_jobs"],
                {"replayed": replay["stale_jobs"], "inserted": replay["inserted"], "refusals_recorded": by_rogue})
    drill.check("the replicas themselves never offered a written fire time, crash included (row locks and cursors "
                "kept them apart: the key was needed only for the rogue)", not refusals,
                {"refusals_by_other_sessions": refusals})


def _remove_unique_key(drill: Drill) -> None:
    """The negative control: drop UNIQUE (job_id, fire_at) from this drill's scratch database, and the conflict
    target that needs it from the functions (ON CONFLICT with no target still parses without any key)."""
    with drill.engine.begin() as conn:
        conn.execute(text("ALTER TABLE occurrences DROP CONSTRAINT occurrences_job_id_fire_at_key"))
        conn.connection.driver_connection.execute(  # as db.init_schema applies it: '%' in format() stays
            db.schema_sql().replace("ON CONFLICT (job_id, fire_at) DO NOTHING", "ON CONFLICT DO NOTHING"))
