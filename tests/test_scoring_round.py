"""A practice round recorded as it happens, on an accelerated clock with saves scripted at chosen minutes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from drawing import strong
from rich.console import Console

from d2kit.scoring.phase_timeline import rows
from d2kit.scoring.practice import PracticeSession
from d2kit.scoring.process import NOT_OBSERVED, observe
from d2kit.scoring.round_grade import grade_round
from d2kit.scoring.round_record import Recorder, load_record
from d2kit.scoring.rubric import RUBRIC_DIR
from d2kit.scoring.scorer import score_text

STRONG_TEXT = (RUBRIC_DIR / "calibration" / "strong.md").read_text()
PROSE = ("The claim moves a ready occurrence to running with a lease and a fencing token that the job's writes "
         "carry and the store checks before it accepts them, so a worker cut off by a partition cannot overwrite. ")


class ScriptedClock:
    """Time moves only when the timer sleeps; each scripted save happens once its minute has come."""

    def __init__(self, script: list[tuple[float, Callable[[], None]]]) -> None:
        self.t = 0.0
        self.script = sorted(script, key=lambda step: step[0])

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds
        while self.script and self.script[0][0] * 60 <= self.t:
            self.script.pop(0)[1]()


def _write_section(attempt: Path, number: int, text: str) -> Callable[[], None]:
    def save() -> None:
        lines = attempt.read_text().splitlines(keepends=True)
        heading = next(i for i, line in enumerate(lines) if line.startswith(f"## {number}."))
        lines.insert(heading + 1, f"\n{text}\n")
        attempt.write_text("".join(lines))
    return save


def _save_drawing(path: Path, extra_box: str | None = None) -> Callable[[], None]:
    def save() -> None:
        drawing = strong()
        if extra_box:
            drawing.box(extra_box, 900, 0)
        drawing.save(path)
    return save


@pytest.fixture
def played(tmp_path: Path):
    """A 45-minute round: clarify by minute 4, draw at 12, deep-dive from 15, redraw at 26, section 9 at 43."""
    attempt, scene = tmp_path / "attempt-d2.md", tmp_path / "attempt-d2.excalidraw"
    script = [
        (2, _write_section(attempt, 2, "We assume 10M jobs and 50k executions per minute, about 830 per second.")),
        (4, _write_section(attempt, 1, "Delivery is at-least-once; jobs must be idempotent.")),
        (12, _save_drawing(scene)),
        (15, _write_section(attempt, 5, "An API, three scheduler replicas, Postgres and a worker pool.")),
        (22, _write_section(attempt, 6, PROSE * 2)),
        (26, _save_drawing(scene, extra_box="metrics")),
        (38, _write_section(attempt, 7, PROSE)),
        (43, _write_section(attempt, 9, "We rejected Kafka because the claim needs a transaction.")),
    ]
    console = Console(record=True, width=120, force_terminal=False)
    session = PracticeSession(tmp_path, 45, ScriptedClock(script), console)
    session.create_attempt(overwrite=False)
    outcome = session.run(reveal_now=False)
    return attempt, outcome, console.export_text()


def test_every_save_is_recorded_at_its_minute(played):
    attempt, outcome, _ = played
    record = load_record(attempt)
    assert record == outcome.record
    minutes = [(s.file, round(s.minute)) for s in record.saves]
    assert minutes == [("document", 2), ("document", 4), ("diagram", 12), ("document", 15), ("document", 22),
                       ("diagram", 26), ("document", 38), ("document", 43)]
    assert record.diagram_saves()[0].elements > 10
    assert record.document_saves()[-1].words["9"] > 0


def test_the_observed_process_names_the_minutes(played):
    attempt, outcome, _ = played
    observation = observe(outcome.record, attempt.read_text())
    assert round(observation.scale_numbers_minute) == 2 and round(observation.delivery_guarantee_minute) == 4
    assert observation.diagram_changed_after_deadline and round(observation.diagram_last_changed_minute) == 26
    assert round(observation.deep_dive_minute) == 22
    assert observation.section_9_before_time_up
    levels = {c.id: c.level for c in observation.checks}
    assert levels == {"clarified_first": "full", "time_budget": "none", "diagram": "partial"}
    assert observation.minutes_on_hard_sections > 0 and observation.minutes_on_plumbing > 0


def test_a_drawing_still_changing_at_minute_26_is_flagged_live_and_on_the_timeline(played):
    _, outcome, output = played
    assert "STILL DRAWING" in output and "changed at minute 26" in output
    timeline = dict(rows(observe(outcome.record).spans))
    assert timeline["diagram"][25] == "!"  # minute 25-26: drawing after the line
    assert timeline["diagram"][11] == "#" and timeline["diagram"][12] == "."  # drawn 4-12; its budget is 10-20
    assert timeline["6"][21] == "#" and timeline["6"][16] == "+"  # section 6 from 15: early, then in budget


def test_text_written_after_time_is_shown_and_not_credited(played):
    attempt, outcome, _ = played
    at_time_up = outcome.record.text_at_time_up
    attempt.write_text(STRONG_TEXT)  # the whole strong answer, typed after the timer ended
    grade = grade_round(attempt)
    assert grade.document.total == score_text(at_time_up).total < score_text(STRONG_TEXT).total
    assert sum(grade.process.words_after_time_up.values()) > 500


def test_without_a_record_part_1_is_not_observed_rather_than_guessed(tmp_path: Path):
    attempt = tmp_path / "attempt-d2.md"
    attempt.write_text(STRONG_TEXT)
    grade = grade_round(attempt)
    assert not grade.process.observed and grade.process.note == NOT_OBSERVED and grade.process.checks == []
    assert grade.diagram.problem.startswith("no drawing")


def test_a_save_caught_half_written_is_one_save_at_the_minute_it_began(tmp_path: Path):
    """An editor truncates, then writes: a poll in between must not make it two saves."""
    attempt, scene = tmp_path / "attempt-d2.md", tmp_path / "attempt-d2.excalidraw"
    attempt.write_text("# Attempt\n")
    recorder = Recorder(attempt, scene, round_minutes=45, budget_minutes=45)  # one second = one sixtieth of a minute
    scene.write_text("")                      # truncated: the poll at 60 s sees it mid-write
    assert recorder.poll(60) == []
    strong().save(scene)                      # the write completes
    assert recorder.poll(61) == []            # changed again since: still settling
    saves = recorder.poll(62)                 # unchanged since the last poll: one save, dated when it began
    assert [(s.file, round(s.minute)) for s in saves] == [("diagram", 1)] and saves[0].elements > 10
    assert recorder.poll(63) == []
    attempt.write_text("# Attempt\n\nAt-least-once.\n")
    assert recorder.poll(120) == []
    record = recorder.end(121, finished=True)  # the round's end takes a pending change as it is
    assert [(s.file, round(s.minute)) for s in record.saves] == [("diagram", 1), ("document", 2)]
