"""The experiments behind ``make bench``, each on a fresh rig (scratch database + real processes).

* ``sustained``   -- offered load at a fixed rate for a while: throughput, fire lag, backlog growth, CPU, RSS;
  optionally with a REPEATABLE READ snapshot held open for part of it (``held_snapshot``).
* ``max_rate``    -- offered rate stepped up until p99 fire lag exceeds the limit or the backlog grows.
* ``drain``       -- a backlog of overdue occurrences appears at once: executions/s until it is gone.
* ``batch_curve`` -- drain rate for each claim batch size x worker-process count.
* ``poll_period`` -- the peak offered with each worker poll period: what a shorter fire lag costs in CPU.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine, text

from d2kit import capacity
from d2kit.bench import harness
from d2kit.bench.harness import ClusterShape, Progress, quiet
from d2kit.bench.profile import DatabaseActivity, PythonProfile

PEAK_RATE = capacity.peak_rate()     # the design's peak, executions/s: what the parts offer
LAG_LIMIT_MS = 100.0          # the fire-lag goal: p99 scheduled time -> handler start
WARMUP_SECONDS = 3.0          # the first seconds of a run are process start-up, not the steady state
DRAIN_TIMEOUT_SECONDS = 300.0
GROWTH_TOLERANCE = 0.02       # backlog growing by less than 2% of the offered rate per second is "not growing"
SATURATE_DEPTH = 2_000        # the same queue depth peer_runner.py keeps for the peers
SATURATE_CHUNK = 1_000


@dataclass(frozen=True)
class HeldSnapshot:
    after_seconds: float  # into the run
    hold_seconds: float


def sustained(shape: ClusterShape, rate: float, seconds: float, *, snapshot: HeldSnapshot | None = None,
              with_series: bool = False, with_profile: bool = False, progress: Progress = quiet) -> dict[str, Any]:
    """``rate`` executions/s offered for ``seconds`` (plus warm-up) through the full path; measured over the
    steady part. With ``snapshot``, a REPEATABLE READ transaction holds its snapshot open for part of the run.
    With ``with_profile``, py-spy samples the scheduler and worker processes over the steady part, and
    pg_stat_activity what the database's backends are doing."""
    with harness.rig(shape) as rig:
        # The first fire time lies beyond the generator's lead: jobs then arrive at the offered rate from the
        # start, instead of a burst of LEAD_SECONDS' worth that the materialiser would first have to catch up.
        start = rig.db_now() + timedelta(seconds=harness.LEAD_SECONDS + 1)
        load = harness.OfferedLoad(rig.engine, rate, seconds + WARMUP_SECONDS, start, shape.tenants)
        meter = harness.ProcessMeter(rig.components(), rig.engine)
        sampler = harness.BacklogSampler(rig, meter)
        cost_before = harness.cost_counters(rig.engine)
        load.start()
        time.sleep(max(0.0, (start - rig.db_now()).total_seconds()) + WARMUP_SECONDS)
        meter.start()
        sampler.start()
        python = PythonProfile(rig.components(), seconds) if with_profile else None
        activity = DatabaseActivity(rig.engine) if with_profile else None
        if activity:
            activity.start()
        snapshot_window = _hold_snapshot(rig, snapshot, start, load, progress) if snapshot else None
        # The generator writes each job LEAD_SECONDS before it fires, so it finishes that much before the last
        # fire time: wait for the fire times themselves, or the drain below would find the last jobs not yet
        # due, call the rig idle, and count them lost.
        while rig.db_now() < load.end and not load.error:
            progress(f"{rate:,.0f}/s offered: {load.scheduled:,} of {load.total:,} jobs scheduled")
            time.sleep(min(1.0, max(0.05, (load.end - rig.db_now()).total_seconds())))
        load.join()
        meter.stop()
        if activity:
            activity.halt.set()
        sampler.halt.set()
        queue_rows, history_rows = harness.record_sizes(rig.engine)
        rss = rig.peak_rss()
        drained = rig.wait_drained(DRAIN_TIMEOUT_SECONDS)
        if load.error:
            raise RuntimeError(f"the load generator failed: {load.error}")
        time.sleep(harness.STATS_FLUSH_SECONDS)
        cost = harness.cost_per_execution(cost_before, harness.cost_counters(rig.engine),
                                          harness.completed(rig.engine, start, rig.db_now())[0])
        steady_from = start + timedelta(seconds=WARMUP_SECONDS)
        lag = harness.fire_lag(rig.engine, steady_from, load.end)
        done, _, _ = harness.completed(rig.engine, steady_from, load.end)
        window = (load.end - steady_from).total_seconds()
        growth = sampler.growth_per_second()
        result: dict[str, Any] = {
            "offered_per_second": rate,
            "seconds": round(window, 1),
            "executions_per_second": round(done / window, 1),
            "fire_lag_ms": lag.as_dict(),
            "backlog_max": max((b for _, b in sampler.samples), default=0),
            "backlog_max_by_stage": sampler.stage_max,  # which stage fell behind: unclaimed or unmaterialised
            "backlog_growth_per_second": round(growth, 2),
            "backlog_growing": growth > GROWTH_TOLERANCE * rate,
            "queue_rows_at_end": queue_rows,      # occurrences: in flight + finished not yet archived
            "history_rows_at_end": history_rows,  # execution_history
            "drained": drained,
            "lost_occurrences": harness.lost(rig.engine, start, load.end),
            "cost_per_execution": cost,
            "cpu_percent": meter.cpu_percent(),
            "peak_rss_mb": rss,
            "cluster": shape.describe(),
        }
        if snapshot_window:
            result["held_snapshot"] = _snapshot_effect(rig, snapshot_window, rate)
        if python:
            result["python_profile"] = python.result()
        if activity:
            result["database_activity"] = activity.result()
        if with_series:
            result["series"] = harness.series(rig.engine, start, load.end + timedelta(seconds=5))
            result["backlog_series"] = [{"t": t, "backlog": b} for t, b in sampler.samples]
        return result


