"""``d2kit up`` as a supervisor: it keeps a local cluster's members running and watches the database without
depending on it.

A member that exits or is killed is started again under the same id after a backoff that doubles with each
crash in a row (``BACKOFF_FIRST`` up to ``BACKOFF_MAX``) and starts over once the member has stayed up
``STABLE_AFTER``. A worker that exits with ``RECYCLE_EXIT`` recycled itself on purpose (its hung handler threads
can end no other way) and is started again at once, without counting as a crash. A member that is only paused
(SIGSTOP) is alive and is left alone: to the protocol it is a long GC pause, and its lease decides. The database
is read by a thread of its own: while it is unreachable the summary says so and for how long, and supervision
goes on -- the members retry by themselves, and the supervisor never needs the database to keep them running.
Only ``stop()`` ends the cluster: every member is asked to drain (SIGTERM), and whatever is left after the bound
is SIGKILLed.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from reference_impl import status
from reference_impl.cluster import LocalCluster, Member
from reference_impl.processes import RECYCLE_EXIT, describe_error

BACKOFF_FIRST = 0.5  # seconds before the first restart of a member that died
BACKOFF_MAX = 8.0    # the bound: a member that keeps dying is tried again at least this often
STABLE_AFTER = 30.0  # a member up this long counts as healthy again: its next crash restarts after BACKOFF_FIRST


def backoff(crashes_in_a_row: int) -> float:
    return min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (crashes_in_a_row - 1))


@dataclass
class Seat:
    """One supervised member: how to start it, and its restart history."""

    start: Callable[[], Member]
    member: Member
    started_at: float
    restarts: int = 0
    crashes_in_a_row: int = 0
    last_exit: int | None = None
    restart_at: float | None = None  # monotonic; set while the member is dead and waiting for its restart


class DatabaseWatch(threading.Thread):
    """Reads the status summary every ``period`` seconds; remembers the last good one and, while the database
    cannot be read, since when and why."""

    def __init__(self, engine: Engine, period: float = 0.5) -> None:
        super().__init__(name="database-watch", daemon=True)
        self.engine, self.period = engine, period
        self.summary: dict[str, Any] | None = None
        self.error: str | None = None
        self.failing_since: float | None = None
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.is_set():
            try:
                with self.engine.begin() as conn:
                    self.summary = status.summary(conn)
                self.error, self.failing_since = None, None
            except Exception as exc:  # whatever the database does, a display must not die of what it displays
                self.error = describe_error(exc)
                self.failing_since = self.failing_since or time.monotonic()
            self._stopped.wait(self.period)

    def unreachable_for(self) -> float | None:
        return None if self.failing_since is None else time.monotonic() - self.failing_since

    def stop(self) -> None:
        self._stopped.set()


class Supervisor:
    def __init__(self, cluster: LocalCluster, *, restart: bool = True) -> None:
        self.cluster, self.restart = cluster, restart
        self.seats: dict[str, Seat] = {}

    def add(self, start: Callable[[], Member]) -> Member:
        member = start()
        self.seats[member.name] = Seat(start, member, time.monotonic())
        return member

    def tick(self) -> None:
        """Notice members that died and start the ones whose backoff is over."""
        now = time.monotonic()
        for seat in self.seats.values():
            if seat.member.alive:
                continue
            if seat.restart_at is None:  # just found dead
                seat.last_exit = seat.member.popen.returncode
                if seat.last_exit == RECYCLE_EXIT:
                    seat.restart_at = now if self.restart else float("inf")
                    continue
                stable = now - seat.started_at >= STABLE_AFTER
                seat.crashes_in_a_row = 1 if stable else seat.crashes_in_a_row + 1
                seat.restart_at = now + backoff(seat.crashes_in_a_row) if self.restart else float("inf")
            elif now >= seat.restart_at:
                seat.member, seat.started_at, seat.restart_at = seat.start(), now, None
                seat.restarts += 1

    def members(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [{"name": name, "kind": seat.member.kind, "pid": seat.member.popen.pid, "alive": seat.member.alive,
                 "restarts": seat.restarts, "last_exit": seat.last_exit,
                 "restart_in_s": None if seat.restart_at in (None, float("inf"))
                 else round(max(0.0, seat.restart_at - now), 1)}
                for name, seat in self.seats.items()]

    def write_state(self, path: Path, watch: DatabaseWatch) -> None:
        """The supervisor's view for scripts and tests (``up.json`` in the log folder), replaced atomically."""
        unreachable = watch.unreachable_for()
        state = {"pid": os.getpid(), "members": self.members(),
                 "database": {"reachable": unreachable is None, "error": watch.error,
                              "unreachable_for_s": None if unreachable is None else round(unreachable, 1)}}
        scratch = path.with_suffix(".tmp")
        scratch.write_text(json.dumps(state, indent=2))
        scratch.replace(path)
