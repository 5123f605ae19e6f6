"""Does table size slow the hot path? Claim and materialise with few vs many scheduled jobs and execution records.

Follow-up 6 asks when ``SELECT ... FOR UPDATE SKIP LOCKED`` stops working. The claim reads only the partial index
``occurrences_ready`` (rows in state 'ready') and the materialiser only the partial index ``jobs_due``; neither
should care how many jobs are scheduled for later or how much history has piled up. This module measures that:

* ``populate``          -- N jobs scheduled over the next 30 days, plus H finished executions (occurrence +
  attempt) as history, written in bulk, then VACUUM ANALYZE (the state a long-running system is in);
* ``latencies``         -- one materialise pass of 500 due jobs, and one claim (batch ``claim_batch``) + its
  completion, timed from here, repeated; medians;
* ``compare``           -- both of the above and the drain rate of a backlog, small vs large tables.

(The ``postgres-limits`` drill owns the other half of follow-up 6 -- pollers, long transactions -- and may
reuse these functions.)
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from sqlalchemy import Engine, text

from reference_impl import materializer
from reference_impl.bench import harness, scenarios
from reference_impl.bench.harness import ClusterShape, Progress, quiet

POPULATE_CHUNK = 1_000_000  # rows per statement: bounded transactions, visible progress
SCHEDULED_JOBS_SQL = text(
    "INSERT INTO jobs (tenant_id, name, handler, pool, schedule_kind, run_at, materialized_through, next_fire_at)"
    " SELECT 'bench-' || (i % :tenants), 'scheduled', 'noop', 'short', 'once', f.at, :epoch, f.at"
    " FROM generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) AS i,"
    "      LATERAL (SELECT now() + interval '1 hour' + (i % 2592000) * interval '1 second') AS f (at)")
DUE_NOW_SQL = text(
    "INSERT INTO jobs (tenant_id, name, handler, pool, schedule_kind, run_at, materialized_through, next_fire_at)"
    " SELECT 'bench-' || (i % :tenants), 'due', 'noop', 'short', 'once', now(), :epoch, now()"
    " FROM generate_series(1, CAST(:n AS integer)) AS i")
CANCEL_PROBE_SQL = text(
    "UPDATE occurrences SET state = 'cancelled', reason = 'scale probe', finished_at = now() WHERE state = 'ready'")
CLAIM_SQL = text("SELECT token FROM d2_claim('short', 'scale-probe', :n, 30)")
COMPLETE_SQL = text("SELECT * FROM d2_complete(:tokens, :ok, :errors, :started)")
SIZES_SQL = text(
    "SELECT (SELECT count(*) FROM jobs) AS jobs, (SELECT count(*) FROM occurrences) AS occurrences,"
    " pg_total_relation_size('jobs') + pg_total_relation_size('occurrences') + pg_total_relation_size('attempts')"
    " AS bytes")

def populate(engine: Engine, scheduled: int, history: int, tenants: int, progress: Progress) -> None:
    """``scheduled`` one-shot jobs due over the next 30 days, and ``history`` finished executions."""
    for first in range(0, scheduled, POPULATE_CHUNK):
        last = min(scheduled, first + POPULATE_CHUNK) - 1
        progress(f"populating: {last + 1:,} of {scheduled:,} scheduled jobs")
        with engine.begin() as conn:
            conn.execute(SCHEDULED_JOBS_SQL, {"first": first, "last": last, "tenants": tenants,
                                              "epoch": harness.EPOCH})
    harness.seed_history(engine, history, tenants, progress)


def latencies(engine: Engine, tenants: int, claim_batch: int, repeats: int = 30) -> dict[str, float]:
    """Median wall time (ms, from this client, commit included) of a 500-job materialise pass, of a claim of
    ``claim_batch`` and of completing what it claimed."""
    materialise_ms, claim_ms, complete_ms = [], [], []
    for _ in range(repeats):
        with engine.begin() as conn:
            conn.execute(DUE_NOW_SQL, {"n": materializer.JOBS_PER_PASS, "tenants": tenants, "epoch": harness.EPOCH})
        began = time.perf_counter()
        with engine.begin() as conn:
            materializer.materialise_due(conn)
        materialise_ms.append((time.perf_counter() - began) * 1000)
    for _ in range(repeats * 5):
        began = time.perf_counter()
        with engine.begin() as conn:
            tokens = list(conn.execute(CLAIM_SQL, {"n": claim_batch}).scalars())
        claimed = time.perf_counter()
        with engine.begin() as conn:
            conn.execute(COMPLETE_SQL, {"tokens": tokens, "ok": [True] * len(tokens), "errors": [None] * len(tokens),
                                        "started": [None] * len(tokens)}).all()
        claim_ms.append((claimed - began) * 1000)
        complete_ms.append((time.perf_counter() - claimed) * 1000)
    with engine.begin() as conn:  # what the probe materialised and did not claim must not join the drain
        conn.execute(CANCEL_PROBE_SQL)
    return {"materialise_500_ms": round(statistics.median(materialise_ms), 2),
            f"claim_{claim_batch}_ms": round(statistics.median(claim_ms), 2),
            f"complete_{claim_batch}_ms": round(statistics.median(complete_ms), 2)}


def measure(shape: ClusterShape, scheduled: int, history: int, backlog: int, claim_batch: int,
            progress: Progress) -> dict[str, Any]:
    """Latencies and the drain rate of ``backlog`` on a database holding ``scheduled`` jobs and ``history``."""
    probe: dict[str, Any] = {}

    def prepare(engine: Engine) -> None:
        populate(engine, scheduled, history, shape.tenants, progress)
        with engine.begin() as conn:
            probe.update(conn.execute(SIZES_SQL).mappings().one())
        progress(f"timing claim and materialise with {scheduled:,} scheduled jobs")
        probe.update(latencies(engine, shape.tenants, claim_batch))

    drained = scenarios.drain(shape, backlog, progress=progress, prepare=prepare)
    return {"scheduled_jobs": scheduled, "history_executions": history, "table_bytes": probe.pop("bytes"),
            **probe, "drain_per_second": drained["executions_per_second"],
            "lost_occurrences": drained["lost_occurrences"]}


def compare(shape: ClusterShape, small: int, large: int, history: int, backlog: int, claim_batch: int,
            progress: Progress = quiet) -> dict[str, Any]:
    """Small vs large: is claim throughput within 10% (the issue's goal) and latency flat?"""
    runs = [measure(shape, small, 0, backlog, claim_batch, progress),
            measure(shape, large, history, backlog, claim_batch, progress)]
    ratio = runs[1]["drain_per_second"] / runs[0]["drain_per_second"] if runs[0]["drain_per_second"] else None
    return {"runs": runs, "claim_batch": claim_batch,
            "claim_transaction_ms": runs[0][f"claim_{claim_batch}_ms"],
            "large_over_small_claim_throughput": round(ratio, 3) if ratio else None,
            "within_10_percent": ratio is not None and ratio >= 0.9}
