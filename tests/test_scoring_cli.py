"""``d2kit score``, ``history`` and ``--self`` through the command line, with history in a temporary home."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer
from drawing import strong
from typer.testing import CliRunner

from d2kit.scoring.cli import register
from d2kit.scoring.round_record import RoundRecord, diagram_save, document_save, record_path
from d2kit.scoring.rubric import RUBRIC_DIR
from d2kit.scoring.scorer import score_file

STRONG = RUBRIC_DIR / "calibration" / "strong.md"
runner = CliRunner()


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> typer.Typer:
    monkeypatch.setenv("D2KIT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "160")
    app = typer.Typer()
    register(app)
    return app


def _history(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "home" / "history.jsonl").read_text().splitlines()]


def test_main_app_has_the_rubric_commands():
    from d2kit.cli import app as main_app

    for command in ("score", "practice", "history"):
        result = runner.invoke(main_app, [command, "--help"])
        assert result.exit_code == 0, result.output


def test_score_json_has_evidence_for_every_point(app: typer.Typer, tmp_path: Path):
    result = runner.invoke(app, ["score", str(STRONG), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert 80 <= report["total"] <= 94 and report["max_total"] == 100
    assert "first pass" in report["notice"] and "authority" in report["notice"]
    for criterion in report["criteria"]:
        for check in criterion["checks"]:
            assert check["points"] == 0 or check["evidence"], check["id"]
            assert check["points"] == check["max_points"] or check["missing"], check["id"]
    assert [f["number"] for f in report["follow_ups"]] == list(range(1, 8))
    assert _history(tmp_path)[0]["mode"] == "score"


def test_score_markdown_and_rich(app: typer.Typer):
    markdown = runner.invoke(app, ["score", str(STRONG), "--md", "--no-record"])
    assert markdown.exit_code == 0 and markdown.output.startswith("# Score:")
    assert "## Hidden follow-ups" in markdown.output and "L57:" in markdown.output
    table = runner.invoke(app, ["score", str(STRONG), "--no-record"])
    assert table.exit_code == 0
    total = f"Total: {score_file(STRONG).total:g} / 100"
    assert "First pass, not the verdict" in table.output and total in table.output


def test_score_grades_the_scene_beside_the_document_and_refuses_an_image_as_the_drawing(app: typer.Typer,
                                                                                      tmp_path: Path):
    attempt = tmp_path / "attempt-d2.md"
    attempt.write_text(STRONG.read_text())
    strong().save(tmp_path / "attempt-d2.excalidraw")  # found next to the attempt, no --diagram needed
    result = runner.invoke(app, ["score", str(attempt), "--json", "--no-record"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    # the diagram is beside the 100, not in it: the total is the document's alone
    assert report["total"] == score_file(STRONG).total and report["max_total"] == 100
    assert report["diagram"]["points"] == 20 and report["diagram"]["export"]["ok"] is False  # no PNG handed in
    assert report["process"]["observed"] is False
    image = tmp_path / "attempt-d2.png"
    image.write_bytes(b"\x89PNG")
    refused = runner.invoke(app, ["score", str(attempt), "--diagram", str(image), "--no-record"])
    # The usage error is a rich panel, wrapped to the terminal width (tmp_path's length varies): read its words.
    said = " ".join(re.sub("[│╭╮╰╯─]", " ", refused.output).split())
    assert refused.exit_code != 0 and "graded from its Excalidraw scene" in said
    assert "Traceback" not in refused.output
    table = runner.invoke(app, ["score", str(attempt), "--no-record"])
    assert "Diagram (Part 3) — 20 / 20" in table.output and "Process (Part 1): not observed" in table.output


def test_self_score_records_both_and_compares(app: typer.Typer, tmp_path: Path):
    answers = "31\n30\n20\n18\n10\n8\n9\n"  # 31 is out of range and asked again
    result = runner.invoke(app, ["score", "--self", str(STRONG)], input=answers)
    assert result.exit_code == 0, result.output
    assert "Between 0 and 30" in result.output and "You vs the tool" in result.output
    assert "answer key" in result.output
    entry = _history(tmp_path)[0]
    assert entry["mode"] == "self"
    assert entry["self_scores"] == {"hard_parts": 30, "failure_legs": 20, "arithmetic": 18,
                                    "rejected_alternatives": 10, "altitude": 8}
    assert entry["total"] == score_file(STRONG).total  # the history keeps the score it showed


def test_self_score_is_interactive_only(app: typer.Typer):
    result = runner.invoke(app, ["score", "--self", "--json", str(STRONG)])
    assert result.exit_code != 0


def test_history_lists_attempts_and_plots_progress(app: typer.Typer, tmp_path: Path):
    assert "No scored attempts yet" in runner.invoke(app, ["history"]).output
    weak = RUBRIC_DIR / "calibration" / "weak-it-retries.md"
    for attempt in (weak, STRONG):
        assert runner.invoke(app, ["score", str(attempt), "--json"]).exit_code == 0
    plot = tmp_path / "progress.png"
    result = runner.invoke(app, ["history", "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    scored = [score_file(weak), score_file(STRONG)]
    assert "weak-it-retries.md" in result.output and f"{scored[1].total:g}" in result.output
    assert plot.read_bytes().startswith(b"\x89PNG")
    listed = json.loads(runner.invoke(app, ["history", "--json"]).output)
    assert [r["total"] for r in listed] == [r.total for r in scored]
    assert scored[0].total < scored[1].total
    assert listed[1]["follow_ups_pre_empted"] == [k.follow_up for k in scored[1].follow_ups() if k.level == "full"]
    assert [r["diagram_points"] for r in listed] == [0, 0]  # no drawing next to either attempt
    assert [r["process_observed"] for r in listed] == [False, False]


def test_history_draws_each_practised_rounds_timeline(app: typer.Typer, tmp_path: Path):
    attempt = tmp_path / "attempt-d2.md"
    attempt.write_text(STRONG.read_text())
    strong().save(tmp_path / "attempt-d2.excalidraw")
    record = RoundRecord(budget_minutes=45, round_minutes=45, ended_minute=45, finished=True,
                         text_at_time_up=attempt.read_text(),
                         saves=[document_save(attempt.read_text(), 8), diagram_save(tmp_path / "attempt-d2.excalidraw",
                                                                                    30)])
    record_path(attempt).write_text(record.to_json())
    assert runner.invoke(app, ["score", str(attempt), "--json"]).exit_code == 0
    shown = runner.invoke(app, ["history"])
    assert shown.exit_code == 0, shown.output
    assert "phase timeline" in shown.output and "diagram" in shown.output and "20/20" in shown.output
    entry = json.loads(runner.invoke(app, ["history", "--json"]).output)[0]
    assert entry["process_observed"] and entry["process_checks"]["diagram"] == "partial"  # drawn at minute 30
    assert entry["spans"][-1] == {"row": "diagram", "start": 8, "end": 30}


def test_a_broken_round_record_is_named_not_a_traceback(app: typer.Typer, tmp_path: Path):
    attempt = tmp_path / "attempt-d2.md"
    attempt.write_text(STRONG.read_text())
    record_path(attempt).write_text("{not json")
    result = runner.invoke(app, ["score", str(attempt), "--no-record"])
    assert result.exit_code != 0 and "not a round record the kit wrote" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_scoring_loads_without_the_scheduler_the_drills_or_the_benchmarks():
    """`d2kit score` imports what scores; the rest of the kit's commands load when asked for."""
    import subprocess
    import sys

    loaded = subprocess.run([sys.executable, "-c", "import sys, d2kit.cli; print(sorted(m for m in ("
                             "'sqlalchemy', 'd2kit.drills.cli', 'd2kit.bench.cli', 'reference_impl.cli') "
                             "if m in sys.modules))"], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]", loaded


