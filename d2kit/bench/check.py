"""``d2kit load check``: every number the design states, next to what was measured, with pass/fail.

The stated numbers come from the scale file the docs render (designs/d2/scale.yaml through capacity.derive);
the measured ones from load/results/latest.json. A row whose measurement is missing says so rather than passing;
a row measured on code that has changed since says it is stale (results.staleness), whatever its verdict.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, replace
from typing import Any

from d2kit import capacity
from d2kit.bench import results as result_files
from d2kit.bench.harness import our_cpu_percent

# The goals of issue 18: ten times the design's peak on one machine, a quarter of it at peak, and 1.5x the
# simplest peer's throughput with its fire lag no worse.
LAG_GOAL_MS = 100.0
CPU_GOAL_PERCENT = 25.0
MAX_RATE_OVER_PEAK = 10
# Ten times the rate the bench offers as the peak (833/s, the design's 50,000/min rounded down), as the issue states it
# (>= 8,330/s): the maximum-rate search's last step is exactly this, so a run that sustains it meets the goal.
MAX_RATE_GOAL = MAX_RATE_OVER_PEAK * capacity.peak_rate()
PEER_THROUGHPUT_GOAL = 1.5  # ours / theirs, sustained and drain; lag (theirs / ours) must be >= 1.0
SNAPSHOT_RECOVERY_GOAL_SECONDS = 120.0
SCALE_GOAL_RATIO = 0.9
# A benchmark runs alone: other processes may use this much of the machine during a part (the kernel and idle
# daemons take a percent or two) before the part's figures are not the system's own.
ALONE_OTHER_CPU_PERCENT = 10.0


@dataclass(frozen=True)
class Row:
    figure: str
    stated: str
    measured: str
    verdict: str  # 'pass' | 'FAIL' | 'not measured'
    source: str   # where in latest.json: 'bench.<part>...' and/or 'load', joined by ' + '
    stale: str = ""  # why the measurement no longer describes the code; '' while it does


def _get(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else ("pass" if ok else "FAIL")


def rows(results: dict[str, Any], scale: dict[str, Any] | None = None) -> list[Row]:
    scale = scale or capacity.load_scale()
    stated = capacity.derive(scale)
    peak = stated.peak_per_second
    bench, load = results.get("bench") or {}, results.get("load") or {}
    out: list[Row] = []

    sustained = bench.get("sustained") or {}
    rate = sustained.get("executions_per_second")
    ok = None if rate is None else rate >= 0.99 * peak and not sustained.get("backlog_growing", True)
    out.append(Row("peak executions/s (50,000/min)", f"{peak:,.0f}/s needed",
                   "not measured" if rate is None else
                   f"{rate:,.0f}/s for {sustained.get('seconds', 0):,.0f}s, backlog "
                   f"{'growing' if sustained.get('backlog_growing') else 'flat'}", _verdict(ok), "bench.sustained"))

    per_worker = bench.get("per_worker_process_per_second")
    design_k = stated.pools["short"].processes_for_dispatch
    if per_worker:
        needed = capacity.processes_for(stated.pools["short"].executions_per_second, per_worker,
                                        scale["workers"]["headroom"])
        measured = (f"{peak:,.0f} executions/s needed; measured {per_worker:,.0f}/s per worker process -> "
                    f"{needed} worker processes needed (design says {design_k})")
        ok = needed <= design_k
    else:
        measured, ok = "not measured", None
    out.append(Row("dispatch rate of one worker process",
                   f"{stated.dispatch_per_process:,.0f}/s assumed -> {design_k} short-pool processes", measured,
                   _verdict(ok), "bench.batch_curve (1 worker)"))

    p99 = _get(sustained, "fire_lag_ms", "p99")
    slo_ms = scale["workload"]["fire_to_start_slo_seconds"] * 1000
    out.append(Row("fire time -> handler start, p99, at peak", f"{slo_ms:,.0f} ms SLO; {LAG_GOAL_MS:.0f} ms goal",
                   "not measured" if p99 is None else f"{p99:,.1f} ms",
                   _verdict(None if p99 is None else p99 <= LAG_GOAL_MS), "bench.sustained"))

    cpu = _get(sustained, "cpu_percent")
    ours = our_cpu_percent(cpu)
    out.append(Row("CPU at peak, all our processes + PostgreSQL", f"<= {CPU_GOAL_PERCENT:.0f}% of the machine",
                   "not measured" if ours is None else f"{ours}% (machine incl. other users: {cpu.get('machine')}%)",
                   _verdict(None if ours is None else ours <= CPU_GOAL_PERCENT), "bench.sustained"))

    lost = [v for v in (sustained.get("lost_occurrences"), _get(bench, "drain", "lost_occurrences"),
                        load.get("lost_occurrences")) if v is not None]
    out.append(Row("occurrences lost", "0", "not measured" if not lost else str(sum(lost)),
                   _verdict(None if not lost else sum(lost) == 0), "bench.sustained + bench.drain + load"))

    claim_ms = _get(bench, "scale", "claim_transaction_ms")
    batch = _get(bench, "scale", "claim_batch") or scale["workers"]["claim_batch"]
    out.append(Row(f"d2_claim transaction (batch {batch})",
                   f"{stated.claim_transaction_ms:g} ms assumed -> ceiling "
                   f"{stated.claim_ceiling_per_pool_per_second:,.0f}/s per pool",
                   "not measured" if claim_ms is None else
                   f"{claim_ms:.2f} ms -> ceiling {capacity.claim_ceiling_per_second(batch, claim_ms):,.0f}/s",
                   _verdict(None if claim_ms is None else claim_ms <= stated.claim_transaction_ms), "bench.scale"))

    max_rate = _get(bench, "max_rate", "max_sustainable_per_second")
    reference = stated.reference_ceiling_per_second
    out.append(Row("maximum sustainable rate (p99 lag <= 100 ms)",
                   f">= {MAX_RATE_GOAL:,.0f}/s goal, {MAX_RATE_OVER_PEAK}x peak (lean SKIP LOCKED reference: "
                   f"{reference:,.0f}/s)", "not measured" if max_rate is None else f"{max_rate:,.0f}/s",
                   _verdict(None if max_rate is None else max_rate >= MAX_RATE_GOAL), "bench.max_rate"))

    drain = _get(bench, "drain", "executions_per_second")
    admission = scale["catch_up"]["short_pool_admission_rate"]
    out.append(Row("catch-up drain rate (50,000 backlog)", f"admission rate {admission:,}/s must be reachable",
                   "not measured" if drain is None else f"{drain:,.0f}/s",
                   _verdict(None if drain is None else drain >= admission), "bench.drain"))

    held = bench.get("held_snapshot") or {}
    recovered = _get(held, "held_snapshot", "recovered_seconds_after_release")
    held_p99 = _get(held, "held_snapshot", "fire_lag_ms_while_held", "p99")
    # "The peak is kept" = while the snapshot is held, fire lag stays within the design's own latency SLO.
    out.append(Row("held REPEATABLE READ snapshot at peak",
                   f"p99 lag within the {slo_ms:,.0f} ms SLO while held; lag back under {LAG_GOAL_MS:.0f} ms "
                   f"<= {SNAPSHOT_RECOVERY_GOAL_SECONDS:.0f}s after release",
                   "not measured" if not held else
                   f"p99 lag while held {held_p99:,.0f} ms (backlog up to {held.get('backlog_max', 0):,}); "
                   f"recovered {recovered}s after release",
                   _verdict(None if not held else held_p99 is not None and held_p99 <= slo_ms
                            and recovered is not None and recovered <= SNAPSHOT_RECOVERY_GOAL_SECONDS),
                   "bench.held_snapshot"))

    ratio = _get(bench, "scale", "large_over_small_claim_throughput")
    large = _get(bench, "scale", "runs")
    label = f"{large[-1].get('scheduled_rows', 0):,} scheduled rows" if large else "10M scheduled rows"
    out.append(Row(f"claim throughput with {label} vs few", "within 10%",
                   "not measured" if ratio is None else f"{ratio:.2f}x",
                   _verdict(None if ratio is None else ratio >= SCALE_GOAL_RATIO), "bench.scale"))

    out.extend(_history_rows(bench.get("history") or {}, peak))

    peers = _get(bench, "peers", "ratio_ours_over_theirs") or {}
    for name, ratios in sorted(peers.items()):
        values = {k: v for k, v in ratios.items() if v is not None}
        goals = {k: 1.0 if k.startswith("p99_lag") else PEER_THROUGHPUT_GOAL for k in values}
        out.append(Row(f"ours / {name} (sustained, drain, lag)",
                       f">= {PEER_THROUGHPUT_GOAL:g}x sustained and drain, lag no worse (>= 1.0x)",
                       ", ".join(f"{k} {v:.2f}x" for k, v in values.items()) or "not measured",
                       _verdict(None if not values else all(v >= goals[k] for k, v in values.items())),
                       "bench.peers"))

    api_p99 = _get(load, "api_latency_ms", "p99")
    out.append(Row("HTTP API latency p99 under load (make load)", "measured, no stated figure",
                   "not measured" if api_p99 is None else f"{api_p99:,.0f} ms, errors {load.get('errors', 0)}",
                   _verdict(None if api_p99 is None else load.get("errors", 0) == 0), "load"))
    out.append(_alone_row(bench.get("parts") or {}))
    code_now = result_files.code_digest()
    return [_with_staleness(row, results, code_now) for row in out]


def _alone_row(parts: dict[str, Any]) -> Row:
    """Other processes' share of the machine during each benchmark part (machine_load.py)."""
    # A part that yields several figures (batch_curve) stamps each with the part's name and the same load.
    during = {stamp.get("part", figure): _get(stamp, "machine_load", "during", "other_processes_percent")
              for figure, stamp in sorted(parts.items())}
    recorded = {part: share for part, share in during.items() if share is not None}
    unrecorded = sorted(set(during) - set(recorded))
    measured = ", ".join(f"{part} {share:g}%" for part, share in recorded.items()) or "not measured"
    if recorded and unrecorded:
        measured += f"; not recorded for {', '.join(unrecorded)}"
    return Row("benchmark alone on the machine: other processes' CPU during each part",
               f"<= {ALONE_OTHER_CPU_PERCENT:g}% of the machine", measured,
               _verdict(None if not recorded or unrecorded else
                        all(share <= ALONE_OTHER_CPU_PERCENT for share in recorded.values())),
               " + ".join(f"bench.{part}" for part in during) or "bench")


