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
from pathlib import Path

import pytest
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


def _run_under_pty(args: list[str], env: dict[str, str], limit_seconds: float = 60) -> str:
    """Run a command with a terminal as stdin/stdout/stderr; return everything it wrote."""
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
        elif process.poll() is not None:
            break
    process.wait(timeout=10)
    os.close(controller)
    assert process.returncode == 0, b"".join(chunks).decode(errors="replace")[-3000:]
    return ANSI.sub("", b"".join(chunks).decode("utf-8", errors="replace"))


def test_practice_in_a_terminal_reveals_at_the_end_and_scores(tmp_path: Path):
    home = tmp_path / "home"
    env = {**os.environ, "D2KIT_HOME": str(home), "D2KIT_PRACTICE_SPEED": "240", "COLUMNS": "120", "LINES": "40",
           "TERM": "xterm-256color"}
    output = _run_under_pty([sys.executable, "-m", "d2kit.cli", "practice", "--minutes", "1",
                             "--dir", str(tmp_path / "round")], env)
    time_up = output.index("TIME IS UP")
    assert FOLLOW_UP_TEXT not in output[:time_up]
    assert FOLLOW_UP_TEXT in output[time_up:]
    assert "phase 4/5: Deep dive" in output[:time_up]
    assert "Total: 0 / 100" in output[time_up:]
    assert (tmp_path / "round" / "attempt-d2.md").exists()
    records = [json.loads(line) for line in (home / "history.jsonl").read_text().splitlines()]
    assert [r["mode"] for r in records] == ["practice"] and records[0]["duration_seconds"] >= 60


def test_follow_ups_in_practice_come_from_the_rubric():
    design = load_design_rubric()
    assert FOLLOW_UP_TEXT in design.follow_ups[0].question
