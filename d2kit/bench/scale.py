"""Does table size slow the hot path? Claim throughput and latency with few vs millions of scheduled rows.

Follow-up 6 asks when ``SELECT ... FOR UPDATE SKIP LOCKED`` stops working. The claim reads only the partial index
``occurrences_ready`` and the materialiser only ``jobs_due``; neither should care how much is scheduled for later
or how much history has piled up. The measuring itself is the ``postgres-limits`` drill's (its ``prepare``,
``add_scheduled``, ``add_ready`` and ``measure_queries``: real d2_claim/d2_complete cycles and real materialise
passes); this module adds what only the benchmark rig can: the drain rate of a backlog through real worker
processes on the same database, and execution history on top, and the comparison small vs large.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, text

from d2kit.bench import harness, scenarios
from d2kit.bench.harness import ClusterShape, Progress, quiet
from d2kit.drills import postgres_limits as limits

CYCLES = 200  # claim/complete cycles timed per size
DRAINS = 3    # drains per size; the median is reported (the machine is shared and noisy)
# What the drill's probes leave behind (rows ready now, due jobs whose passes were rolled back) must not join the
# drains: they are cancelled / paused, legal transitions both.
PROBE_LEFTOVERS_SQL = (
    "UPDATE occurrences SET state = 'cancelled', reason = 'scale probe', finished_at = now()"
    " WHERE state = 'ready' AND ready_at <= now()",
    "UPDATE jobs SET paused = true WHERE next_fire_at <= now()",
)


def measure(shape: ClusterShape, scheduled: int, history: int, backlog: int, progress: Progress) -> dict[str, Any]:
    """On one database: ``scheduled`` future ready occurrences (the drill's model of scheduled jobs) and
    ``history`` finished executions; the drill's claim/materialise latencies, then the rig's drain rate."""
    probe: dict[str, Any] = {}

    def prepare(engine: Engine) -> None:
        limits.prepare(engine)
        progress(f"scale: loading {scheduled:,} scheduled rows")
        probe["load_seconds"] = round(limits.add_scheduled(engine, scheduled), 1)
        harness.seed_history(engine, history, shape.tenants, progress)
        limits.add_ready(engine, CYCLES * limits.BATCH)
        progress(f"scale: timing claim and materialise with {scheduled:,} scheduled rows")
        measured = limits.measure_queries(engine, CYCLES)
        probe.update(claim_ms=measured.claim_ms, materialise_pass_ms=measured.materialise_pass_ms,
                     claim_buffers=measured.claim_buffers, sizes_mb=measured.sizes_mb)
        with engine.begin() as conn:
            for statement in PROBE_LEFTOVERS_SQL:
                conn.execute(text(statement))

    with harness.rig(shape, prepare) as rig:
        drains = [scenarios.drain_on(rig, backlog, progress) for _ in range(DRAINS)]
    rates = [d["executions_per_second"] for d in drains]
    return {"scheduled_rows": scheduled, "history_executions": history + harness.HISTORY_ROWS, **probe,
            "drain_per_second": scenarios.median_of(rates), "drain_per_second_runs": rates,
            "lost_occurrences": sum(d["lost_occurrences"] for d in drains)}


def compare(shape: ClusterShape, small: int, large: int, history: int, backlog: int,
            progress: Progress = quiet) -> dict[str, Any]:
    """Small vs large: is claim throughput within 10% (the issue's goal) and latency flat?"""
    runs = [measure(shape, small, 0, backlog, progress), measure(shape, large, history, backlog, progress)]
    ratio = runs[1]["drain_per_second"] / runs[0]["drain_per_second"] if runs[0]["drain_per_second"] else None
    return {"runs": runs, "claim_batch": limits.BATCH,
            "claim_transaction_ms": runs[0]["claim_ms"]["p50"],
            "large_over_small_claim_throughput": round(ratio, 3) if ratio else None,
            "within_10_percent": ratio is not None and ratio >= 0.9,
            "method": "postgres-limits drill's measure_queries (d2_claim+d2_complete cycles, batch "
                      f"{limits.BATCH}) + a {backlog:,}-occurrence drain through 2 real worker processes"}
