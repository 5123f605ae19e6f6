"""The design's arithmetic (capacity.py), its agreement with the implementation, and the rendered doc.

The last group is the guard against drift: the reference design must print exactly what capacity.py
computes, and change when scale.yaml changes.
"""

from __future__ import annotations

import copy
import math
import re

import pytest

from d2kit import capacity
from d2kit.formatting import fmt_bytes, fmt_duration, fmt_number, fmt_percent
from d2kit.site import design_doc


@pytest.fixture(scope="module")
def scale():
    return capacity.load_scale()


@pytest.fixture(scope="module")
def cap(scale):
    return capacity.derive(scale)


# --- the rules of thumb ----------------------------------------------------------------------------------

def test_per_second_and_littles_law():
    assert capacity.per_second(50_000) == pytest.approx(833.33, rel=1e-3)
    assert capacity.concurrency(829.2, 2) == pytest.approx(1658.4)


def test_the_benchmarks_offer_the_scale_files_peak_in_whole_executions():
    assert capacity.peak_rate() == 833
    assert capacity.peak_rate({"workload": {"peak_executions_per_minute": 60_000}}) == 1000


def test_processes_round_up_after_headroom():
    assert capacity.processes_for(1658.3, 32, 1.5) == 78  # 77.7 -> 78: never provision a fraction short
    assert capacity.processes_for(100, 100, 1.0) == 1


def test_bytes_per_execution_counts_rows_indexes_and_retries():
    storage = {"occurrence_row_bytes": 100, "occurrence_index_bytes": 50, "attempt_row_bytes": 200,
               "attempt_index_bytes": 50, "attempts_per_occurrence": 2}
    assert capacity.bytes_per_execution(storage) == 100 + 50 + 2 * (200 + 50)


def test_claim_ceiling_and_drain():
    assert capacity.claim_ceiling_per_second(10, 4) == 2500
    assert capacity.drain_seconds(40_000, 1000) == 40
    assert math.isinf(capacity.drain_seconds(40_000, 0))


# --- the derived picture -----------------------------------------------------------------------------------

def test_derived_figures_hang_together(scale, cap):
    assert cap.peak_per_second == pytest.approx(scale["workload"]["peak_executions_per_minute"] / 60)
    assert sum(p.executions_per_second for p in cap.pools.values()) == pytest.approx(cap.peak_per_second)
    assert cap.concurrent_total == pytest.approx(sum(p.concurrent for p in cap.pools.values()))
    assert cap.processes_total == sum(p.processes for p in cap.pools.values())
    assert cap.storage_per_year_bytes == pytest.approx(cap.storage_per_day_bytes * 365)
    retention, lease = scale["storage"]["retention_days"], scale["lease"]
    assert cap.hot_history_bytes == pytest.approx(cap.storage_per_day_bytes * retention)
    assert cap.worst_detection_seconds == lease["lease_seconds"] + lease["reaper_period_seconds"]
    assert cap.catch_up.run_once_runs == scale["catch_up"]["overdue_jobs"]
    assert cap.catch_up.run_all_runs <= scale["catch_up"]["overdue_jobs"] * scale["catch_up"]["max_catchup"]


def test_slots_not_dispatch_bind_for_short_jobs(cap):
    """The design's point in section 2: with 2-second jobs, concurrency decides the fleet size."""
    short = cap.pools["short"]
    assert short.processes_for_slots > short.processes_for_dispatch
    assert short.processes == short.processes_for_slots


def test_a_measured_rate_replaces_the_assumption(scale, cap):
    halved = capacity.derive(scale, dispatch_per_process=cap.dispatch_per_process / 2)
    assert halved.pools["short"].processes_for_dispatch >= 2 * cap.pools["short"].processes_for_dispatch - 1
    slower = capacity.derive(scale, claim_transaction_ms=cap.claim_transaction_ms * 2)
    halved_ceiling = cap.claim_ceiling_per_pool_per_second / 2
    assert slower.claim_ceiling_per_pool_per_second == pytest.approx(halved_ceiling)


