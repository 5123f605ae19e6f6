"""The reference design's arithmetic: every figure the design doc states, derived from designs/d2/scale.yaml.

The doc (designs/d2/reference-design.md.j2) never writes a derived number by hand; it prints fields of
:class:`Capacity`. Measured rates (``make load``) can replace the assumed ones, so the doc can show what was
assumed next to what the same arithmetic gives with the measurement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from d2kit import paths

SCALE_PATH = paths.SCALE_FILE

SECONDS_PER_DAY = 86_400
# One execution writes nine rows: the job's cursor update and the occurrence insert (materialise), the occurrence
# update and the attempt insert (claim), the attempt update and the occurrence update (complete), and the archive
# move (history insert, occurrence and attempt deletes). `make bench` measures it (pg_stat_user_tables deltas).
ROW_WRITES_PER_EXECUTION = 9


def load_scale(path: Path = SCALE_PATH) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


# --- the individual rules of thumb, each a pure function ----------------------------------------------

def per_second(per_minute: float) -> float:
    return per_minute / 60


def peak_rate(scale: Mapping[str, Any] | None = None) -> int:
    """The design's peak in whole executions/s (50,000 a minute -> 833): the rate the benchmarks offer."""
    return round(per_second((scale or load_scale())["workload"]["peak_executions_per_minute"]))


def concurrency(rate_per_second: float, mean_seconds: float) -> float:
    """Little's law: jobs in flight = arrival rate x time each spends in flight."""
    return rate_per_second * mean_seconds


def processes_for(demand: float, capacity_per_process: float, headroom: float) -> int:
    """Processes needed to carry ``demand`` with ``headroom`` to spare (e.g. 1.5 = 50% above peak)."""
    return math.ceil(demand * headroom / capacity_per_process)


def bytes_per_execution(storage: Mapping[str, float]) -> float:
    occurrence = storage["occurrence_row_bytes"] + storage["occurrence_index_bytes"]
    attempt = storage["attempt_row_bytes"] + storage["attempt_index_bytes"]
    attempts = storage["attempts_per_occurrence"] * attempt
    return occurrence + attempts


def claim_ceiling_per_second(claim_batch: int, claim_transaction_ms: float) -> float:
    """d2_claim serialises on its sub-pool's lock: one claim transaction at a time per sub-pool (a pool is one
    sub-pool unless it is split)."""
    return claim_batch * 1000 / claim_transaction_ms


def drain_seconds(backlog: float, spare_rate_per_second: float) -> float:
    return math.inf if spare_rate_per_second <= 0 else backlog / spare_rate_per_second


# --- the whole picture ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class PoolCapacity:
    name: str
    share: float
    executions_per_second: float
    mean_seconds: float
    concurrent: float
    slots_per_process: int
    processes_for_slots: int
    processes_for_dispatch: int

    @property
    def processes(self) -> int:
        return max(self.processes_for_slots, self.processes_for_dispatch)


@dataclass(frozen=True)
class CatchUp:
    missed_fires_per_job: int
    run_once_runs: int
    run_once_skipped_rows: int
    run_once_skipped_bytes: float
    run_all_runs: int
    spare_rate_per_second: float
    run_once_drain_seconds: float
    run_all_drain_seconds: float


@dataclass(frozen=True)
class Capacity:
    peak_per_minute: float
    peak_per_second: float
    average_per_second: float
    executions_per_day: float
    pools: dict[str, PoolCapacity]
    concurrent_total: float
    processes_total: int
    dispatch_per_process: float
    claim_transaction_ms: float
    # database load at peak
    claim_transactions_per_second: float
    heartbeat_transactions_per_second: float
    heartbeat_row_updates_per_second: float
    row_writes_per_execution: int
    row_writes_per_second: float
    reference_ceiling_per_second: float
    peak_share_of_reference_ceiling: float
    claim_ceiling_per_pool_per_second: float
    network_bytes_per_second: float
    # liveness
    heartbeats_per_lease: float
    worst_detection_seconds: float
    # storage
    bytes_per_execution: float
    storage_per_day_bytes: float
    storage_per_year_bytes: float
    hot_history_bytes: float
    jobs_table_bytes: float
    jobs_due_index_bytes: float
    ready_rows: float
    ready_index_bytes: float
    queue_finished_rows: float
    queue_unique_index_bytes: float
    # 10x
    growth_factor: float
    peak_per_second_at_growth: float
    short_claims_per_second_at_growth: float
    storage_per_day_at_growth_bytes: float
    catch_up: CatchUp
    # the midnight spike
    spike_jobs: float
    spike_drain_seconds: float          # at the short pool's admission rate: the last one starts this late
    spike_hashed_per_second: float      # the same jobs hashed over the spread, on top of the peak


