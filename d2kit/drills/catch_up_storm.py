"""Your scheduler was down for two hours. It comes back. There are 40,000 jobs whose fire time has passed.
What happens?

What runs is a product decision, so each job states it as its misfire policy: skip (run none of the missed
times), run_once (only the most recent), or run_all (every missed time, oldest first, at most max_catchup of them:
the newest), all bounded by a catch-up window. Every missed fire time still gets its occurrence row, and the ones
that do not run are recorded as skipped with the reason, so "what did we not run, and why?" is a query. What does run is
paced by a shared admission rate per pool, so the backlog drains at a rate the workers and the database were
sized for instead of arriving as a thundering herd.

How the drill does it: the outage is real database state, not mocked time -- per-minute cron jobs of all three
policies get their materialisation cursors set two hours back, exactly what two hours without any scheduler
leaves behind. Then two replicas start with the pool's admission rate set, and the invariants check every
policy's promise against the history, the reasons of every skipped occurrence, and every one-second window of
dispatches (database clock) against the stated rate.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import timedelta

from sqlalchemy import text

from d2kit.drills import invariants, workload
from d2kit.drills.harness import Drill
from reference_impl import db, materializer, policies, schedule

FOLLOW_UP = 3
NEGATIVE_CONTROL = ("the admission bucket is switched off (pools.admission_rate = NULL, a real setting): the "
                    "storm drains as fast as the workers go and the stated-rate invariant must fail")
JOBS_PER_POLICY = 111      # x 3 policies x 120 missed minutes = 39,960 overdue fire times
OUTAGE = timedelta(hours=2)
# The seconds in which the bucket was the limit: each began with at least a second's worth of overdue runs waiting
# (materialised at least VISIBLE_AFTER earlier -- a pass plans for at most its planning budget, then writes and
# commits, given a second -- and not yet dispatched). Over the drain as a whole the rate is lower, as the backlog
# arrives pass by pass.
VISIBLE_AFTER = timedelta(seconds=materializer.planning_budget(db.IDLE_IN_TRANSACTION_SECONDS * 1000) + 1)
BACKLOGGED_SECONDS = """
WITH overdue AS (
    SELECT o.created_at, min(a.dispatched_at) AS dispatched_at
    FROM occurrences o JOIN attempts a ON a.occurrence_id = o.id
    WHERE o.fire_at < :back GROUP BY o.id),
seconds AS (
    SELECT (SELECT count(*) FROM overdue WHERE created_at <= s - :visible_after AND dispatched_at >= s)
               AS waiting,
           (SELECT count(*) FROM overdue WHERE dispatched_at >= s AND dispatched_at < s + interval '1 second')
               AS dispatched
    FROM generate_series((SELECT min(dispatched_at) FROM overdue), (SELECT max(dispatched_at) FROM overdue)
                         - interval '1 second', interval '1 second') AS s)
