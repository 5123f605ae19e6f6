"""``d2kit score --calibration``: figures per half, the held-out half optional, results recorded and shown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from d2kit.scoring import calibration
from d2kit.scoring.calibration import accuracy_line, measure_all, record, render_results_markdown, spearman

GOOD = """## 2. Scale numbers

10M jobs/day ≈ 116/s; at 50 per worker per second that is 3 workers.

## 6. Deep dive

Every attempt carries a fencing token from a database sequence, and the sink checks it and rejects older tokens.
"""
EMPTY = "## 1. Requirements\n\nA scheduler.\n"


def _half(root: Path, name: str, bands: dict[str, list[int]]) -> None:
    half = root / name
    half.mkdir(parents=True)
    for attempt, text in (("good.md", GOOD), ("empty.md", EMPTY)):
        (half / attempt).write_text(text, encoding="utf-8")
    (half / "bands.yaml").write_text(yaml.safe_dump({"attempts": {n: {"band": b} for n, b in bands.items()}}))


def test_spearman_matches_known_rankings():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9487, abs=1e-4)  # ties share a rank
    assert spearman([5, 5, 5], [1, 2, 3]) == 0.0


def test_figures_for_each_half_and_held_out_may_be_absent(tmp_path: Path):
    _half(tmp_path, "tuning", {"good.md": [0, 100], "empty.md": [90, 100]})
    figures = measure_all(tmp_path)
    assert figures["heldout"] is None
    tuning = figures["tuning"]
    assert tuning.attempts == 2 and tuning.in_band == 1  # the empty attempt is far below its (wrong) band
    assert tuning.worst_error >= 90 and tuning.mean_error <= tuning.worst_error
    assert "held-out: no attempts yet" in calibration.figures_lines(figures)


def test_a_placeholder_half_listing_no_attempts_is_reported_as_empty(tmp_path: Path):
    _half(tmp_path, "tuning", {"good.md": [0, 100]})
    (tmp_path / "heldout").mkdir()
    (tmp_path / "heldout" / "bands.yaml").write_text("half: heldout\nattempts: {}\n")
    figures = measure_all(tmp_path)
    assert figures["heldout"] is None and figures["tuning"].attempts == 1
    assert "held-out: no attempts yet" in calibration.figures_lines(figures)


def test_recording_keeps_the_history_of_retired_held_out_sets(tmp_path: Path):
    results = tmp_path / "results.json"
    retired = {"set": "held-out v1", "commit": "e03506dfd8", "recorded_at": "2026-12-01T08:42:31+00:00",
               "halves": {"heldout": {"attempts": 22, "in_band": 16, "spearman_rho": 0.906, "mean_error": 9.7,
                                      "worst_error": 48.4}}}
    results.write_text(json.dumps({"halves": {}, "history": [retired]}))
    _half(tmp_path, "tuning", {"good.md": [0, 100], "empty.md": [0, 10]})
    record(measure_all(tmp_path), results)
    saved = json.loads(results.read_text())
    assert saved["history"] == [retired] and saved["halves"]["heldout"] is None
    assert accuracy_line(results) == "held-out accuracy not yet recorded"  # never the retired set's figures
    row = "| held-out v1 | 2026-12-01 | `e03506dfd8` | 22 | 16 | 0.91 | 9.7 | 48.4 |"
    assert row in render_results_markdown(results)


def test_recorded_held_out_error_is_what_the_total_is_worth(tmp_path: Path):
    results = tmp_path / "results.json"
    assert accuracy_line(results) == "held-out accuracy not yet recorded"
    _half(tmp_path, "tuning", {"good.md": [0, 100], "empty.md": [0, 10]})
    _half(tmp_path, "heldout", {"good.md": [0, 100], "empty.md": [0, 10]})
    figures = measure_all(tmp_path)
    record(figures, results)
    saved = json.loads(results.read_text())
    assert set(saved) == {"commit", "recorded_at", "halves"} and saved["halves"]["heldout"]["attempts"] == 2
    heldout = figures["heldout"]
    assert accuracy_line(results).startswith(f"±{heldout.mean_error:g} points on attempts it was not tuned on")
    page = render_results_markdown(results)
    assert "| held-out | 2 | 2 |" in page and "| tuning |" in page


LISTED = GOOD + """
## 7. Failures

- Worker dies: the lease expires on the database clock and the reaper retries with a new token.
- Scheduler replica dies: another replica materialises the same fire time; the unique key refuses the second.
- Database fails over: workers retry, and completions wait in memory until it is back.
- A tenant floods the pool: its cap holds, others keep their share.
- A clock jumps: only the database clock is compared.
"""


def test_the_held_out_half_records_how_far_apart_five_layouts_of_it_scored(tmp_path: Path):
    for half in ("tuning", "heldout"):
        _half(tmp_path, half, {"good.md": [0, 100], "listed.md": [0, 100]})
        (tmp_path / half / "listed.md").write_text(LISTED, encoding="utf-8")
    figures = measure_all(tmp_path)
    assert figures["tuning"].layout_spread is None  # a test covers tuning; the figure is for what is never tuned on
    spread = figures["heldout"].layout_spread
    assert spread.attempts == 1 and spread.within_tolerance == 1 and spread.worst_spread <= 3  # good.md has no list
    assert "held-out, same content in 5 layouts: 1 of 1 attempts with lists within 3 points" in "\n".join(
        calibration.figures_lines(figures))
    results = tmp_path / "results.json"
    record(figures, results)
    assert json.loads(results.read_text())["halves"]["heldout"]["layout_spread"]["attempts"] == 1
    assert "The same held-out content in 5 layouts" in render_results_markdown(results)


def test_score_calibration_command_prints_both_halves(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    from d2kit.cli import app

    _half(tmp_path, "tuning", {"good.md": [0, 100], "empty.md": [0, 10]})
    monkeypatch.setattr(calibration, "CALIBRATION_DIR", tmp_path)
    monkeypatch.setattr(calibration, "RESULTS_PATH", tmp_path / "results.json")
    result = CliRunner().invoke(app, ["score", "--calibration", "--record"])
    assert result.exit_code == 0, result.output
    assert "tuning: 2 of 2 in band" in result.output and "held-out: no attempts yet" in result.output
    assert (tmp_path / "results.json").is_file()


@pytest.mark.parametrize("half", calibration.HALVES)
def test_each_half_lists_exactly_its_attempts_with_a_band_and_a_reason(half: str):
    """Structure only, whatever the half holds: the held-out half is scored once by the lead, never by the tests."""
    directory = calibration.CALIBRATION_DIR / half
    entries = yaml.safe_load((directory / "bands.yaml").read_text(encoding="utf-8")).get("attempts") or {}
    assert sorted(entries) == sorted(p.name for p in directory.glob("*.md"))
    for name, entry in entries.items():
        low, high = entry["band"]
        assert 0 <= low < high <= 100, name
        assert entry.get("reason") and entry.get("tier"), name
    if half == "tuning":
        assert len(entries) >= 30
