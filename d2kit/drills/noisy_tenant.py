"""One tenant submits a job that takes 6 hours and pins a worker. Now their other jobs are starving everyone
else's. What do you do?

Isolate by expected duration first: long jobs run in their own pool of workers, so a 6-hour job can only ever
occupy a long-pool slot and never sits in front of a 100 ms job. Then cap each tenant's running attempts per
pool, so one tenant's flood, long or short, holds at most its cap of slots and the rest stay free for others.
Within a pool the claim picks the tenant with the smallest running share first, so a tenant with a huge backlog
gets its share and no more, and a quiet tenant's job is picked as soon as a slot is free.

How the drill does it: tenant "noisy" (cap 4 per pool) floods the long pool with "6-hour" jobs and the short
pool with a backlog of short ones; tenant "victim" then submits short jobs every quarter second and two long
ones. The invariants read the attempts table: the victim's worst wait (first dispatch minus fire time, database
clock) stays under the stated bound, and the caps held at every instant, rebuilt from attempt intervals.
"""

from __future__ import annotations

import time

from sqlalchemy import text

from d2kit.drills import invariants, workload
from d2kit.drills.harness import Drill, Series
from reference_impl import tenants

FOLLOW_UP = 4
NEGATIVE_CONTROL = ("no isolation: one shared pool for every job and no per-tenant cap -- the 6-hour jobs pin "
                    "every slot and the victim's wait bound must fail")
NOISY_CAP = 4
WAIT_BOUND_SECONDS = 2.0  # a scheduler tick + a claim poll + one short job ahead, with margin; not the noisy backlog
SHORT_WORKERS, SLOTS_EACH = 4, 4  # 16 short-pool slots; several claimers contend for the pool


def run(drill: Drill) -> None:
    long_job = 20.0 if drill.quick else 45.0
    victim_for = 12.0 if drill.quick else 30.0
    shared_pool = drill.negative_control
    drill.scale("6-hour job", f"scaled to {long_job:g} s ('expected_duration' 6 h, so the long pool)")
    drill.scale("victim's traffic", f"a short job every 0.25 s for {victim_for:g} s, and 2 long jobs")
    drill.scale("workers", f"short pool {SHORT_WORKERS} x {SLOTS_EACH} slots, long pool 1 x 8 slots; noisy capped "
                           f"at {NOISY_CAP} per pool")
    if shared_pool:
        drill.notes.append("**NO ISOLATION (negative control): one pool for every job, no cap on the noisy tenant.**")

    with drill.phase("noisy floods both pools"):
        with drill.engine.begin() as conn:
            tenants.create_tenant(conn, "noisy", max_running=1000 if shared_pool else NOISY_CAP)
            tenants.create_tenant(conn, "victim", max_running=100)
        # Submitted before any process starts, so the long jobs' time runs from their claim, not from a
        # submission that a slow machine can stretch over most of it (a negative control then found the slots
        # free again by the time the victim came, and passed).
        now = workload.db_now(drill.engine)
        workload.submit_one_shots(drill.engine, "noisy", 16, now, name="six-hour-etl", handler="sleep",
                                  payload={"seconds": long_job}, expected_duration_seconds=6 * 3600,
                                  pool="short" if shared_pool else None)
        # short and many: completions and claims interleave all the time, the hard case for the cap
        workload.submit_one_shots(drill.engine, "noisy", 3000, now, name="noisy-backlog", handler="sleep",
                                  payload={"seconds": 0.1}, pool="short")
        drill.cluster.start_scheduler("scheduler-1")
        for i in range(1, SHORT_WORKERS + 1):
            drill.cluster.start_worker(f"short-{i}", pool="short", concurrency=SLOTS_EACH)
        drill.cluster.start_worker("long-1", pool="long", concurrency=8)
        drill.wait_for("the noisy tenant to fill its slots", lambda: drill.scalar(
            "SELECT count(*) >= :n FROM occurrences WHERE tenant_id = 'noisy' AND state = 'running'",
            n=2 * NOISY_CAP if not shared_pool else SHORT_WORKERS * SLOTS_EACH), timeout=30)

    with drill.phase("victim submits while noisy's backlog waits"):
        with drill.fault("noisy tenant flooding"):
            victim_jobs = _victim_traffic(drill, victim_for)
            drill.wait_for("every victim job to finish", lambda: drill.scalar(
                "SELECT count(*) = :n FROM occurrences WHERE tenant_id = 'victim' AND state = 'succeeded'",
                n=victim_jobs), timeout=long_job * 2 + 30)

    with drill.engine.begin() as conn:
        waits = invariants.dispatch_lateness(conn, "victim")
        drill.check(f"the victim's worst wait (first dispatch - fire time) stays under {WAIT_BOUND_SECONDS:g} s",
                    waits["n"] == victim_jobs and (waits["p100"] or 0) <= WAIT_BOUND_SECONDS,
                    {"victim_jobs": victim_jobs, "wait_s": waits})
        caps = invariants.caps_held(conn)
        drill.add(caps, invariants.no_double_success(conn))
        noisy = {p["pool"]: p["peak_running"] for p in caps.observed["peaks"] if p["tenant_id"] == "noisy"}
        backlog = conn.execute(text(
            "SELECT count(*) FROM occurrences WHERE tenant_id = 'noisy' AND state = 'ready'")).scalar_one()
        flooded = (noisy.get("short", 0) >= SHORT_WORKERS * SLOTS_EACH if shared_pool
                   else noisy.get("short") == NOISY_CAP and noisy.get("long") == NOISY_CAP)
        drill.check("the flood was real: noisy ran at its cap in both pools (with no cap: on every slot) and still "
                    "had a backlog at the end", flooded and backlog > 0,
                    {"noisy_peak_running_by_pool": noisy, "noisy_still_waiting": backlog})
        drill.metrics["victim wait (s)"] = waits
        drill.metrics["noisy wait (s)"] = invariants.dispatch_lateness(conn, "noisy")
        _picture(drill, conn, shared_pool)


