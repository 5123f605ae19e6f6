"""The result files: ONE schema, ONE writer. The docs site and ``d2kit load check`` read what this writes.

``load/results/latest.json``::

    {"load":  {measured_at, command, machine, api_latency_ms, submissions_per_second, executions_per_second,
               fire_lag_ms {p50,p95,p99,max}, errors, lost_occurrences, cpu_percent, peak_rss_mb, ...},
     "bench": {measured_at, command, machine, duration_seconds, sustained {...}, max_rate {...}, drain {...},
               batch_curve [...], poll_period {...}, held_snapshot {...}, scale {...}, peers {...}, goals [...]},
     "summary": {throughput_per_second, dispatch_per_process_per_second, start_delay_p99_ms, claim_transaction_ms}}

Each section is replaced only by a run of its own kind, so ``make load`` keeps the last bench and vice versa.
``summary`` comes last and repeats, under unique names, the four figures the design doc compares with what it
assumed (design_doc.read_load_results reads any nesting, last key wins).

``load/results/series.json`` holds the per-second time series (throughput and p99 fire lag) of the latest
sustained runs, and ``load/results/bench-timeline.svg`` draws them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from d2kit import paths
from d2kit.bench import harness

RESULTS_DIR = paths.LOAD_RESULTS_DIR
LATEST = RESULTS_DIR / "latest.json"
SERIES = RESULTS_DIR / "series.json"
CHART = RESULTS_DIR / "bench-timeline.svg"
HOT_PATH = ("reference_impl/sql", "reference_impl/worker.py", "reference_impl/scheduler.py",
            "reference_impl/materializer.py", "reference_impl/reaper.py", "d2kit/bench")
# What a measurement describes: the scheduler, all of it (the archiver, the database helpers and the API are on
# the measured paths too). A result whose digest of these files differs from today's is stale.
MEASURED_CODE = "reference_impl"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def latest(path: Path = LATEST) -> dict[str, Any]:
    """The latest results, {} when there are none (a fresh clone has the committed ones)."""
    return _read(path)


def stamp(section: dict[str, Any]) -> dict[str, Any]:
    """When, how (the exact command), with which code and on what machine: every section carries these."""
    command = " ".join(["d2kit", *map(shlex.quote, sys.argv[1:])]) if sys.argv else "d2kit"
    return {"measured_at": datetime.now(UTC).isoformat(timespec="seconds"), "command": command,
            "code": _code_version(), "code_digest": code_digest(), "machine": harness.machine(),
            "database": "embedded PostgreSQL 16 (pgserver), synchronous_commit=on"
            if not os.environ.get("DATABASE_URL") else "DATABASE_URL", **section}


def _code_version() -> str:
    """The commit measured, '+changes' when the code on the measured path differed from it."""
    root = paths.ROOT
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", *HOT_PATH], cwd=root, capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{commit}+changes" if dirty else commit


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=paths.ROOT, capture_output=True, text=True, check=True).stdout


def _digest(files: list[tuple[str, str]]) -> str:
    """One hash of the (blob, path) pairs: the same files with the same contents give the same digest."""
    return hashlib.sha256("\n".join(sorted(f"{blob} {path}" for blob, path in files)).encode()).hexdigest()[:16]


def code_digest() -> str | None:
    """Digest of the measured code as it is in the working tree now (uncommitted changes included)."""
    try:
        files = [f for f in _git("ls-files", "-co", "--exclude-standard", "--", MEASURED_CODE).splitlines()
                 if (paths.ROOT / f).is_file()]
        blobs = _git("hash-object", "--", *files).split() if files else []
    except (OSError, subprocess.CalledProcessError):
        return None
    return _digest(list(zip(blobs, files, strict=True)))


@cache
def _committed_digest(commit: str) -> str | None:
    """Digest of the measured code at ``commit`` (results written before digests were recorded carry a commit)."""
    try:
        listing = _git("ls-tree", "-r", commit, "--", MEASURED_CODE)
    except (OSError, subprocess.CalledProcessError):
        return None
    entries = (line.split("\t", 1) for line in listing.splitlines())
    return _digest([(meta.split()[2], path) for meta, path in entries])  # meta: "<mode> blob <sha>"


def staleness(stamp: dict[str, Any], now: str | None) -> str | None:
    """Why a result no longer describes the code whose digest is ``now`` (code_digest()), None while it does.
    Compared by the digest of ``MEASURED_CODE`` the result recorded or, for older results, the commit it names;
    a result that cannot be compared cannot be shown to describe the code, and is stale too."""
    code = stamp.get("code") or "unknown"
    measured = stamp.get("code_digest")
    if measured is None and code != "unknown" and not code.endswith("+changes"):
        measured = _committed_digest(code)
    if now is None:
        return f"measured on {code}, no git checkout here to compare"
    if measured is None:
        return f"measured on {code}, which code that was is not known"
    return None if measured == now else f"{MEASURED_CODE}/ changed since {code}"


def write(kind: str, section: dict[str, Any], series: list[dict[str, Any]] | None = None,
          path: Path = LATEST) -> Path:
    """Replace the ``kind`` ('load' or 'bench') section of latest.json; keep the other; refresh the summary."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = latest(path)
    data.pop("summary", None)
    data[kind] = section
    data["summary"] = summary(data)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    if series is not None:
        all_series = _read(SERIES)
        all_series[kind] = series
        SERIES.write_text(json.dumps(all_series, default=str) + "\n", encoding="utf-8")
        draw_chart(all_series)
    return path


def summary(data: dict[str, Any]) -> dict[str, Any]:
    """The figures the design doc compares with its assumptions, from whichever run measured them."""
    bench, load = data.get("bench", {}), data.get("load", {})
    sustained = bench.get("sustained") or {}
    lag = sustained.get("fire_lag_ms") or load.get("fire_lag_ms") or {}
    return {
        "throughput_per_second": (bench.get("max_rate") or {}).get("max_sustainable_per_second"),
        "dispatch_per_process_per_second": bench.get("per_worker_process_per_second"),
        "start_delay_p99_ms": lag.get("p99"),
        "claim_transaction_ms": (bench.get("scale") or {}).get("claim_transaction_ms"),
    }


def draw_chart(all_series: dict[str, Any], path: Path = CHART) -> Path | None:
    """Throughput and p99 fire lag per second of the latest sustained runs (bench and load), as one SVG."""
    runs = {kind: rows for kind, rows in all_series.items() if rows}
    if not runs:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "d2kit"  # stable ids: the same data gives the same file
    fig, axes = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    for kind, rows in sorted(runs.items()):
        t = [r["t"] for r in rows]
        axes[0].plot(t, [r["completed_per_s"] for r in rows], label=f"{kind}: executions completed/s")
        axes[1].plot(t, [r["lag_p99_ms"] for r in rows], label=f"{kind}: p99 fire lag (ms)")
    axes[1].axhline(100, color="grey", linestyle="--", linewidth=1, label="goal: 100 ms")
    axes[0].set_ylabel("executions/s")
    axes[1].set_ylabel("p99 fire lag, ms")
    axes[1].set_xlabel("seconds into the run")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
    fig.suptitle("Sustained load: throughput and fire lag per second (measured; see latest.json for the command)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)
    return path
