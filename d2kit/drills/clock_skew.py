"""Clocks. Your scheduler node thinks it's 09:00 and the worker thinks it's 08:59:30.

Only one clock decides anything, the database's: whether a fire time is due, when a lease expires and whether it
has, and whether a fire time was missed are all computed inside PostgreSQL with now(), so a scheduler 30 seconds
fast cannot fire early and a reaper 30 seconds fast cannot expire a live lease early. A worker never compares
its wall clock with a timestamp from another machine: it trusts its lease only for the lease's length measured on
its own monotonic clock from when it sent its last acknowledged heartbeat, which is a lower bound on the real
expiry whatever either wall clock says. Wall clocks are still recorded -- each process's skew against the
database is stored and shown -- because seeing a skewed node is useful, just never load-bearing.

How the drill does it: the only worker runs 30 s behind and the only scheduler 30 s ahead -- with libfaketime
preloaded (the PyPI package ships it), so every clock read in those processes is skewed, not just
the kit's own code; where it cannot be loaded the drill is "not run", never passed -- and they run one-shot
jobs, per-second crons and jobs that outlive their lease several times over. The invariants check the
recorded skew (so the fault was real), that nothing started before its fire time (nor was dispatched earlier than
the worker's claim-ahead window) or was materialised early, that nothing ran twice, and that no lease was reaped
while its heartbeats were current.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from sqlalchemy import text

from d2kit.drills import invariants, workload
from d2kit.drills.harness import Drill
from reference_impl import materializer
from reference_impl.worker import WorkerConfig

FOLLOW_UP = 7
SKEW_SECONDS = 30
LEASE_SECONDS = 3.0
WORKER = "worker-behind"
SKEW_TOLERANCE_MS = 2_000
# libfaketime 0.9.10 hangs CPython's timed waits when it fakes CLOCK_MONOTONIC and makes time.sleep fail with
# EINVAL when it does not (wolfcw/libfaketime#390, #469). A skewed host has a wrong wall clock and a right
# monotonic one, so monotonic stays real and time.sleep waits with select() instead: same semantics.
SLEEP_SHIM = "import select\nimport time\n\ntime.sleep = lambda seconds: select.select([], [], [], max(0.0, seconds))\n"


def faketime_env(seconds: int, shim_dir: Path) -> dict[str, str]:
    """The environment of a process whose every wall-clock read is ``seconds`` off: libfaketime, as the PyPI package
    ``libfaketime`` installs it (its wheel ships a Linux x86-64 build), preloaded into it."""
    import libfaketime  # a dependency; imported here so only this drill pays for it

    shim_dir.mkdir(parents=True, exist_ok=True)
    (shim_dir / "sitecustomize.py").write_text(SLEEP_SHIM)
    preload = libfaketime.get_reload_information()[1]
    return {**preload, "FAKETIME": f"{seconds:+d}s", "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "PYTHONPATH": os.pathsep.join(p for p in (str(shim_dir), os.environ.get("PYTHONPATH")) if p)}


def skew_injected(env: dict[str, str], seconds: int) -> str | None:
    """Start a Python process with ``env`` and measure its wall clock against ours: None if it is ``seconds``
    off (the fault can be injected), else why not."""
    probe = "import time; print(time.time())"
    try:
        done = subprocess.run([sys.executable, "-c", probe], env={**os.environ, **env}, capture_output=True,
                              text=True, timeout=30)
        measured = float(done.stdout.strip()) - time.time()
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        return f"libfaketime could not be loaded ({type(exc).__name__}: {exc})"
    if abs(measured - seconds) > SKEW_TOLERANCE_MS / 1000:
        return (f"libfaketime did not skew a process's clock (asked for {seconds:+d} s, measured {measured:+.1f} s; "
                f"{done.stderr.strip()[:200] or 'no error'})")
    return None


def run(drill: Drill) -> None:
    seconds = 12.0 if drill.quick else 40.0
    shim = drill.report_dir / "logs" / "faketime-shim"
    scheduler_env, worker_env = faketime_env(+SKEW_SECONDS, shim), faketime_env(-SKEW_SECONDS, shim)
    for env, seconds_off in ((scheduler_env, +SKEW_SECONDS), (worker_env, -SKEW_SECONDS)):
        why = skew_injected(env, seconds_off)
        if why:  # a drill without its fault proves nothing: no verdict, never PASSED
            drill.not_run(why)
    drill.scale("skew", f"scheduler +{SKEW_SECONDS} s, worker -{SKEW_SECONDS} s: libfaketime (FAKETIME) preloaded")
    drill.scale("lease", f"30 s scaled to {LEASE_SECONDS:g} s; long jobs run {3 * LEASE_SECONDS:g} s")
    drill.scale("workload", f"{seconds:g} s of one-shot jobs, per-second crons and long jobs")
    drill.notes.append(
        "How the skew is made: libfaketime (from the PyPI package `libfaketime`, a pip dependency) is preloaded into "
        "the scheduler and worker processes, so every wall-clock read in them is skewed, not only the kit's own. "
        "Its monotonic clock is left real (FAKETIME_DONT_FAKE_MONOTONIC=1), as on a real skewed host, and "
        "`time.sleep` waits with select(): libfaketime 0.9.10 can otherwise hang CPython's timed waits or make "
        "`time.sleep` fail (wolfcw/libfaketime#390, #469). Where libfaketime cannot be loaded the drill reports "
        "\"not run\", never a verdict.")

    with drill.phase("start a scheduler 30 s ahead and a worker 30 s behind"):
        drill.cluster.start_scheduler("scheduler-ahead", env=scheduler_env)
        drill.cluster.start_worker(WORKER, concurrency=16, lease=LEASE_SECONDS, env=worker_env)
        soon = workload.db_now(drill.engine) + timedelta(seconds=3)
        workload.submit_one_shots(drill.engine, "acme", 200, soon, spread_seconds=seconds, name="one-shot",
                                  handler="noop", pool="short")
        workload.submit_one_shots(drill.engine, "acme", 6, soon, spread_seconds=seconds / 2, name="outlives-lease",
                                  handler="sleep", payload={"seconds": 3 * LEASE_SECONDS}, pool="short")
        crons = workload.submit_crons(drill.engine, "acme", 5, "* * * * * *", name="every-second", handler="noop",
                                      pool="short")
        cron_start = drill.scalar("SELECT min(created_at) FROM jobs WHERE id = ANY(:ids)", ids=crons)

    with drill.phase("run: every due/lease decision on the database clock"):
        end = soon + timedelta(seconds=seconds + 3 * LEASE_SECONDS)
        drill.wait_for("the workload window to pass", lambda: drill.scalar(
            "SELECT now() >= CAST(:end AS timestamptz)", end=end), timeout=seconds + 60, every=0.5)
        with drill.engine.begin() as conn:
            conn.execute(text("UPDATE jobs SET paused = true WHERE id = ANY(:ids)"), {"ids": crons})
            cron_end = conn.execute(text("SELECT max(materialized_through) FROM jobs WHERE id = ANY(:ids)"),
                                    {"ids": crons}).scalar_one()
        drill.settle(timeout=30 + 3 * LEASE_SECONDS)

    with drill.engine.begin() as conn:
        _check(drill, conn, cron_start, cron_end)


def _check(drill: Drill, conn, cron_start, cron_end) -> None:
    skews = dict(conn.execute(text("SELECT id, skew_ms FROM processes")).all())
    expected = {"scheduler-ahead": SKEW_SECONDS * 1000, WORKER: -SKEW_SECONDS * 1000}
    drill.check(f"the fault was real: the recorded skew is about +{SKEW_SECONDS} s (scheduler) and "
                f"-{SKEW_SECONDS} s (worker)", all(skews.get(p) is not None and abs(skews[p] - ms) <= SKEW_TOLERANCE_MS
                                                   for p, ms in expected.items()),
                {"skew_ms": {p: round(v, 1) if v is not None else None for p, v in skews.items()}})
    # The worker claims ahead (worker.py): a row may be handed over up to its claim-ahead window before it is due,
    # and its handler must still start no earlier than the fire time.
    ahead = WorkerConfig(WORKER).claim_ahead
    early = conn.execute(text(
        "SELECT count(*) FILTER (WHERE a.dispatched_at < o.fire_at - make_interval(secs => :ahead)) AS too_early,"
        " count(*) FILTER (WHERE a.started_at < o.fire_at) AS started_early,"
        " count(*) FILTER (WHERE a.started_at IS NOT NULL) AS started, count(*) AS attempts,"
        " min(extract(epoch FROM a.dispatched_at - o.fire_at)) AS earliest_dispatch_s,"
        " min(extract(epoch FROM a.started_at - o.fire_at)) AS earliest_start_s"
        " FROM attempts a JOIN occurrences o ON o.id = a.occurrence_id"), {"ahead": ahead}).mappings().one()
    drill.check(f"no attempt was dispatched more than the worker's {ahead:g} s claim-ahead window before its fire "
                f"time, and no handler started before it (database clock)",
                early["too_early"] == 0 and early["started_early"] == 0 and early["started"] > 0,
                {"dispatched_too_early": early["too_early"], "started_early": early["started_early"],
                 "attempts": early["attempts"], "started": early["started"],
                 "earliest_dispatch_s": round(float(early["earliest_dispatch_s"]), 3),
                 "earliest_start_s": round(float(early["earliest_start_s"]), 3)})
    premature = conn.execute(text(
        "SELECT count(*) FILTER (WHERE created_at < fire_at - make_interval(secs => :la)) AS premature,"
        " max(extract(epoch FROM fire_at - created_at)) AS most_ahead_s FROM occurrences"),
        {"la": materializer.LOOKAHEAD.total_seconds()}).mappings().one()
    drill.check(f"no occurrence was materialised more than the {materializer.LOOKAHEAD.total_seconds():g} s "
                f"lookahead before its fire time (a scheduler trusting its clock would be {SKEW_SECONDS} s early)",
                premature["premature"] == 0, {"premature": premature["premature"],
                                              "most_ahead_s": round(float(premature["most_ahead_s"]), 3)})
    once = dict(conn.execute(text(
        "SELECT n, count(*) FROM (SELECT count(*) AS n FROM attempts GROUP BY occurrence_id) x GROUP BY n")).all())
    drill.check("no double dispatch: every occurrence was dispatched exactly once", set(once) == {1},
                {"occurrences_by_attempt_count": {str(k): v for k, v in once.items()}})
    reaped = conn.execute(text(
        "SELECT count(*) AS lost, count(*) FILTER (WHERE finished_at - coalesce(heartbeat_at, dispatched_at)"
        "   < make_interval(secs => :lease)) AS early FROM attempts WHERE state = 'lost'"),
        {"lease": LEASE_SECONDS}).mappings().one()
    long_jobs = conn.execute(text(
        "SELECT count(*) AS jobs, count(*) FILTER (WHERE o.state = 'succeeded' AND o.attempts = 1) AS first_try,"
        " min(extract(epoch FROM a.finished_at - a.dispatched_at)) AS shortest_run_s"
        " FROM occurrences o JOIN jobs j ON j.id = o.job_id JOIN attempts a ON a.occurrence_id = o.id"
        " WHERE j.name LIKE 'outlives-lease%'")).mappings().one()
    drill.check("no lease was judged by a skewed clock: none reaped while its heartbeats were current, and every "
                "job that outlived its lease finished on its first attempt",
                reaped["early"] == 0 and long_jobs["jobs"] > 0 and long_jobs["first_try"] == long_jobs["jobs"]
                and float(long_jobs["shortest_run_s"]) > 2 * LEASE_SECONDS,
                {"lost_attempts": reaped["lost"], "reaped_before_lease_ran_out": reaped["early"],
                 "long_jobs": long_jobs["jobs"], "long_jobs_first_try": long_jobs["first_try"],
                 "shortest_long_run_s": round(float(long_jobs["shortest_run_s"] or 0), 2),
                 "lease_s": LEASE_SECONDS})
    drill.add(invariants.every_occurrence_terminal(conn),
              invariants.one_occurrence_per_fire_time(conn, cron_start, cron_end))
    drill.notes.append(
        "What a skewed clock would have broken, had it been trusted: a scheduler 30 s ahead materialising by its "
        "own clock fires every job 30 s early; a reaper 30 s ahead expires every lease 30 s early, so each job "
        "that outlives its lease would show a lost attempt and a second run; a worker 30 s behind comparing its "
        "wall clock with an absolute lease expiry believes it still holds a lease for 30 s after it expired.")
