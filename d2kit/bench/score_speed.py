"""How long ``d2kit score`` takes on a 1,500-word attempt, run as a candidate runs it: a new process each time.

Issue 13's goal is under 2 s on this machine. It is a benchmark, not a timed unit test: ``d2kit bench score``
runs the command N times as a subprocess, alternating between the two tuning attempts nearest 1,500 words (so
one file is not the whole story), after one untimed warm-up run, and writes min, median and max to
``rubric/calibration/score-speed.json``; the rubric page renders that file. Run it with the machine otherwise idle.
"""

from __future__ import annotations

import json
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from d2kit.scoring import calibration

WORDS = 1_500
GOAL_SECONDS = 2.0
RESULTS_PATH = calibration.CALIBRATION_DIR / "score-speed.json"


def attempts_near(words: int = WORDS, count: int = 2,
                  half: Path = calibration.CALIBRATION_DIR / "tuning") -> list[Path]:
    """The ``count`` tuning attempts whose length is nearest ``words``."""
    length = {path: len(path.read_text(encoding="utf-8").split()) for path in half.glob("*.md")}
    return sorted(sorted(length), key=lambda path: abs(length[path] - words))[:count]


def _score_command() -> list[str]:
    """The console script a candidate runs, next to this interpreter (``python -m d2kit.cli`` without one)."""
    script = Path(sys.executable).with_name("d2kit")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "d2kit.cli"]


def measure(runs: int, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Time ``runs`` runs of ``d2kit score <attempt> --no-record`` (the history file is left alone)."""
    from d2kit.bench.harness import machine

    attempts = attempts_near()
    command = _score_command()

    def run(attempt: Path) -> float:
        started = time.perf_counter()
        subprocess.run([*command, "score", str(attempt), "--no-record"], check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - started

    run(attempts[0])  # warm-up, not counted: the first run after a checkout pays for reading files from disk
    timings: dict[str, list[float]] = {attempt.name: [] for attempt in attempts}
    for index in range(runs):
        attempt = attempts[index % len(attempts)]
        progress(f"d2kit score {attempt.name}: run {index + 1} of {runs}")
        timings[attempt.name].append(run(attempt))
    every = [seconds for series in timings.values() for seconds in series]
    return {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["d2kit", *map(shlex.quote, sys.argv[1:])]),
        "code": (calibration.commit() or "unknown")[:7],  # short, as the bench results file writes it
        "machine": machine(),
        "timed": f"{shlex.join([Path(command[0]).name, *command[1:]])} score <attempt> --no-record",
        "attempts": {attempt.name: len(attempt.read_text(encoding="utf-8").split()) for attempt in attempts},
        "runs": runs,
        "seconds": _spread(every),
        "per_attempt": {name: _spread(series) for name, series in timings.items() if series},
        "goal_seconds": GOAL_SECONDS,
    }


def _spread(seconds: list[float]) -> dict[str, float]:
    return {"min": round(min(seconds), 3), "median": round(statistics.median(seconds), 3),
            "max": round(max(seconds), 3)}


def save(figures: dict[str, Any], path: Path = RESULTS_PATH) -> Path:
    path.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return path


def render_markdown(path: Path = RESULTS_PATH) -> str:
    """The rubric page's section on the scorer's speed, from the results file (never typed by hand)."""
    out = ["## How long scoring takes", ""]
    if not path.is_file():
        return "\n".join(out + ["Not yet measured (`d2kit bench score`).", ""])
    figures = json.loads(path.read_text(encoding="utf-8"))
    spread = figures["seconds"]
    verdict = "under" if spread["median"] < figures["goal_seconds"] else "not under"
    words = ", ".join(f"`{name}` ({count:,} words)" for name, count in figures["attempts"].items())
    machine = figures.get("machine") or {}
    out += [f"`{figures['timed']}`, {figures['runs']} runs alternating between {words}, each a new process: "
            f"median **{spread['median']:g} s** (min {spread['min']:g} s, max {spread['max']:g} s), {verdict} the "
            f"{figures['goal_seconds']:g} s goal. Measured {figures['measured_at']} at commit `{figures['code']}` "
            f"on {machine.get('cores', '?')} cores ({machine.get('cpu_model', 'unknown CPU')}) by "
            f"`{figures['command']}`.", ""]
    return "\n".join(out)