def test_every_command_is_still_listed_and_runs_its_help():
    from d2kit.cli import app as main_app

    listing = runner.invoke(main_app, ["--help"], env={"COLUMNS": "200"})
    assert listing.exit_code == 0, listing.output
    for command in ("score", "practice", "history", "cheatsheet", "db", "submit", "up", "api", "drill", "bench",
                    "load", "diagram"):
        assert f" {command} " in listing.output, command
        assert runner.invoke(main_app, [command, "--help"]).exit_code == 0, command
    assert runner.invoke(main_app, ["bench", "score", "--help"]).exit_code == 0


def test_the_score_speed_section_is_rendered_from_its_results_file(tmp_path: Path):
    from d2kit.bench import score_speed

    path = tmp_path / "score-speed.json"
    assert "Not yet measured" in score_speed.render_markdown(path)
    score_speed.save({"timed": "d2kit score <attempt> --no-record", "runs": 4, "attempts": {"a.md": 1490},
                      "seconds": {"min": 1.61, "median": 1.73, "max": 2.05}, "goal_seconds": 2.0,
                      "measured_at": "2026-12-01T21:00:00+00:00", "code": "abc1234", "command": "d2kit bench score",
                      "machine": {"cores": 2, "cpu_model": "test CPU"}}, path)
    shown = score_speed.render_markdown(path)
    assert "median **1.73 s**" in shown and "max 2.05 s" in shown and "under the 2 s goal" in shown
    assert all(1_300 <= len(p.read_text(encoding="utf-8").split()) <= 1_700 for p in score_speed.attempts_near())
