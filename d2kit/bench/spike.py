"""Cron fires in spikes: N crons at the same second vs the same N with a hashed second (``H``).

Real schedules bunch at :00 and midnight. A fleet of jobs due at one instant is admitted at the dispatch rate, so
its last member starts late by N / rate; the same jobs with a hashed field (schedule.resolve_hashed) spread over
the field's range and each starts on time. Scaled in time: "daily at midnight" becomes "every ``spread`` seconds
at second 0" against "every ``spread`` seconds at a hashed second" (``H/spread``), so a run waits seconds, not a
day. Both variants run on a fresh rig and are read back the same way: the fire lag (fire time -> handler start)
of the fire times in one period.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from sqlalchemy import text

from d2kit.bench import harness
from d2kit.bench.harness import ClusterShape, Progress, quiet
from reference_impl import schedule

# Recurring no-op jobs, cursors at the database's now() and due at once: the materialiser plans each from its
# expression, exactly as for a job submitted through jobs.submit (the same row, in bulk).
CRONS_SQL = text(
    "INSERT INTO jobs (tenant_id, name, handler, pool, schedule_kind, cron, materialized_through, next_fire_at)"
    " SELECT 'bench-' || (c.i % :tenants), 'spike-' || c.i, 'noop', 'short', 'cron', c.cron, now(), now()"
    " FROM unnest(CAST(:crons AS text[])) WITH ORDINALITY AS c (cron, i)")
# The first period boundary at least LEAD seconds away: every fire time of the window is planned the normal way.
BOUNDARY_SQL = text("SELECT to_timestamp(ceil(extract(epoch FROM clock_timestamp() + make_interval(secs => :lead))"
                    " / :spread) * :spread)")
LEAD_SECONDS = 5.0
SETTLE_SECONDS = 60.0


def compare(shape: ClusterShape, jobs: int, spread_seconds: int, progress: Progress = quiet) -> dict[str, Any]:
    """``jobs`` crons firing every ``spread_seconds`` (a divisor of 60) at second 0 of the period, then the same jobs
    at a hashed second: fire lag of the fire times in one period, for each."""
    variants = {"same_instant": f"* * * * * 0-59/{spread_seconds}", "hashed": f"* * * * * H/{spread_seconds}"}
    measured = {label: _run(shape, jobs, cron, spread_seconds, label, progress) for label, cron in variants.items()}
    return {"jobs": jobs, "spread_seconds": spread_seconds, "expressions": variants, **measured,
            "cluster": shape.describe()}


def _run(shape: ClusterShape, jobs: int, cron: str, spread_seconds: int, label: str,
         progress: Progress) -> dict[str, Any]:
    crons = [schedule.resolve_hashed(cron, f"spike-{i}") for i in range(1, jobs + 1)]
    with harness.rig(shape) as rig:
        with rig.engine.begin() as conn:
            conn.execute(CRONS_SQL, {"crons": crons, "tenants": shape.tenants})
            window_start = conn.execute(BOUNDARY_SQL, {"lead": LEAD_SECONDS, "spread": spread_seconds}).scalar_one()
        window_end = window_start + timedelta(seconds=spread_seconds)
        deadline = time.monotonic() + (window_end - rig.db_now()).total_seconds() + SETTLE_SECONDS
        while time.monotonic() < deadline and not _window_done(rig, window_start, window_end, jobs):
            progress(f"spike {label}: {jobs:,} jobs, period from {window_start:%H:%M:%S}, {spread_seconds} s")
            time.sleep(1.0)
        with rig.engine.begin() as conn:
            conn.execute(text("UPDATE jobs SET paused = true"))
        lag = harness.fire_lag(rig.engine, window_start, window_end)
        return {"expression": cron, "occurrences": lag.count, "fire_lag_ms": lag.as_dict(),
                "distinct_fire_seconds": len(set(crons))}


def _window_done(rig: harness.Rig, since, until, jobs: int) -> bool:
    """Every job's fire time in [since, until) has started (its attempt has a start time)."""
    return harness.fire_lag(rig.engine, since, until).count >= jobs