def derive(scale: Mapping[str, Any], dispatch_per_process: float | None = None,
           claim_transaction_ms: float | None = None) -> Capacity:
    """Every derived figure. Pass measured rates to override the assumptions in ``scale``."""
    workload, lease, workers, storage = scale["workload"], scale["lease"], scale["workers"], scale["storage"]
    headroom = workers["headroom"]
    dispatch_rate = dispatch_per_process or workers["assumed_dispatch_per_process_per_second"]
    claim_ms = claim_transaction_ms or workers["assumed_claim_transaction_ms"]

    peak = per_second(workload["peak_executions_per_minute"])
    average = peak * workload["average_to_peak"]
    executions_per_day = average * SECONDS_PER_DAY

    pools = {}
    for name, pool in scale["duration"]["pools"].items():
        rate = peak * pool["share"]
        in_flight = concurrency(rate, pool["mean_seconds"])
        pools[name] = PoolCapacity(
            name=name, share=pool["share"], executions_per_second=rate, mean_seconds=pool["mean_seconds"],
            concurrent=in_flight, slots_per_process=pool["slots_per_process"],
            processes_for_slots=processes_for(in_flight, pool["slots_per_process"], headroom),
            processes_for_dispatch=processes_for(rate, dispatch_rate, headroom),
        )
    concurrent_total = sum(p.concurrent for p in pools.values())
    processes_total = sum(p.processes for p in pools.values())

    heartbeat_rows = concurrent_total / lease["heartbeat_seconds"]
    reference = scale["reference_measurements"]["lean_skip_locked_batch_10_per_second"]

    per_execution = bytes_per_execution(storage)
    per_day = executions_per_day * per_execution
    # Finished executions wait this long in the queue tables before the archiver moves them (at peak: the most).
    queue_finished_rows = peak * storage["archive_after_minutes"] * 60
    ready_rows = peak * lease["materialiser_lookahead_seconds"]

    growth = scale["growth_factor"]
    short_share = scale["duration"]["pools"]["short"]["share"]

    storm = scale["catch_up"]
    spike_jobs = workload["jobs"] * scale["spike"]["daily_at_midnight_share"]
    missed = storm["downtime_seconds"] // storm["schedule_period_seconds"]
    spare = storm["short_pool_admission_rate"] - pools["short"].executions_per_second
    run_once_runs = storm["overdue_jobs"]
    run_all_runs = storm["overdue_jobs"] * min(missed, storm["max_catchup"])
    skipped_rows = storm["overdue_jobs"] * (missed - 1)
    occurrence_bytes = storage["occurrence_row_bytes"] + storage["occurrence_index_bytes"]
    catch_up = CatchUp(
        missed_fires_per_job=missed,
        run_once_runs=run_once_runs,
        run_once_skipped_rows=skipped_rows,
        run_once_skipped_bytes=skipped_rows * occurrence_bytes,
        run_all_runs=run_all_runs,
        spare_rate_per_second=spare,
        run_once_drain_seconds=drain_seconds(run_once_runs, spare),
        run_all_drain_seconds=drain_seconds(run_all_runs, spare),
    )

    return Capacity(
        peak_per_minute=workload["peak_executions_per_minute"],
        peak_per_second=peak,
        average_per_second=average,
        executions_per_day=executions_per_day,
        pools=pools,
        concurrent_total=concurrent_total,
        processes_total=processes_total,
        dispatch_per_process=dispatch_rate,
        claim_transaction_ms=claim_ms,
        claim_transactions_per_second=peak / workers["claim_batch"],
        heartbeat_transactions_per_second=processes_total / lease["heartbeat_seconds"],
        heartbeat_row_updates_per_second=heartbeat_rows,
        row_writes_per_execution=ROW_WRITES_PER_EXECUTION,
        row_writes_per_second=peak * ROW_WRITES_PER_EXECUTION + heartbeat_rows,
        reference_ceiling_per_second=reference,
        peak_share_of_reference_ceiling=peak / reference,
        claim_ceiling_per_pool_per_second=claim_ceiling_per_second(workers["claim_batch"], claim_ms),
        network_bytes_per_second=peak * (workload["payload_bytes"] + workload["claim_overhead_bytes"]),
        heartbeats_per_lease=lease["lease_seconds"] / lease["heartbeat_seconds"],
        worst_detection_seconds=lease["lease_seconds"] + lease["reaper_period_seconds"],
        bytes_per_execution=per_execution,
        storage_per_day_bytes=per_day,
        storage_per_year_bytes=per_day * 365,
        hot_history_bytes=per_day * storage["retention_days"],
        jobs_table_bytes=workload["jobs"] * storage["job_row_bytes"],
        jobs_due_index_bytes=workload["jobs"] * storage["job_due_index_entry_bytes"],
        ready_rows=ready_rows,
        ready_index_bytes=ready_rows * storage["ready_index_entry_bytes"],
        queue_finished_rows=queue_finished_rows,
        queue_unique_index_bytes=queue_finished_rows * storage["occurrence_unique_entry_bytes"],
        growth_factor=growth,
        peak_per_second_at_growth=peak * growth,
        short_claims_per_second_at_growth=peak * growth * short_share,
        storage_per_day_at_growth_bytes=per_day * growth,
        catch_up=catch_up,
        spike_jobs=spike_jobs,
        spike_drain_seconds=drain_seconds(spike_jobs, storm["short_pool_admission_rate"]),
        spike_hashed_per_second=spike_jobs / scale["spike"]["hashed_spread_seconds"],
    )