def _with_staleness(row: Row, results: dict[str, Any], code_now: str | None) -> Row:
    """The row marked stale when any measurement it reads was taken on code that has changed since."""
    if row.verdict == "not measured":
        return row
    bench, parts = results.get("bench") or {}, (results.get("bench") or {}).get("parts") or {}
    stamps = []
    for source in re.findall(r"\b(?:bench\.(\w+)|(load))\b", row.source):
        figure, load = source
        if load and results.get("load"):
            stamps.append(results["load"])
        elif figure in bench:  # older files stamp only the bench section as a whole
            stamps.append(parts.get(figure) or bench)
    reasons = sorted({reason for stamp in stamps for reason in [result_files.staleness(stamp, code_now)] if reason})
    return replace(row, stale="; ".join(reasons)) if reasons else row


def exit_status(table: list[Row], strict: bool = False) -> int:
    """1 when a stated goal fails or a result is stale (or, with ``strict``, was not measured); else 0."""
    bad = [r for r in table if r.verdict == "FAIL" or r.stale or (strict and r.verdict == "not measured")]
    return 1 if bad else 0


def _history_rows(history: dict[str, Any], peak: float) -> list[Row]:
    """The record grows without slowing the hot path: the peak goals met while the archiver moves every execution
    out of the queue, and a day of history dropped rather than deleted row by row."""
    run = history.get("at_peak") or {}
    p99, ours = _get(run, "fire_lag_ms", "p99"), our_cpu_percent(run.get("cpu_percent"))
    after = run.get("archive_after_seconds")
    ok = None if p99 is None or ours is None or after is None else (
        run.get("executions_per_second", 0) >= 0.99 * peak and not run.get("backlog_growing", True)
        and p99 <= LAG_GOAL_MS and ours <= CPU_GOAL_PERCENT and run.get("lost_occurrences") == 0
        and run.get("queue_rows_at_end", math.inf) <= peak * (after + 30))
    rows = [Row(f"peak with every execution archived {after:g}s after it ends" if after is not None else
                "peak with the archiver moving every execution",
                f"as at peak: p99 <= {LAG_GOAL_MS:.0f} ms, CPU <= {CPU_GOAL_PERCENT:.0f}%; the queue holds only "
                "the last seconds", "not measured" if ok is None else
                f"{run['executions_per_second']:,.0f}/s, p99 {p99:,.1f} ms, CPU {ours}%; at the end "
                f"{run['queue_rows_at_end']:,} rows in the queue, {run['history_rows_at_end']:,} in the history",
                _verdict(ok), "bench.history.at_peak")]
    kept = history.get("retention") or {}
    drop, delete = kept.get("drop_day") or {}, kept.get("delete_row_by_row") or {}
    ok = None if not drop or not delete else (
        drop["seconds"] < delete["seconds"] and drop["wal_bytes"] < delete["wal_bytes"])
    forget = kept.get("forget_one_shot_jobs") or {}
    rows.append(Row(f"retention of one day ({kept['executions']:,} executions)" if kept else "retention of one day",
                    "drop the day's partition: cheaper than deleting its rows",
                    "not measured" if ok is None else
                    f"DROP {drop['seconds']:.2f}s, {drop['wal_bytes'] / 2**20:,.1f} MiB WAL; row-by-row DELETE "
                    f"{delete['seconds']:.1f}s, {delete['wal_bytes'] / 2**20:,.1f} MiB WAL; archiver "
                    f"{_get(kept, 'archive', 'executions_per_second') or 0:,.0f} executions/s; forgetting the day's "
                    f"{forget.get('jobs', 0):,} one-shot jobs, in both designs: {forget.get('seconds', 0):.1f}s",
                    _verdict(ok), "bench.history.retention"))
    return rows


def as_dicts(table: list[Row]) -> list[dict[str, str]]:
    return [asdict(r) for r in table]
