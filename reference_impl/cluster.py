"""A local cluster of real OS processes: scheduler replicas and workers (and the API), each its own Python process.

Used by ``d2kit up``, the drills and the tests. Faults are real: ``kill`` is SIGKILL, ``pause`` is
SIGSTOP (a process pause, as in a long GC or a frozen VM), and a worker can be pointed at a proxy URL
to have its network cut (drills/proxy.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Member:
    name: str
    kind: str  # 'scheduler' | 'worker' | 'api'
    popen: subprocess.Popen
    log_path: Path

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None


def _group_alive(pgid: int) -> bool:
    """Is any process of the group left (e.g. a wrapped command whose wrapper already exited)?"""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@dataclass
class LocalCluster:
    url: str
    log_dir: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    members: dict[str, Member] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)

    def _spawn(self, name: str, kind: str, args: list[str], url: str | None,
               env: dict[str, str] | None, prefix: list[str] | None) -> Member:
        process_env = {**os.environ, **self.extra_env, **(env or {}), "DATABASE_URL": url or self.url,
                       "PYTHONUNBUFFERED": "1"}
        cli_args = ["api", *args] if kind == "api" else [kind, "run", "--id", name, *args]
        command = [*(prefix or []), sys.executable, "-m", "reference_impl.cli", *cli_args]
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "ab") as log_file:
            popen = subprocess.Popen(command, env=process_env, stdout=log_file, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        member = Member(name, kind, popen, log_path)
        self.members[name] = member
        return member

    def start_scheduler(self, name: str, *, env: dict[str, str] | None = None,
                        prefix: list[str] | None = None, extra_args: list[str] | None = None) -> Member:
        return self._spawn(name, "scheduler", extra_args or [], None, env, prefix)

    def start_worker(self, name: str, *, pool: str = "short", concurrency: int = 16, lease: float | None = None,
                     url: str | None = None, env: dict[str, str] | None = None,
                     prefix: list[str] | None = None, extra_args: list[str] | None = None) -> Member:
        args = ["--pool", pool, "--concurrency", str(concurrency), *(["--lease", str(lease)] if lease else []),
                *(extra_args or [])]
        return self._spawn(name, "worker", args, url, env, prefix)

    def start_api(self, name: str = "api", *, port: int = 8000) -> Member:
        """The HTTP API (``d2kit api``) on 127.0.0.1:``port``; its access log goes to its log file."""
        return self._spawn(name, "api", ["--port", str(port)], None, None, None)

    def kill(self, name: str) -> None:
        """SIGKILL: no cleanup, no goodbye -- the crash the design must survive."""
        self._signal(name, signal.SIGKILL)
        self.members[name].popen.wait(timeout=10)

    def pause(self, name: str) -> None:
        self._signal(name, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        self._signal(name, signal.SIGCONT)

    def _signal(self, name: str, sig: signal.Signals) -> None:
        # The member's whole process group (each is a session leader): under a wrapper such as faketime, which
        # forks its command, signalling the wrapper's pid alone would leave the real process running.
        os.killpg(self.members[name].popen.pid, sig)

    def alive(self) -> dict[str, bool]:
        return {name: m.alive for name, m in self.members.items()}

    def stop(self, timeout: float = 15.0) -> list[str]:
        """SIGTERM everyone (graceful: workers finish or hand back their attempts), then SIGKILL stragglers.
        Returns the names of the members still running at the bound: killed, not drained."""
        for name in self.members:
            for sig in (signal.SIGCONT, signal.SIGTERM):  # a paused process cannot handle SIGTERM
                with contextlib.suppress(ProcessLookupError):
                    self._signal(name, sig)
        deadline = time.monotonic() + timeout
        killed = []
        for name, member in self.members.items():
            while time.monotonic() < deadline and (member.alive or _group_alive(member.popen.pid)):
                time.sleep(0.05)
            if member.alive:
                killed.append(name)
            with contextlib.suppress(ProcessLookupError):
                self._signal(name, signal.SIGKILL)
            member.popen.wait(timeout=5)
        return killed

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
