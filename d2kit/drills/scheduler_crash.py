"""A scheduler replica dies in the middle of materialising. What is lost, and what runs twice?

Nothing, because a replica's work is one transaction: it locks a batch of due jobs, writes their occurrence rows
and moves their cursors together, so a replica SIGKILLed halfway rolls all of it back and leaves the jobs due for
the next replica, which writes exactly the same rows. Even a replica that had committed and is repeated cannot
add a second occurrence, because (job_id, fire_at) is unique, and no replica is special, so there is no failover
to wait for. Per-second schedules therefore come out with every fire time present once, whoever wrote it.

How the drill does it: three replicas materialise a few hundred per-second cron jobs while a seeded chaos loop
SIGKILLs a random replica the moment pg_stat_activity shows it inside a transaction, and starts a replacement.
The invariants compare every job's occurrences with its schedule (schedule.fire_times) over the whole window.
"""

from __future__ import annotations

import random
import time

from sqlalchemy import text

from d2kit.drills import invariants, workload
from d2kit.drills.harness import Drill, Series

FOLLOW_UP = None  # not a hidden follow-up: the prompt's own "the scheduler itself can die"
SEED = 8
REPLICAS = 3


def run(drill: Drill) -> None:
    jobs = 300 if drill.quick else 1_000
    chaos_for = 15.0 if drill.quick else 40.0
    drill.scale("load", f"{jobs} per-second cron jobs ({jobs} fire times a second)")
    drill.scale("chaos", f"for {chaos_for:g} s, a random replica SIGKILLed mid-transaction every 0.5-1.5 s "
                         f"(seed {SEED}) and replaced")
    chaos = random.Random(SEED)

    with drill.phase("3 replicas and 2 workers on per-second crons"):
        live = [f"scheduler-{i}" for i in range(1, REPLICAS + 1)]
        for name in live:
            drill.cluster.start_scheduler(name)
        for i in (1, 2):
            drill.cluster.start_worker(f"worker-{i}", concurrency=32)
        job_ids = workload.submit_crons(drill.engine, "acme", jobs, "* * * * * *", name="every-second",
                                        handler="noop", pool="short")
        start = drill.scalar("SELECT min(created_at) FROM jobs")  # every cron's cursor starts here

    with drill.phase("chaos: replicas SIGKILLed mid-materialisation"):
        kills = caught = 0
        deadline = time.monotonic() + chaos_for
        while time.monotonic() < deadline:
            time.sleep(chaos.uniform(0.5, 1.5))
            victim = chaos.choice(live)
            caught += drill.kill_mid_transaction(victim, timeout=1.0)
            kills += 1
            replacement = f"{victim.split('.')[0]}.{kills + 1}"
            live[live.index(victim)] = replacement
            drill.cluster.start_scheduler(replacement)

    with drill.phase("stop the schedules; settle"):
        end = drill.stop_schedules(timeout=60)

    with drill.engine.begin() as conn:
        drill.add(invariants.one_occurrence_per_fire_time(conn, start, end),
                  invariants.every_occurrence_terminal(conn), invariants.no_double_success(conn))
        once = dict(conn.execute(text(
            "SELECT n, count(*) FROM (SELECT count(*) AS n FROM attempts GROUP BY occurrence_id) x GROUP BY n")).all())
        drill.check("every occurrence was dispatched exactly once (no worker died)", set(once) == {1},
                    {"occurrences_by_attempt_count": {str(k): v for k, v in once.items()}})
        drill.metrics["dispatch lateness after the fire time (s)"] = invariants.dispatch_lateness(conn)
        # The picture: how far ahead of each second its occurrences were written, kills and all.
        drill.series.append(Series("written ahead of the fire time (worst per second; < 0: late)", "s", [
            tuple(r) for r in conn.execute(text(
                "SELECT fire_at, min(extract(epoch FROM fire_at - created_at))::float FROM occurrences"
                " GROUP BY fire_at ORDER BY fire_at"))], limit=0.0))
    # Not every kill can be caught inside a transaction (on a loaded machine the probe itself waits for a CPU);
    # a handful of them is what makes the point.
    drill.check("the fault was real: replicas died inside materialise/reap transactions", kills >= 5 and
                caught >= 3, {"kills": kills, "mid_transaction": caught, "jobs": len(job_ids)})
    drill.metrics.update({"SIGKILLs": kills, "of them mid-transaction": caught})
