"""Smoke of every load/benchmark scenario: the pipeline runs end to end and nothing is lost.

Real PostgreSQL, real scheduler and worker processes, real HTTP (Locust against `d2kit api` on 127.0.0.1). Each
scenario runs for seconds, not minutes, and nothing here asserts a speed: the speed goals are judged by
`make bench` / `make load` on the full runs (load/results/latest.json, `d2kit load check`).
"""

from __future__ import annotations

import json

import pytest

from d2kit.bench import check, history, loadtest, results, scenarios, skipped, spike
from d2kit.bench.harness import ClusterShape, quiet
from d2kit.site import design_doc

pytestmark = [pytest.mark.slow, pytest.mark.shares_cpu]
SHAPE = ClusterShape(workers=1, concurrency=16)


def test_offered_load_runs_the_full_path_and_loses_nothing():
    run = scenarios.sustained(SHAPE, rate=200, seconds=6, with_series=True)
    assert run["drained"], "occurrences were left unfinished"
    assert run["lost_occurrences"] == 0
    assert run["fire_lag_ms"]["p99"] is not None  # every occurrence has an attempt with a start time
    assert run["executions_per_second"] > 0
    cost = run["cost_per_execution"]
    writes = cost["row_writes"]  # an occurrence insert, a claim and a completion at the least
    assert writes["total"] >= 5 and {"occurrences", "attempts", "jobs"} <= set(writes["per_table"])
    assert cost["wal_bytes"] > 0 and cost["index_entries_at_most"] >= writes["per_table"]["occurrences"]
    # Every execution is completed by some call, which completes one or more (idle polls are d2_claim calls too).
    assert cost["calls"]["d2_claim"] > 0 and 0 < cost["calls"]["d2_complete"] <= 1
    assert cost["database_us"]["d2_complete"] > 0
    assert {"postgres", "worker", "scheduler", "machine"} <= set(run["cpu_percent"])
    assert run["peak_rss_mb"]["worker"] > 0
    assert any(row["completed_per_s"] for row in run["series"])


def test_a_backlog_drains_completely():
    drained = scenarios.drain(SHAPE, 1_000)
    assert drained["completed"] == 1_000
    assert drained["lost_occurrences"] == 0


def test_a_held_snapshot_run_reports_its_effect():
    run = scenarios.sustained(SHAPE, rate=100, seconds=8, snapshot=scenarios.HeldSnapshot(after_seconds=3,
                                                                                          hold_seconds=2))
    assert run["lost_occurrences"] == 0
    assert run["held_snapshot"]["held_seconds"] >= 2


def test_the_archiver_moves_executions_during_a_run_and_nothing_is_lost():
    """Executions leave the queue for the history while the run goes on; the run's record is read whole."""
    run = history.at_peak(SHAPE, rate=200, seconds=8, archive_after_seconds=1)
    assert run["drained"]
    assert run["lost_occurrences"] == 0
    assert run["history_rows_at_end"] > 0


def test_retention_deletes_and_drops_the_same_day():
    kept = history.retention(2_000, tenants=2)
    assert kept["drop_day"]["partitions_dropped"] == 1
    assert kept["forget_one_shot_jobs"]["jobs"] == 2_000
    assert kept["archive"]["executions_per_second"] > 0
    assert kept["delete_row_by_row"]["wal_bytes"] > 0


def test_locust_api_scenario():
    run = loadtest.scenario("api", "locustfile.py", seconds=10, users=4, max_requests=2_000, save=False,
                            progress=quiet)
    assert run["requests_by_name"].get("POST /v1/jobs", 0) > 0
    assert run["errors"] == 0
    assert run["jobs_submitted"] > 0
    assert run["drained"]
    assert run["lost_occurrences"] == 0


def test_locust_cron_scenario():
    run = loadtest.scenario("cron", "cron_scenario.py", seconds=10, users=4, max_requests=2_000, save=False,
                            progress=quiet, cron_jobs=40)
    assert run["cron_jobs"] == 40
    assert run["errors"] == 0
    assert run["drained"]
    assert run["lost_occurrences"] == 0  # one occurrence per second per schedule, each finished


def test_results_file_round_trip_feeds_the_design_doc(tmp_path):
    path = tmp_path / "latest.json"
    results.write("bench", {"max_rate": {"max_sustainable_per_second": 4000},
                            "per_worker_process_per_second": 2500,
                            "sustained": {"fire_lag_ms": {"p99": 42.0}},
                            "scale": {"claim_transaction_ms": 2.5}}, path=path)
    results.write("load", {"api_latency_ms": {"p50": 5, "p99": 40}, "errors": 0}, path=path)
    data = json.loads(path.read_text())
    assert set(data) == {"bench", "load", "summary"}
    read = design_doc.read_load_results(path)
    assert (read.throughput_per_second, read.dispatch_per_process, read.start_delay_p99_ms,
            read.claim_transaction_ms) == (4000, 2500, 42.0, 2.5)


def test_check_compares_stated_with_measured():
    measured = {"bench": {"sustained": {"executions_per_second": 833.0, "seconds": 300, "backlog_growing": False,
                                        "fire_lag_ms": {"p99": 50.0}, "lost_occurrences": 0,
                                        "cpu_percent": {"postgres": 12.0, "worker": 8.0, "machine": 70.0}},
                          "per_worker_process_per_second": 2_500.0,
                          "max_rate": {"max_sustainable_per_second": 3_000.0}}}
    rows = {r.figure: r for r in check.rows(measured)}
    assert rows["peak executions/s (50,000/min)"].verdict == "pass"
    assert rows["CPU at peak, all our processes + PostgreSQL"].verdict == "pass"
    assert rows["maximum sustainable rate (p99 lag <= 100 ms)"].verdict == "FAIL"
    assert rows["catch-up drain rate (50,000 backlog)"].verdict == "not measured"
    per_worker = rows["dispatch rate of one worker process"].measured
    assert "833 executions/s needed; measured 2,500/s per worker process -> 1 worker processes needed" in per_worker


def test_the_spike_part_measures_both_variants_and_loses_nothing():
    run = spike.compare(SHAPE, jobs=60, spread_seconds=5)
    for variant in ("same_instant", "hashed"):
        assert run[variant]["occurrences"] == 60  # every job's fire time in the period started
        assert run[variant]["fire_lag_ms"]["p99"] is not None
    assert run["same_instant"]["distinct_fire_seconds"] == 1 < run["hashed"]["distinct_fire_seconds"]


def test_the_skipped_rows_part_writes_both_records():
    run = skipped.compare(jobs=50, missed=119)
    assert run["one_row_per_fire_time"]["rows"] == 50 * 119 and run["one_row_per_run"]["rows"] == 50
    assert run["one_row_per_fire_time"]["bytes"] > run["one_row_per_run"]["bytes"] > 0


def test_the_poll_period_part_runs_each_variant_in_alternating_rounds():
    found = scenarios.poll_period(SHAPE, [(0.005, None), (0.05, 0.0)], rate=200, seconds=3, rounds=2)
    # Each row records the window its workers ran with: two periods by default, none for the control.
    assert [(row["poll_seconds"], row["claim_ahead_seconds"]) for row in found["periods"]] == [
        (0.005, 0.01), (0.05, 0.0)]
    for row in found["periods"]:
        assert len(row["runs"]) == 2 and row["lost_occurrences"] == 0
        assert row["median"]["p99_lag_ms"] is not None and row["median"]["our_cpu_percent"] > 0
    # A longer period means fewer claims per execution: the trade the part exists to show.
    short, long_ = (row["median"]["claims_per_execution"] for row in found["periods"])
    assert long_ < short
