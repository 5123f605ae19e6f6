"""`d2kit load check` is honest about its results: stale ones are marked, failures and stale rows exit non-zero,
and each benchmark part records how loaded the machine was (the bench's own processes told apart from others)."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from d2kit.bench import check, machine_load, results
from d2kit.cli import app

PASSING_SUSTAINED = {"executions_per_second": 833.0, "seconds": 300, "backlog_growing": False,
                     "fire_lag_ms": {"p99": 50.0}, "lost_occurrences": 0, "cpu_percent": {"postgres": 20.0}}


def _bench(digest: str | None, other_percent: float = 1.0) -> dict:
    load = {"before": {"load_average_1m": 0.1, "cores": 2, "machine_busy_percent": 2.0,
                       "other_processes_percent": 1.0},
            "during": {"seconds": 300, "machine_busy_percent": 40.0, "bench_percent": 40.0 - other_percent,
                       "other_processes_percent": other_percent, "postgres_counted": True}}
    stamp = {"measured_at": "2026-12-01T00:00:00+00:00", "code": "abc1234", "code_digest": digest, "part": "sustained",
             "machine_load": load}
    return {"bench": {"sustained": PASSING_SUSTAINED, "parts": {"sustained": stamp}}}


def _row(table: list[check.Row], figure: str) -> check.Row:
    return next(r for r in table if r.figure.startswith(figure))


def test_a_result_is_stale_once_the_code_it_measured_has_changed():
    assert results.staleness({"code": "abc1234", "code_digest": "d1"}, "d1") is None
    assert results.staleness({"code": "abc1234", "code_digest": "d1"}, "d2") == "reference_impl/ changed since abc1234"
    # Older results carry only a commit: the commit's code is compared, and uncommitted changes cannot be.
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert results.staleness({"code": head}, results._committed_digest(head)) is None
    assert results.staleness({"code": head}, "something else") == f"reference_impl/ changed since {head}"
    assert "not known" in results.staleness({"code": f"{head}+changes"}, results.code_digest())


def test_check_marks_stale_rows_and_exits_non_zero_for_them():
    fresh = check.rows(_bench(results.code_digest()))
    stale = check.rows(_bench("0" * 16))
    assert not _row(fresh, "peak executions/s").stale
    assert _row(stale, "peak executions/s").stale == "reference_impl/ changed since abc1234"
    assert _row(stale, "peak executions/s").verdict == "pass"  # the verdict stays what was measured
    assert not _row(stale, "maximum sustainable rate").stale  # not measured: nothing to be stale
    passing = [r for r in fresh if r.verdict == "pass"]
    assert passing and check.exit_status(passing) == 0
    assert check.exit_status([*passing, _row(stale, "peak executions/s")]) == 1


def test_check_exits_non_zero_when_a_goal_fails_and_strict_adds_unmeasured():
    table = check.rows(_bench(results.code_digest()))
    passing = [r for r in table if r.verdict == "pass"]
    assert check.exit_status(passing) == 0
    assert check.exit_status([*passing, _row(table, "maximum sustainable rate")]) == 0  # not measured
    assert check.exit_status([*passing, _row(table, "maximum sustainable rate")], strict=True) == 1
    busy = check.rows(_bench(results.code_digest(), other_percent=30.0))
    alone = _row(busy, "benchmark alone")
    assert (alone.verdict, alone.measured) == ("FAIL", "sustained 30%")
    assert check.exit_status([*passing, alone]) == 1


def test_the_cli_exit_status_follows_the_check(monkeypatch):
    monkeypatch.setattr(results, "latest", lambda: _bench(results.code_digest(), other_percent=30.0))
    failing = CliRunner().invoke(app, ["load", "check", "--json"])
    assert failing.exit_code == 1, failing.output
    assert '"verdict": "FAIL"' in failing.output


def test_the_bench_share_counts_processes_it_started_that_have_exited():
    watch = machine_load.Watch(postgres_pid=None)
    before = watch.ours()
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    subprocess.run([sys.executable, "-c", burn], check=True)
    assert watch.ours() - before >= 0.3
    during = watch.during()
    assert during["bench_percent"] > 0 and not during["postgres_counted"]
    assert during["machine_busy_percent"] >= during["other_processes_percent"]


def test_every_part_is_recorded_with_the_load_before_and_during(monkeypatch):
    monkeypatch.setattr(machine_load, "BEFORE_SAMPLE_SECONDS", 0.1)
    parts = iter([("one", {"one": 1}), ("two", {"two": 2, "derived": 3})])
    seen = list(machine_load.watched(parts))
    assert [(part, figures) for part, figures, _ in seen] == [("one", {"one": 1}), ("two", {"two": 2, "derived": 3})]
    for _, _, load in seen:
        assert load["before"]["cores"] >= 1 and load["before"]["load_average_1m"] >= 0
        assert load["during"]["postgres_counted"]  # the embedded server runs on this machine
        assert 0 <= load["during"]["other_processes_percent"] <= load["during"]["machine_busy_percent"]


def test_the_full_maximum_rate_steps_reach_the_goal_the_check_judges():
    """A maximum-rate search whose last step is below the goal could never show the goal met: the check must pass
    a run that sustained the last step (it compared 8,330 with 8,333.3, ten times the unrounded peak, and failed)."""
    from d2kit.bench import cli as bench_cli

    bench = _bench(results.code_digest())
    bench["bench"]["max_rate"] = {"max_sustainable_per_second": max(bench_cli.FULL.rates)}
    assert _row(check.rows(bench), "maximum sustainable rate").verdict == "pass"
    assert list(bench_cli.FULL.rates) == sorted(bench_cli.FULL.rates)   # stepped up: the search stops at a failure