SELECT count(*) AS seconds, coalesce(sum(dispatched), 0)::bigint AS dispatched FROM seconds WHERE waiting >= :rate"""
CRON = "* * * * *"


def run(drill: Drill) -> None:
    max_catchup = 30 if drill.quick else 100
    rate = 400.0
    drill.scale("outage", "2 hours, as database state: every cursor set 2 h back (no clock is mocked or waited on)")
    drill.scale("overdue fire times", f"{3 * JOBS_PER_POLICY * 120:,} = {3 * JOBS_PER_POLICY} per-minute jobs x 120 "
                                      "missed minutes, a third each skip / run_once / run_all")
    drill.scale("run_all max_catchup", f"{max_catchup}" + (" (100 in full mode)" if drill.quick else ""))
    drill.scale("admission rate", f"{rate:g} dispatches/s on the short pool")

    with drill.phase("schedulers down: two hours of fire times pile up"):
        with drill.fault("all schedulers down for 2 h (simulated by the cursors)"):
            for policy in policies.MISFIRE_POLICIES:
                workload.submit_crons(drill.engine, "acme", JOBS_PER_POLICY, CRON, name=policy, handler="noop",
                                      pool="short", misfire_policy=policy, max_catchup=max_catchup)
            outage_start = _rewind_cursors(drill)
            with drill.engine.begin() as conn:
                conn.execute(text("UPDATE pools SET admission_rate = :r, tokens = 0, refilled_at = clock_timestamp()"
                                  " WHERE name = 'short'"), {"r": None if drill.negative_control else rate})
            for i in (1, 2):
                drill.cluster.start_worker(f"worker-{i}", concurrency=32)
    if not drill.negative_control:
        drill.rate_line = rate

    with drill.phase("schedulers back: materialise, decide, drain at the admission rate"):
        back_at = drill.now()
        for i in (1, 2):
            drill.cluster.start_scheduler(f"scheduler-{i}")
        expected = 3 * JOBS_PER_POLICY * 120
        drill.settle(timeout=180, at_least=expected)

    with drill.phase("stop the schedules; settle"):
        # The crons keep firing every minute: without a pause, a check that lands in the materialiser's lookahead
        # (the last 2 s of a minute) finds the next minute's occurrences materialised and not yet due.
        with drill.engine.begin() as conn:
            conn.execute(text("UPDATE jobs SET paused = true"))
            checked_until = conn.execute(text("SELECT min(materialized_through) FROM jobs")).scalar_one()
        drill.settle(timeout=60)

    with drill.engine.begin() as conn:
        drill.add(invariants.one_occurrence_per_fire_time(conn, outage_start, checked_until),
                  invariants.every_occurrence_terminal(conn))
        _check_policies(drill, conn)
        drill.add(invariants.admission_rate_held(conn, "short", rate), invariants.no_double_success(conn))
        drain = conn.execute(text(
            "SELECT count(*) AS runs, extract(epoch FROM max(a.finished_at) - :back) AS drain_s,"
            " extract(epoch FROM min(a.dispatched_at) - :back) AS first_dispatch_s"
            " FROM attempts a JOIN occurrences o ON o.id = a.occurrence_id WHERE o.fire_at < :back"),
            {"back": back_at}).mappings().one()
        pressed = conn.execute(text(BACKLOGGED_SECONDS),
                               {"back": back_at, "rate": rate, "visible_after": VISIBLE_AFTER}).mappings().one()
    runs = drain["runs"]
    drill.metrics["drain: schedulers back -> last overdue run finished (s)"] = round(float(drain["drain_s"] or 0), 2)
    drill.metrics["schedulers back -> first overdue dispatch (s): materialising and deciding"] = round(
        float(drain["first_dispatch_s"] or 0), 2)
    drill.metrics["overdue runs"] = runs
    drill.metrics["at the stated rate that drain should take (s)"] = round(runs / rate, 1)
    if not drill.negative_control:  # with no bucket there is nothing to press on: the drain goes as fast as it can
        _check_the_bucket_was_the_limit(drill, pressed, rate)


def _check_the_bucket_was_the_limit(drill: Drill, pressed, rate: float) -> None:
    """The fault is real only if the bucket, not the machine or the materialiser, set the pace."""
    seconds = pressed["seconds"]
    if not seconds:
        drill.not_run(f"the storm never built a backlog of a second's worth ({rate:g} overdue runs waiting), so "
                      "nothing pressed on the admission bucket: materialising was slower than the bucket")
    drill.check("the storm really pressed on the bucket: in the seconds that began with a full second's backlog "
                "waiting, overdue runs were dispatched at >= 80% of the stated rate",
                pressed["dispatched"] / seconds >= 0.8 * rate,
                {"backlogged_seconds": seconds, "dispatched_in_them": pressed["dispatched"],
                 "mean_rate_per_s": round(pressed["dispatched"] / seconds, 1)})


def _rewind_cursors(drill: Drill):
    """Leave the jobs exactly as a two-hour outage would: cursor two hours back, next fire time right after it."""
    with drill.engine.begin() as conn:
        now = conn.execute(text("SELECT now()")).scalar_one()
        outage_start = now - OUTAGE
        first_missed = schedule.next_fire_after(schedule.Schedule(kind="cron", cron=CRON), outage_start)
        conn.execute(text("UPDATE jobs SET materialized_through = :through, next_fire_at = :next"),
                     {"through": outage_start, "next": first_missed})
    return outage_start


def _check_policies(drill: Drill, conn) -> None:
    """Each policy's promise, checked from the rows: a fire time is missed when it was materialised more than the
    misfire threshold after it was due (created_at is the materialising transaction's now())."""
    jobs = {j.id: j for j in conn.execute(text(
        "SELECT id, misfire_policy, max_catchup, catchup_window FROM jobs"))}
    by_job = defaultdict(list)
    for occ in conn.execute(text(
            "SELECT job_id, fire_at, created_at, state, reason FROM occurrences ORDER BY fire_at")):
        by_job[occ.job_id].append(occ)
    report = {p: {"jobs": 0, "missed": 0, "missed_that_ran": 0, "expected_to_run": 0, "violations": 0,
                  "reasons": Counter()} for p in policies.MISFIRE_POLICIES}
    samples = []
    for job_id, occurrences in by_job.items():
        job = jobs[job_id]
        seen = report[job.misfire_policy]
        seen["jobs"] += 1
        missed = [o.fire_at for o in occurrences if o.fire_at < o.created_at - policies.MISFIRE_THRESHOLD]
        runnable = [o.fire_at for o in occurrences
                    if o.fire_at in set(missed) and o.fire_at >= o.created_at - job.catchup_window]
        should_run = {o.fire_at for o in occurrences} - set(missed)
        if job.misfire_policy == "run_once":
            should_run |= set(runnable[-1:])
        elif job.misfire_policy == "run_all":
            should_run |= set(runnable[-job.max_catchup:])
        policy_reason = {"skip": "misfire:skip", "run_once": "misfire:superseded",
                         "run_all": "misfire:over_max_catchup"}[job.misfire_policy]
        seen["missed"] += len(missed)
        seen["expected_to_run"] += len(should_run.intersection(missed))
        for occ in occurrences:
            ran = occ.state != "skipped"
            seen["missed_that_ran"] += ran and occ.fire_at in missed
            if not ran:
                seen["reasons"][occ.reason] += 1
            wanted_reason = policy_reason if occ.fire_at in runnable else "outside_catchup_window"
            if ran != (occ.fire_at in should_run) or (ran and occ.state != "succeeded") or \
                    (not ran and occ.reason != wanted_reason):
                seen["violations"] += 1
                if len(samples) < invariants.SAMPLE:
                    samples.append({"job": job_id, "policy": job.misfire_policy, "fire_at": str(occ.fire_at),
                                    "state": occ.state, "reason": occ.reason})
    for policy, seen in report.items():
        seen["reasons"] = dict(seen["reasons"])
        promise = {"skip": "no missed fire time ran", "run_once": "exactly the latest missed fire time ran, once",
                   "run_all": "the newest min(missed, max_catchup) missed fire times ran"}[policy]
        drill.check(f"misfire policy {policy}: {promise}; every other missed one is skipped with its reason",
                    seen["violations"] == 0 and seen["jobs"] == JOBS_PER_POLICY and seen["missed"] > 0,
                    {**seen, "sample": [s for s in samples if s["policy"] == policy]})
