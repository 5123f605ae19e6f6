"""Was the machine alone? Its load before each benchmark part and while the part ran, recorded with its figures.

Benchmarks are meant to run alone on the machine: a figure measured while something else used the CPU is not the
system's. So every part records

* **before**: the 1-minute load average (``/proc/loadavg``) and, over a one-second sample with the bench idle, how
  busy the machine was and how much of that was other processes;
* **during**: over the whole part, the machine's busy share, the share the bench used (this process and every
  process it started -- schedulers, workers, the peers' runners -- plus the PostgreSQL server), and the rest: other
  processes.

All in percent of the whole machine (100 = every core busy). The bench's CPU comes from the kernel's per-process
counters including those of reaped children, so processes that came and went during the part (database backends,
a drill's worker) count without sampling. ``d2kit load check`` judges the "during" figure.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import psutil
from sqlalchemy import text

from reference_impl import db

BEFORE_SAMPLE_SECONDS = 1.0


def machine_times() -> tuple[float, float]:
    """CPU seconds of the whole machine since boot: (total, idle), every core summed."""
    times = psutil.cpu_times()
    return sum(times), times.idle + getattr(times, "iowait", 0.0)


def postgres_server_pid() -> int | None:
    """The postmaster of the server in use, when it runs on this machine (its backends are its children); None for
    a remote DATABASE_URL or an unreachable server."""
    try:
        engine = db.make_engine(pool_size=1, application_name="d2-bench-load")
        try:
            with engine.connect() as conn:  # the backend is looked at while it is alive
                server = psutil.Process(conn.execute(text("SELECT pg_backend_pid()")).scalar_one()).parent()
        finally:
            engine.dispose()
    except Exception:  # no server or not ours to read: the bench's share then leaves PostgreSQL out, and says so
        return None
    return server.pid if server is not None and server.name().startswith("postgres") else None


class Watch:
    """CPU seconds used by the machine and by the bench's own processes from construction to ``during()``."""

    def __init__(self, postgres_pid: int | None):
        self.roots = [os.getpid(), *([postgres_pid] if postgres_pid else [])]
        self._t0 = time.monotonic()
        self._machine0 = machine_times()
        self._ours0 = self.ours()

    def ours(self) -> float:
        """CPU seconds of the roots and all their descendants, children already reaped included."""
        pids: set[int] = set()
        for root in self.roots:
            try:
                process = psutil.Process(root)
                pids |= {process.pid, *(child.pid for child in process.children(recursive=True))}
            except psutil.Error:
                continue
        used = 0.0
        for pid in pids:
            try:
                t = psutil.Process(pid).cpu_times()
            except psutil.Error:  # exited meanwhile: its time moves to its parent's reaped-children counters
                continue
            used += t.user + t.system + t.children_user + t.children_system
        return used

    def during(self) -> dict[str, Any]:
        total, idle = machine_times()
        machine = total - self._machine0[0]
        busy = machine - (idle - self._machine0[1])
        ours = self.ours() - self._ours0

        def percent(seconds: float) -> float:
            return round(100 * max(0.0, seconds) / max(machine, 1e-9), 1)

        return {"seconds": round(time.monotonic() - self._t0, 1), "machine_busy_percent": percent(busy),
                "bench_percent": percent(ours), "other_processes_percent": percent(busy - ours),
                "postgres_counted": len(self.roots) > 1}


def before(postgres_pid: int | None) -> dict[str, Any]:
    """The load average, and a one-second sample of the machine with the bench idle."""
    watch = Watch(postgres_pid)
    time.sleep(BEFORE_SAMPLE_SECONDS)
    sample = watch.during()
    return {"load_average_1m": round(os.getloadavg()[0], 2), "cores": psutil.cpu_count(),
            "machine_busy_percent": sample["machine_busy_percent"],
            "other_processes_percent": sample["other_processes_percent"]}


def watched(parts: Iterator[tuple[str, dict[str, Any]]]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(part, figures) as ``parts`` yields them, each with the machine's load before and during that part."""
    postgres_pid = postgres_server_pid()
    while True:
        load = {"before": before(postgres_pid)}
        watch = Watch(postgres_pid)
        try:
            part, figures = next(parts)
        except StopIteration:
            return
        yield part, figures, {**load, "during": watch.during()}