def test_scale_yaml_matches_the_implementation(scale):
    """The doc states these numbers; the code runs with them. They must be the same numbers."""
    from reference_impl import jobs, lease, materializer, policies, scheduler, worker

    worker_defaults = worker.WorkerConfig(worker_id="x")
    assert scale["lease"]["lease_seconds"] == worker_defaults.lease
    assert scale["lease"]["long_pool_lease_seconds"] == worker.WorkerConfig(worker_id="x", pool="long").lease
    assert scale["lease"]["heartbeat_seconds"] == pytest.approx(worker_defaults.heartbeat_every)
    assert scale["lease"]["reap_grace_seconds"] == scheduler.SchedulerConfig("x").reap_grace_seconds
    assert scale["lease"]["worker_trust_fraction"] == pytest.approx(1 - lease.SAFETY_MARGIN_FRACTION)
    assert scale["lease"]["reaper_period_seconds"] == scheduler.SchedulerConfig("x").reap_every_seconds
    assert scale["lease"]["materialiser_lookahead_seconds"] == materializer.LOOKAHEAD.total_seconds()
    assert scale["lease"]["misfire_threshold_seconds"] == policies.MISFIRE_THRESHOLD.total_seconds()
    assert scale["workers"]["materialiser_jobs_per_pass"] == materializer.JOBS_PER_PASS
    assert scale["workers"]["max_claim_batch"] == worker_defaults.claim_batch
    assert scale["workers"]["claim_poll_seconds"] == worker_defaults.poll_seconds
    assert scale["workers"]["claim_ahead_polls"] * worker_defaults.poll_seconds == worker_defaults.claim_ahead
    assert scale["workers"]["long_pool_from_seconds"] == jobs.LONG_POOL_FROM.total_seconds()
    assert scale["workers"]["route_every_seconds"] == scheduler.SchedulerConfig("x").route_every_seconds
    assert scale["catch_up"]["max_catchup"] == policies.CatchUp().max_catchup


# --- formatting -------------------------------------------------------------------------------------------

def test_formatting():
    assert fmt_number(5082.5) == "5,083"  # half up, so a printed sum equals its printed parts
    assert fmt_number(28.8, 1) == "28.8"
    assert fmt_bytes(13_506_048_000) == "13.5 GB"
    assert fmt_bytes(4.93e12) == "4.93 TB"
    assert fmt_bytes(66_667) == "66.7 KB"
    assert fmt_duration(34.2) == "34 s"
    assert fmt_duration(60) == "1 min"
    assert fmt_duration(3416) == "57 min"
    assert fmt_duration(math.inf).startswith("never")
    assert fmt_percent(0.0524, 1) == "5.2%"


# --- the rendered design cannot drift from the arithmetic --------------------------------------------------

def _key_figures(cap) -> dict[str, str]:
    """Figures the design must print, formatted as the template formats them."""
    return {
        "peak executions/s": fmt_number(cap.peak_per_second),
        "executions/day": f"{fmt_number(cap.executions_per_day / 1e6, 1)} M",
        "concurrent": fmt_number(cap.concurrent_total),
        "short processes": str(cap.pools["short"].processes_for_slots),
        "fleet": str(cap.processes_total),
        "row writes/s": fmt_number(cap.row_writes_per_second),
        "heartbeat rows/s": fmt_number(cap.heartbeat_row_updates_per_second),
        "storage/day": fmt_bytes(cap.storage_per_day_bytes),
        "storage/year": fmt_bytes(cap.storage_per_year_bytes),
        "hot history": fmt_bytes(cap.hot_history_bytes),
        "claim ceiling": fmt_number(cap.claim_ceiling_per_pool_per_second),
        "detection": f"{cap.worst_detection_seconds:g} s",
        "catch-up drain": fmt_duration(cap.catch_up.run_once_drain_seconds),
        "10x claims": fmt_number(cap.short_claims_per_second_at_growth),
    }


@pytest.fixture
def unmeasured(tmp_path, monkeypatch):
    """Render as a fresh clone would: no load results, no drill reports (they add measured figures)."""
    monkeypatch.setattr(design_doc, "LOAD_RESULTS", tmp_path / "latest.json")
    monkeypatch.setattr(design_doc, "DRILL_REPORTS", tmp_path / "reports")


def test_rendered_design_prints_capacitys_numbers(cap, unmeasured):
    doc = design_doc.render_reference_design()
    missing = {name: value for name, value in _key_figures(cap).items() if value not in doc}
    assert not missing, f"the design does not state these computed figures: {missing}"


def test_rendered_design_follows_scale_yaml(scale, cap, unmeasured):
    """Double the peak: every throughput figure must move, and the old ones must be gone."""
    doubled = copy.deepcopy(scale)
    doubled["workload"]["peak_executions_per_minute"] *= 2
    new_cap = capacity.derive(doubled)
    doc = design_doc.render_reference_design(scale=doubled)
    for name in ("peak executions/s", "concurrent", "row writes/s", "storage/day", "10x claims"):
        new_value, old_value = _key_figures(new_cap)[name], _key_figures(cap)[name]
        assert new_value in doc, f"{name}: {new_value} missing after the change"
        assert not re.search(rf"(?<![\d,.]){re.escape(old_value)}(?![\d,])", doc), \
            f"{name}: the old figure {old_value} is still printed -- typed into the template by hand?"


def test_rendered_design_has_the_nine_sections():
    doc = design_doc.render_reference_design()
    headings = re.findall(r"^## (\d)\. ", doc, flags=re.MULTILINE)
    assert headings == [str(n) for n in range(1, 10)]
