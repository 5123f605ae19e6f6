"""Practice mode on an accelerated clock: phases, the minute-25 check, and a reveal that waits for the end."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from drawing import strong
from rich.console import Console

from d2kit.scoring.practice import PracticeSession, run_timer, timeline
from d2kit.scoring.rubric import load_design_rubric, load_process_rubric

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")
FOLLOW_UP_TEXT = "A worker picks up a job"


class FakeClock:
    """Time moves only when the timer sleeps: a 45-minute round runs instantly."""

    def __init__(self) -> None:
        self.t = 1000.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def test_timeline_follows_the_seed_budget_and_scales():
    process = load_process_rubric()
    full = timeline(process, 45)
    assert [(e.kind, e.at / 60) for e in full] == [
        ("phase", 0), ("phase", 5), ("phase", 10), ("phase", 20), ("deadline", 25), ("phase", 35), ("time_up", 45)]
    one_minute = timeline(process, 1)
    assert [e.at for e in one_minute] == pytest.approx([e.at / 45 for e in full])


def test_timer_fires_each_event_once_at_its_time():
    fired: list[tuple[str, float]] = []
    elapsed = run_timer(timeline(load_process_rubric(), 45), FakeClock(),
                        lambda event, at: fired.append((event.kind, at)), lambda at: None)
    assert [kind for kind, _ in fired] == ["phase"] * 4 + ["deadline", "phase", "time_up"]
    assert all(at == pytest.approx(expected * 60) for (_, at), expected in zip(fired, [0, 5, 10, 20, 25, 35, 45],
                                                                               strict=True))
    assert elapsed == pytest.approx(45 * 60)


def _session(tmp_path: Path) -> tuple[PracticeSession, Console]:
    console = Console(record=True, width=120, force_terminal=False)
    session = PracticeSession(tmp_path, 45, FakeClock(), console)
    session.create_attempt(overwrite=False)
    return session, console


def test_minute_25_is_loud_when_the_deep_dive_is_empty(tmp_path: Path):
    session, console = _session(tmp_path)
    session.run(reveal_now=False)
    assert "STILL DRAWING BOXES?" in console.export_text()


def test_minute_25_is_quiet_when_the_deep_dive_has_begun(tmp_path: Path):
    session, console = _session(tmp_path)
    text = session.attempt.read_text()
    session.attempt.write_text(text.replace("## 7.", "The claim moves a ready occurrence to running with a lease and "
                                                    "a fencing token that the job's writes carry and the store "
                                                    "checks before it accepts them.\n\n## 7."))
    session.run(reveal_now=False)
    output = console.export_text()
    assert "STILL DRAWING BOXES?" not in output and "deep dive is under way" in output


def test_follow_ups_come_after_time_is_up_unless_asked_for(tmp_path: Path):
    session, console = _session(tmp_path)
    session.run(reveal_now=False)
    output = console.export_text()
    assert output.index("TIME IS UP") < output.index(FOLLOW_UP_TEXT)
    early, early_console = _session(tmp_path / "early")
    early.run(reveal_now=True)
    output = early_console.export_text()
    assert output.index(FOLLOW_UP_TEXT) < output.index("TIME IS UP")


def test_an_existing_attempt_is_not_overwritten(tmp_path: Path):
    session, _ = _session(tmp_path)
    session.attempt.write_text("my work")
    with pytest.raises(FileExistsError):
        session.create_attempt(overwrite=False)
    assert session.attempt.read_text() == "my work"


def _run_under_pty(args: list[str], env: dict[str, str], limit_seconds: float = 60,
                   on_output: Callable[[str], None] = lambda text: None) -> str:
    """Run a command with a terminal as stdin/stdout/stderr; return everything it wrote.

    ``on_output`` sees the output so far after every read, so a test can act in the middle of a round."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(args, stdin=terminal, stdout=terminal, stderr=terminal, env=env, close_fds=True)
    os.close(terminal)
    chunks = []
    give_up = time.monotonic() + limit_seconds  # a guard against a hang, not a timing assertion
    while time.monotonic() < give_up:
        ready, _, _ = select.select([controller], [], [], 0.5)
        if ready:
            try:
                data = os.read(controller, 65536)
            except OSError:  # the terminal closed: the process is done
                break
            if not data:
                break
            chunks.append(data)
            on_output(b"".join(chunks).decode("utf-8", errors="replace"))
        elif process.poll() is not None:
            break
    process.wait(timeout=10)
    os.close(controller)
    assert process.returncode == 0, b"".join(chunks).decode(errors="replace")[-3000:]
    return ANSI.sub("", b"".join(chunks).decode("utf-8", errors="replace"))


def test_practice_in_a_terminal_records_the_drawing_and_ends_with_both_grades_and_the_timeline(tmp_path: Path):
    home, round_dir = tmp_path / "home", tmp_path / "round"
    env = {**os.environ, "D2KIT_HOME": str(home), "D2KIT_PRACTICE_SPEED": "30", "COLUMNS": "140", "LINES": "40",
           "TERM": "xterm-256color"}
    scene = round_dir / "attempt-d2.excalidraw"

    def draw_once_the_round_has_started(output: str) -> None:
        if "Your attempt:" in output and not scene.exists():
            strong().save(scene)

    output = _run_under_pty([sys.executable, "-m", "d2kit.cli", "practice", "--minutes", "1",
                             "--dir", str(round_dir)], env, on_output=draw_once_the_round_has_started)
    time_up = output.index("TIME IS UP")
    assert FOLLOW_UP_TEXT not in output[:time_up]
    assert FOLLOW_UP_TEXT in output[time_up:]
    assert "phase 4/5: Deep dive" in output[:time_up]
    assert "Total: 0 / 100" in output[time_up:]
    assert "Diagram (Part 3) — 18 / 20" in output[time_up:]  # all but agreement: the empty section 5
    assert "Phase timeline" in output[time_up:] and "section 9" in output[time_up:]
    record = json.loads((round_dir / "attempt-d2.round.json").read_text())
    assert [s["file"] for s in record["saves"]] == ["diagram"] and record["finished"]
    records = [json.loads(line) for line in (home / "history.jsonl").read_text().splitlines()]
    assert [r["mode"] for r in records] == ["practice"] and records[0]["duration_seconds"] >= 60
    assert records[0]["diagram_points"] == 18 and records[0]["process_observed"]


def test_follow_ups_in_practice_come_from_the_rubric():
    design = load_design_rubric()
    assert FOLLOW_UP_TEXT in design.follow_ups[0].question
