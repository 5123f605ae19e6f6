"""Where the Python side's time goes: py-spy samples the scheduler and worker processes during a run.

py-spy (https://github.com/benfred/py-spy) attaches to a running process from outside, so what it sees is the
real cluster under the benchmark's load, not a copy of it run under a profiler. It samples only threads that hold
the GIL (``--gil``): those are the ones spending the process's CPU on Python; a handler thread waiting for work or
a claim waiting on PostgreSQL is not counted. ``--nonblocking`` reads the stacks without pausing the process, so
the profile does not slow what it measures.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

SAMPLES_PER_SECOND = 100
TOP = 12
_LINE = re.compile(r"\s*\(([^():]+?)(?::\d+)?\)$")  # "plan_job (reference_impl/materializer.py:61)"


def py_spy() -> str | None:
    """The py-spy executable next to this interpreter (installed with the kit), else one on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.is_file() else shutil.which("py-spy")


class PythonProfile:
    """One ``py-spy record`` per process for ``seconds``; ``result()`` waits for them and summarises by kind."""

    def __init__(self, components: dict[str, list[int]], seconds: float):
        self.seconds = seconds
        self.folder = Path(tempfile.mkdtemp(prefix="d2bench-pyspy-"))
        self.runs: list[tuple[str, int, subprocess.Popen[bytes], Path]] = []
        self.not_run: str | None = None
        exe = py_spy()
        if exe is None:
            self.not_run = "py-spy is not installed"
            return
        for kind in ("scheduler", "worker"):
            for pid in components.get(kind, []):
                out = self.folder / f"{kind}-{pid}.txt"
                command = [exe, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds))),
                           "--rate", str(SAMPLES_PER_SECOND), "--format", "raw", "--gil", "--nonblocking",
                           "--output", str(out)]
                self.runs.append((kind, pid, subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                                              stderr=subprocess.PIPE), out))

    def result(self) -> dict[str, Any]:
        if self.not_run:
            return {"not_run": self.not_run}
        stacks: dict[str, list[str]] = {}
        failures = []
        for kind, pid, run, out in self.runs:
            _, err = run.communicate(timeout=self.seconds + 60)
            if run.returncode != 0 or not out.is_file():
                failures.append(f"{kind} {pid}: {err.decode(errors='replace').strip()[-300:]}")
                continue
            stacks.setdefault(kind, []).extend(out.read_text(encoding="utf-8").splitlines())
        shutil.rmtree(self.folder, ignore_errors=True)
        if not stacks:  # e.g. ptrace not permitted: a profile that could not be taken is not an empty one
            return {"not_run": "; ".join(failures) or "py-spy recorded nothing"}
        summary: dict[str, Any] = {kind: top_functions(lines, self.seconds) for kind, lines in stacks.items()}
        if failures:
            summary["failures"] = failures
        return summary


def top_functions(raw_lines: list[str], seconds: float, top: int = TOP) -> dict[str, Any]:
    """Summarise py-spy's raw (collapsed) stacks -- "frame;frame;frame count" -- by function: the share of samples
    where it was running itself (self) and where it was anywhere on the stack (total). Functions are named
    "function (file)" without the line, so one function's lines add up."""
    own: Counter[str] = Counter()
    anywhere: Counter[str] = Counter()
    samples = 0
    for line in raw_lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_LINE.sub(r" (\1)", frame) for frame in stack.split(";")]
        samples += n
        own[frames[-1]] += n
        for frame in set(frames):
            anywhere[frame] += n
    if not samples:
        return {"samples": 0, "gil_held_percent_of_one_core": 0.0, "top_self": []}
    return {
        "samples": samples,
        # Samples are taken only while a thread holds the GIL, so their rate says how busy the interpreter was.
        "gil_held_percent_of_one_core": round(100 * samples / (SAMPLES_PER_SECOND * seconds), 1),
        "top_self": [{"function": name, "self_share": round(n / samples, 3),
                      "total_share": round(anywhere[name] / samples, 3)} for name, n in own.most_common(top)],
    }