def _hold_snapshot(rig: harness.Rig, snapshot: HeldSnapshot, start, load: harness.OfferedLoad,
                   progress: Progress) -> dict[str, Any]:
    """Open a REPEATABLE READ transaction, read once (that takes the snapshot), keep it open, then commit."""
    time.sleep(max(0.0, snapshot.after_seconds - WARMUP_SECONDS))
    with rig.engine.connect() as conn:
        conn = conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            held_from = conn.execute(text("SELECT clock_timestamp()")).scalar_one()
            conn.execute(text("SELECT count(*) FROM occurrences")).scalar_one()
            deadline = time.monotonic() + snapshot.hold_seconds
            while time.monotonic() < deadline and load.is_alive():
                progress(f"snapshot held for {snapshot.hold_seconds - (deadline - time.monotonic()):,.0f}s "
                         f"of {snapshot.hold_seconds:,.0f}s")
                time.sleep(1)
    return {"from": held_from, "until": rig.db_now()}


def _snapshot_effect(rig: harness.Rig, window: dict[str, Any], rate: float) -> dict[str, Any]:
    """Fire lag while the snapshot was held, and how long after its release the lag came back under the limit."""
    held = harness.fire_lag(rig.engine, window["from"], window["until"])
    per_second = harness.series(rig.engine, window["until"], window["until"] + timedelta(minutes=10))
    cleared_after = next((row["t"] for row in per_second
                          if row["lag_p99_ms"] is not None and row["lag_p99_ms"] <= LAG_LIMIT_MS), None)
    return {"held_seconds": round((window["until"] - window["from"]).total_seconds(), 1),
            "fire_lag_ms_while_held": held.as_dict(),
            "recovered_seconds_after_release": cleared_after,
            "offered_per_second": rate}


