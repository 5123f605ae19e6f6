"""Side by side with the Postgres queues a user would pick instead: pgqueuer and procrastinate.

They are installed from PyPI into a SEPARATE virtualenv, ``.venv-bench/`` (git-ignored, made here with pip on first
use) -- never vendored, never in the project's environment. They run on the same PostgreSQL server as ours, each
measurement on a fresh scratch database, with the same no-op workload, the same number of worker processes, and
the same three measurements (peer_runner.py has their side):

* **fire lag at 833/s** -- p99 from the due time to handler start. Ours: jobs scheduled ahead and materialised by
  the scheduler (the full path); theirs: enqueued at their due time (their fastest path, NOTIFY wakes a worker).
* **sustained** -- executions/s with the queue kept >= 2,000 deep.
* **drain** -- executions/s to clear a backlog that appears in one commit.

The machine is shared and noisy, so the systems ALTERNATE within each round (ours, pgqueuer, procrastinate, ours,
...) and the report quotes the median of the rounds, and ours/theirs ratios of those medians.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from d2kit import paths
from d2kit.bench import scenarios
from d2kit.bench.harness import ClusterShape, Progress, quiet
from d2kit.bench.scenarios import median_of
from reference_impl import db

BENCH_ENV = paths.BENCH_ENV
RUNNER = paths.PEER_RUNNER
# Pinned so a comparison is repeatable; the versions measured while planning (load/reference-points.md section 4).
PEER_REQUIREMENTS = ("pgqueuer==1.6.0", "procrastinate==3.10.0", "asyncpg", "psycopg[binary]")
PEER_NAMES = ("pgqueuer", "procrastinate")
METRICS = ("sustained", "p99_lag_ms_at_833", "drain")


def bench_python() -> Path:
    return BENCH_ENV / "bin" / "python"


def ensure_env(progress: Progress = quiet) -> Path:
    """Create ``.venv-bench/`` with the peers if it is missing; return its python."""
    python = bench_python()
    check = [str(python), "-c", "import pgqueuer, procrastinate, asyncpg"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    progress("creating .venv-bench/ and installing the peers from PyPI (once)")
    subprocess.run([sys.executable, "-m", "venv", str(BENCH_ENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *PEER_REQUIREMENTS], check=True)
    return python


def peer_versions() -> dict[str, str]:
    code = f"import importlib.metadata as m, json; print(json.dumps({{n: m.version(n) for n in {PEER_NAMES!r}}}))"
    out = subprocess.run([str(bench_python()), "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def run_peer(system: str, mode: str, shape: ClusterShape, **options: float) -> dict[str, Any]:
    """One measurement of a peer on a fresh scratch database (dropped afterwards)."""
    with db.scratch_database(db.database_url(), f"d2peer_{system}", schema=False) as (url, _):
        cmd = [str(bench_python()), str(RUNNER), system, mode, "--url", url, "--workers", str(shape.workers),
               "--concurrency", str(shape.concurrency)]
        for key, value in options.items():
            cmd += [f"--{key}", str(value)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(f"{system} {mode} failed: {done.stderr.strip()[-2000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])


def _ours(mode: str, shape: ClusterShape, lag_seconds: float, saturate_seconds: float, backlog: int,
          progress: Progress) -> dict[str, Any]:
    if mode == "lag":
        return scenarios.sustained(shape, scenarios.PEAK_RATE, lag_seconds, progress=progress)
    if mode == "saturate":
        return scenarios.saturate(shape, saturate_seconds, progress=progress)
    return scenarios.drain(shape, backlog, progress=progress)


def compare(shape: ClusterShape, rounds: int = 3, lag_seconds: float = 30, saturate_seconds: float = 20,
            backlog: int = 20_000, progress: Progress = quiet) -> dict[str, Any]:
    """Rounds of (lag, saturate, drain) x (ours, pgqueuer, procrastinate), alternating; medians and ratios."""
    ensure_env(progress)
    systems = ("ours", *PEER_NAMES)
    raw: dict[str, dict[str, list[float | None]]] = {s: {m: [] for m in METRICS} for s in systems}
    for round_no in range(1, rounds + 1):
        for mode, metric in (("lag", "p99_lag_ms_at_833"), ("saturate", "sustained"), ("drain", "drain")):
            for system in systems:
                progress(f"peers round {round_no}/{rounds}: {system} {mode}")
                if system == "ours":
                    result = _ours(mode, shape, lag_seconds, saturate_seconds, backlog, progress)
                else:
                    options = {"lag": {"rate": scenarios.PEAK_RATE, "seconds": lag_seconds},
                               "saturate": {"seconds": saturate_seconds}, "drain": {"backlog": backlog}}[mode]
                    result = run_peer(system, mode, shape, **options)
                value = result["fire_lag_ms"]["p99"] if mode == "lag" else result["executions_per_second"]
                raw[system][metric].append(value)
    medians = {s: {m: median_of(raw[s][m]) for m in METRICS} for s in systems}
    ratios = {}
    for peer in PEER_NAMES:
        ours, theirs = medians["ours"], medians[peer]
        ratios[peer] = {
            "sustained": _ratio(ours["sustained"], theirs["sustained"]),
            "drain": _ratio(ours["drain"], theirs["drain"]),
            # Lag: lower is better, so theirs/ours keeps "> 1 means we are better" for every ratio.
            "p99_lag_at_833": _ratio(theirs["p99_lag_ms_at_833"], ours["p99_lag_ms_at_833"]),
        }
    return {"rounds": rounds, "lag_seconds": lag_seconds, "saturate_seconds": saturate_seconds, "backlog": backlog,
            "cluster": shape.describe(), "versions": peer_versions(), "medians": medians, "runs": raw,
            "ratio_ours_over_theirs": ratios,
            "method": "alternating rounds on one PostgreSQL; medians; lag ratio is theirs/ours (>1 = ours lower)"}


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, 2)
