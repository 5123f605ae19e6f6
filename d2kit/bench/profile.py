"""Where the time goes during a run: py-spy samples the scheduler and worker processes (the Python side), and
pg_stat_activity is sampled for what PostgreSQL's backends are doing (the database side).

py-spy (https://github.com/benfred/py-spy) attaches to a running process from outside, so what it sees is the
real cluster under the benchmark's load, not a copy of it run under a profiler. It samples only threads that hold
the GIL (``--gil``): those are the ones spending the process's CPU on Python; a handler thread waiting for work or
a claim waiting on PostgreSQL is not counted. ``--nonblocking`` reads the stacks without pausing the process, so
the profile does not slow what it measures.

The embedded server has no ``pg_stat_statements``, so the database side is sampled instead, as the wait-event
samplers of the field do (Oracle's ASH, pg_wait_sampling): every ``ACTIVITY_INTERVAL_SECONDS`` one query reads
each backend's state, wait event and statement. A statement's count over the samples, divided by their number, is
how many backends were in it on average: on CPU, waiting on a lock or for WAL to reach the disk, or idle inside an
open transaction (the client's time between its statements).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

SAMPLES_PER_SECOND = 100
TOP = 12
_LINE = re.compile(r"\s*\(([^():]+?)(?::\d+)?\)$")  # "plan_job (reference_impl/materializer.py:61)"
ACTIVITY_INTERVAL_SECONDS = 0.01
# Every statement the cluster sends on the hot path calls one d2_* function; others are named by their first words.
_FUNCTION = re.compile(r"\b(d2_\w+)\s*\(")
ACTIVITY_SQL = text(
    "SELECT state, coalesce(wait_event_type || '/' || wait_event, 'CPU'), query FROM pg_stat_activity"
    " WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
    " AND state IN ('active', 'idle in transaction')")


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


def statement_name(query: str) -> str:
    """The d2_* function a statement calls, else its first five words."""
    called = _FUNCTION.search(query)
    return called.group(1) if called else " ".join(query.split()[:5])


class DatabaseActivity(threading.Thread):
    """Samples pg_stat_activity for the bench database's client backends until ``halt`` is set; ``result()``
    says how many backends were, on average, in each (statement, activity): CPU, a wait event, or idle in
    transaction."""

    def __init__(self, engine: Engine):
        super().__init__(name="database-activity", daemon=True)
        self.engine = engine
        self.counts: Counter[tuple[str, str]] = Counter()
        self.samples = 0
        self.halt = threading.Event()
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            with self.engine.connect() as conn:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
                while not self.halt.is_set():
                    for state, activity, query in conn.execute(ACTIVITY_SQL):
                        in_transaction = state == "idle in transaction"
                        self.counts[(statement_name(query), "idle in transaction" if in_transaction else activity)] += 1
                    self.samples += 1
                    self.halt.wait(ACTIVITY_INTERVAL_SECONDS)
        except Exception as exc:  # reported by result(): a sampler that fell over has no figures
            self.error = exc

    def result(self, top: int = TOP) -> dict[str, Any]:
        self.halt.set()
        self.join()
        if self.error or not self.samples:
            return {"not_run": f"pg_stat_activity could not be sampled: {self.error or 'no samples'}"}
        return backends_by_activity(self.counts, self.samples, top)


def backends_by_activity(counts: Counter[tuple[str, str]], samples: int, top: int = TOP) -> dict[str, Any]:
    """Sample counts per (statement, activity) as mean backends, the busiest first."""
    busy = sum(n for (_, activity), n in counts.items() if activity != "idle in transaction")
    return {
        "samples": samples,
        "interval_ms": ACTIVITY_INTERVAL_SECONDS * 1000,
        "mean_active_backends": round(busy / samples, 2),
        "top": [{"statement": statement, "activity": activity, "backends": round(n / samples, 3)}
                for (statement, activity), n in counts.most_common(top)],
    }