def _picture(drill: Drill, conn, shared_pool: bool) -> None:
    """Lanes: noisy's long jobs and a spread of the victim's; panels: running per tenant and pool against the
    cap, and every victim job's wait against the bound."""
    drill.focus = [r[0] for r in conn.execute(text(
        "(SELECT id FROM occurrences o WHERE tenant_id = 'noisy' AND state <> 'ready'"
        "  AND job_id IN (SELECT id FROM jobs WHERE name LIKE 'six-hour%') ORDER BY id LIMIT 4)"
        " UNION ALL (SELECT id FROM occurrences WHERE tenant_id = 'victim' AND id % 6 = 0 ORDER BY id LIMIT 8)"))]
    start, end = drill.started_at, drill.now()
    for tenant, pool in (("noisy", "short"), ("noisy", "long"), ("victim", "short")):
        if shared_pool and pool == "long":
            continue
        points = conn.execute(text("""
            SELECT t, (SELECT count(*) FROM attempts a JOIN occurrences o ON o.id = a.occurrence_id
                       WHERE o.tenant_id = :tenant AND o.pool = :pool AND a.dispatched_at <= t
                         AND coalesce(a.finished_at, 'infinity') > t)
            FROM generate_series(CAST(:s AS timestamptz), :e, interval '100 milliseconds') t"""),
            {"tenant": tenant, "pool": pool, "s": start, "e": end}).all()
        cap = None if shared_pool or tenant == "victim" else NOISY_CAP
        drill.series.append(Series(f"{tenant} running, {pool} pool", "running", [tuple(p) for p in points], cap))
    waits = conn.execute(text(
        "SELECT o.fire_at, extract(epoch FROM min(a.dispatched_at) - o.fire_at)::float FROM occurrences o"
        " JOIN attempts a ON a.occurrence_id = o.id WHERE o.tenant_id = 'victim' GROUP BY o.id ORDER BY o.fire_at"))
    drill.series.append(Series("victim wait per job", "s", [tuple(w) for w in waits], WAIT_BOUND_SECONDS))


def _victim_traffic(drill: Drill, seconds: float) -> int:
    """A short job every quarter second (due at once), plus two long ones a third of the way in."""
    submitted = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        now = workload.db_now(drill.engine)
        workload.submit_one_shots(drill.engine, "victim", 1, now, name=f"victim-{submitted}", handler="sleep",
                                  payload={"seconds": 0.2}, pool="short")
        submitted += 1
        if submitted == int(seconds * 4 / 3):
            workload.submit_one_shots(drill.engine, "victim", 2, now, name="victim-long", handler="sleep",
                                      payload={"seconds": 2}, expected_duration_seconds=3600,
                                      pool="short" if drill.negative_control else None)
            submitted += 2
        time.sleep(0.25)
    return submitted
