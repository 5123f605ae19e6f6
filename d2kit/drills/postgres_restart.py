"""Workers die and schedulers die -- and so does the database. What happens when PostgreSQL itself restarts
under load?

Every process treats the database as something that comes and goes: a failed round trip is logged and retried
after a pause, connections are re-made on the next use, and nothing is considered done until the database has
committed it -- a worker keeps a finished job's completion queued until it is acknowledged. While PostgreSQL is
down nothing is materialised, dispatched or completed, which delays jobs without losing them: on the way back
the materialiser catches up on the fire times it missed, and any lease that ran out meanwhile is reaped and
retried like any other. Since every decision is a committed transaction or nothing, a restart cannot create a
second occurrence or a second success.

How the drill does it: on a private embedded PostgreSQL (never the shared server, whatever DATABASE_URL says),
two scheduler replicas and two workers run per-second crons, one-shot jobs and jobs that span a restart, and
the drill restarts the server (pg_ctl restart -m fast) under that load. The invariants: every process came back
by itself -- the same process, its heartbeat newer than the last restart -- every fire time is present once and
ran, and nothing succeeded twice.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

from sqlalchemy import text

from d2kit.drills import invariants, workload
from d2kit.drills.harness import Drill
from reference_impl import embedded_pg

FOLLOW_UP = None  # beyond the hidden follow-ups: the database under "workers die, the scheduler itself can die"
LEASE_SECONDS = 4.0


@contextlib.contextmanager
def private_server() -> Iterator[str]:
    """A throwaway PostgreSQL for this drill alone: restarting the shared one would cut everyone else off."""
    scratch = Path(tempfile.mkdtemp(prefix="d2drill-pg-"))
    pgdata = scratch / "pgdata"
    try:
        yield embedded_pg.start_private(pgdata)
    finally:
        embedded_pg.stop(pgdata)
        shutil.rmtree(scratch, ignore_errors=True)


def run(drill: Drill) -> None:
    restarts = 2 if drill.quick else 4
    window = 14.0 if drill.quick else 30.0
    drill.scale("restarts", f"{restarts} x pg_ctl restart -m fast, {window / (restarts + 1):.0f} s apart, on a "
                            "private embedded PostgreSQL")
    drill.scale("load", f"50 per-second crons, 300 one-shot jobs over {window:g} s, 20 jobs of 3 s; "
                        f"lease 30 s scaled to {LEASE_SECONDS:g} s")
    pgdata = Path(drill.scalar("SHOW data_directory"))

    with drill.phase("2 replicas and 2 workers under load"):
        for i in (1, 2):
            drill.cluster.start_scheduler(f"scheduler-{i}")
            drill.cluster.start_worker(f"worker-{i}", concurrency=16, lease=LEASE_SECONDS)
        crons = workload.submit_crons(drill.engine, "acme", 50, "* * * * * *", name="every-second",
                                      handler="noop", pool="short")
        start = drill.scalar("SELECT min(created_at) FROM jobs")
        soon = start + timedelta(seconds=2)
        workload.submit_one_shots(drill.engine, "acme", 300, soon, spread_seconds=window, name="one-shot",
                                  handler="noop", pool="short")
        workload.submit_one_shots(drill.engine, "acme", 20, soon, spread_seconds=window, name="spans-a-restart",
                                  handler="sleep", payload={"seconds": 3}, pool="short")
        drill.wait_for("every process to register", lambda: drill.scalar(
            "SELECT count(*) = 4 FROM processes WHERE heartbeat_at IS NOT NULL"), timeout=30)
        started = dict(drill.rows("SELECT id, started_at FROM processes"))

    with drill.phase("PostgreSQL restarts under load"):
        for i in range(1, restarts + 1):
            time.sleep(window / (restarts + 1))
            before = drill.scalar("SELECT pg_postmaster_start_time()")
            with drill.fault(f"PostgreSQL restart {i}"):
                embedded_pg.restart(pgdata)
            after = drill.wait_for("PostgreSQL to answer again", lambda: drill.scalar(
                "SELECT pg_postmaster_start_time()"), timeout=60)
            drill.check(f"the fault was real: restart {i} started a new postmaster", after > before,
                        {"postmaster_started_before": str(before), "after": str(after)})

    with drill.phase("every process reconnects by itself"):
        drill.wait_for("every process to heartbeat after the last restart", lambda: drill.scalar(
            "SELECT bool_and(heartbeat_at > CAST(:t AS timestamptz) + interval '1 second') FROM processes",
            t=after), timeout=30)
        back = {r.id: r for r in drill.rows("SELECT id, started_at, heartbeat_at FROM processes ORDER BY id")}
        alive = drill.cluster.alive()
        drill.check("every process reconnected by itself: the same processes (none restarted, none re-registered) "
                    "heartbeat after the last restart",
                    all(alive.values()) and all(back[p].started_at == started[p] for p in started),
                    {p: {"alive": alive.get(p), "heartbeat_after_restart_s": round(
                        (back[p].heartbeat_at - after).total_seconds(), 2),
                        "same_registration": back[p].started_at == started[p]} for p in started})

    with drill.phase("stop the schedules; settle"):
        with drill.engine.begin() as conn:
            conn.execute(text("UPDATE jobs SET paused = true WHERE id = ANY(:ids)"), {"ids": crons})
            end = conn.execute(text("SELECT min(materialized_through) FROM jobs WHERE id = ANY(:ids)"),
                               {"ids": crons}).scalar_one()
        drill.settle(timeout=60)

    with drill.engine.begin() as conn:
        drill.add(invariants.one_occurrence_per_fire_time(conn, start, end), invariants.every_occurrence_terminal(conn),
                  invariants.no_double_success(conn), invariants.attempts_accounted(conn),
                  invariants.dispatched_not_completed(conn))
        not_succeeded = conn.execute(text("SELECT count(*) FROM occurrences WHERE state <> 'succeeded'")).scalar_one()
        drill.check("nothing lost: every occurrence ran and succeeded", not_succeeded == 0,
                    {"not_succeeded": not_succeeded})
        spanning = conn.execute(text(
            "SELECT count(*) FROM attempts a WHERE a.state = 'succeeded' AND EXISTS (SELECT 1 FROM unnest("
            " CAST(:starts AS timestamptz[]), CAST(:ends AS timestamptz[])) AS r (s, e)"
            " WHERE a.dispatched_at < r.s AND a.finished_at > r.e)"),
            {"starts": [f.start for f in drill.faults], "ends": [f.end for f in drill.faults]}).scalar_one()
        drill.check("the restarts hit work in flight: attempts dispatched before a restart completed after it",
                    spanning > 0, {"attempts_spanning_a_restart": spanning})
        drill.focus = [r[0] for r in conn.execute(text(  # the picture: the 3-second jobs across the restarts
            "SELECT o.id FROM occurrences o JOIN jobs j ON j.id = o.job_id WHERE j.name LIKE 'spans-a-restart%'"
            " ORDER BY o.fire_at LIMIT 14"))]
        drill.metrics["downtime per restart (s)"] = [round((f.end - f.start).total_seconds(), 2) for f in drill.faults]
        drill.metrics["dispatch lateness after the fire time (s)"] = invariants.dispatch_lateness(conn)
        drill.metrics["attempts lost (leases that ran out across a restart)"] = conn.execute(text(
            "SELECT count(*) FROM attempts WHERE state = 'lost'")).scalar_one()