def drain(shape: ClusterShape, backlog: int, progress: Progress = quiet,
          prepare: Callable[[Engine], None] | None = None, rounds: int = 1) -> dict[str, Any]:
    """``backlog`` overdue occurrences appear in one commit while the workers idle: executions/s to clear them.
    With ``rounds`` > 1 the drain is repeated on the same rig and the median run reported (with all rates).
    ``prepare`` fills the database first."""
    with harness.rig(shape, prepare) as rig:
        runs = [drain_on(rig, backlog, progress) for _ in range(rounds)]
    middle = sorted(runs, key=lambda r: r["executions_per_second"])[len(runs) // 2]
    return {**middle, "runs_executions_per_second": [r["executions_per_second"] for r in runs],
            "lost_occurrences": sum(r["lost_occurrences"] for r in runs)}


def drain_on(rig: harness.Rig, backlog: int, progress: Progress = quiet) -> dict[str, Any]:
    """One drain on a running rig (scale.py repeats it on a database it filled with millions of rows)."""
    meter = harness.ProcessMeter(rig.components(), rig.engine)
    sampler = harness.BacklogSampler(rig, meter, count_backlog=False)
    meter.start()
    before, committed = harness.insert_backlog(rig.engine, backlog, rig.shape.tenants)
    sampler.start()
    deadline = time.monotonic() + DRAIN_TIMEOUT_SECONDS
    while time.monotonic() < deadline and not rig.wait_drained(1.0):
        progress(f"draining {backlog:,}: {time.monotonic() - deadline + DRAIN_TIMEOUT_SECONDS:,.0f}s")
    meter.stop()
    sampler.halt.set()
    done, _, last = harness.completed(rig.engine, before, rig.db_now())
    seconds = (last - committed).total_seconds() if last else float("nan")
    return {"backlog": backlog, "completed": done, "seconds": round(seconds, 2),
            "executions_per_second": round(done / seconds, 1) if last else 0.0,
            "lost_occurrences": backlog - done, "cpu_percent": meter.cpu_percent(),
            "peak_rss_mb": rig.peak_rss(), "cluster": rig.shape.describe()}


def saturate(shape: ClusterShape, seconds: float, progress: Progress = quiet) -> dict[str, Any]:
    """Executions/s with the queue never empty: whenever fewer than ``SATURATE_DEPTH`` occurrences are due, another
    ``SATURATE_CHUNK`` appear (the peers are driven the same way in peer_runner.py)."""
    with harness.rig(shape) as rig:
        meter = harness.ProcessMeter(rig.components(), rig.engine)
        meter.start()
        began = rig.db_now()
        deadline = time.monotonic() + seconds
        inserted = 0
        while time.monotonic() < deadline:
            if not rig.due_at_least(SATURATE_DEPTH):
                harness.insert_backlog(rig.engine, SATURATE_CHUNK, shape.tenants)
                inserted += SATURATE_CHUNK
            progress(f"saturating: {inserted:,} occurrences offered")
            time.sleep(0.005)
        meter.stop()
        ended = rig.db_now()
        steady_from = began + timedelta(seconds=2)
        done, _, _ = harness.completed(rig.engine, steady_from, ended)
        drained = rig.wait_drained(DRAIN_TIMEOUT_SECONDS)
        finished, _, _ = harness.completed(rig.engine, began, rig.db_now())
        return {"seconds": seconds, "executions_per_second": round(done / (ended - steady_from).total_seconds(), 1),
                "drained": drained, "lost_occurrences": inserted - finished,
                "cpu_percent": meter.cpu_percent(), "cluster": shape.describe()}


def max_rate(shape: ClusterShape, rates: list[float], seconds: float, progress: Progress = quiet) -> dict[str, Any]:
    """Step the offered rate up; the maximum sustainable rate is the highest step with p99 fire lag within the
    limit, a backlog that does not grow, and nothing lost. The machine is shared, so each step is judged by the
    majority of up to three runs (two that agree settle it); stops at the first step that fails."""
    steps = []
    for rate in rates:
        attempts = []
        while len(attempts) < 3:
            progress(f"max rate: {rate:,.0f}/s, run {len(attempts) + 1}")
            run = sustained(shape, rate, seconds, progress=progress)
            attempts.append({**{k: run[k] for k in ("executions_per_second", "fire_lag_ms", "backlog_growing",
                                                    "backlog_max_by_stage", "lost_occurrences", "cpu_percent",
                                                    "cost_per_execution")},
                             "sustainable": _sustainable(run)})
            verdicts = [a["sustainable"] for a in attempts]
            if len(attempts) >= 2 and verdicts.count(verdicts[0]) == len(verdicts):
                break
        verdicts = [a["sustainable"] for a in attempts]
        steps.append({"offered_per_second": rate, "sustainable": verdicts.count(True) > len(verdicts) / 2,
                      "p99_lag_ms_median": median_of([a["fire_lag_ms"]["p99"] for a in attempts]),
                      "executions_per_second_median": median_of([a["executions_per_second"] for a in attempts]),
                      "runs": attempts})
        if not steps[-1]["sustainable"]:
            break
    passed = [s["offered_per_second"] for s in steps if s["sustainable"]]
    return {"max_sustainable_per_second": max(passed, default=0.0), "lag_limit_ms": LAG_LIMIT_MS,
            "step_seconds": seconds, "steps": steps, "cluster": shape.describe()}


def _sustainable(run: dict[str, Any]) -> bool:
    p99 = run["fire_lag_ms"]["p99"]
    return (p99 is not None and p99 <= LAG_LIMIT_MS and not run["backlog_growing"] and run["drained"]
            and run["lost_occurrences"] == 0)


def batch_curve(base: ClusterShape, batches: list[int], worker_counts: list[int], backlog: int,
                progress: Progress = quiet) -> list[dict[str, Any]]:
    """Drain rate for every (claim batch, worker processes) pair -- the curve that says what batching buys."""
    points = []
    for workers in worker_counts:
        for batch in batches:
            progress(f"batch curve: {workers} worker(s), claim batch {batch}")
            shape = ClusterShape(schedulers=base.schedulers, workers=workers, concurrency=max(batch, base.concurrency),
                                 claim_batch=batch, poll_seconds=base.poll_seconds, tenants=base.tenants)
            result = drain(shape, backlog, progress)
            points.append({"workers": workers, "claim_batch": batch,
                           "executions_per_second": result["executions_per_second"],
                           "lost_occurrences": result["lost_occurrences"]})
    return points


def poll_period(base: ClusterShape, variants: list[tuple[float, float | None]], rate: float, seconds: float,
                rounds: int, progress: Progress = quiet) -> dict[str, Any]:
    """``rate`` offered with each (worker poll period, claim-ahead window) in turn, ``rounds`` times over
    (alternating, so the machine's drift hits every variant alike). At the peak nearly every poll finds work, so the
    period sets the number of claim round trips per execution, and, unless the worker claims ahead, the fire lag too
    (a due row waits up to one period). A window of None is the worker's default (two periods); 0 is the control
    without claiming ahead. This measures the trade, so that the period is chosen from it."""
    shapes = [dataclasses.replace(base, poll_seconds=period, claim_ahead_seconds=ahead) for period, ahead in variants]
    runs: list[list[dict[str, Any]]] = [[] for _ in shapes]
    for round_number in range(1, rounds + 1):
        for shape, found in zip(shapes, runs, strict=True):
            progress(f"poll period {shape.poll_seconds * 1000:g} ms, claim ahead {shape.claim_ahead * 1000:g} ms, "
                     f"round {round_number} of {rounds}")
            run = sustained(shape, rate, seconds, progress=progress)
            found.append({
                "p99_lag_ms": run["fire_lag_ms"]["p99"], "our_cpu_percent": harness.our_cpu_percent(run["cpu_percent"]),
                "cpu_percent": run["cpu_percent"], "executions_per_second": run["executions_per_second"],
                "claims_per_execution": run["cost_per_execution"]["calls"].get("d2_claim"),
                "lost_occurrences": run["lost_occurrences"], "backlog_growing": run["backlog_growing"]})
    return {"offered_per_second": rate, "seconds": seconds, "rounds": rounds, "cluster": base.describe(),
            "periods": [{"poll_seconds": shape.poll_seconds, "claim_ahead_seconds": shape.claim_ahead,
                         "median": period_medians(found),
                         "lost_occurrences": sum(r["lost_occurrences"] for r in found),
                         "runs": found} for shape, found in zip(shapes, runs, strict=True)]}


def period_medians(runs: list[dict[str, Any]]) -> dict[str, float | None]:
    """One poll period's medians over its rounds (claims per execution to three places: at 50 ms it is ~0.05)."""
    return {"p99_lag_ms": median_of([r["p99_lag_ms"] for r in runs]),
            "our_cpu_percent": median_of([r["our_cpu_percent"] for r in runs]),
            "claims_per_execution": median_of([r["claims_per_execution"] for r in runs], digits=3)}


def median_of(values: list[float | None], digits: int = 1) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), digits) if present else None
