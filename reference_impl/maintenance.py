"""A maintenance service: one named job of a scheduler replica, run on its own period, failing on its own.

River runs each of its maintenance tasks (the rescuer, the cleaner, the periodic enqueuer) as its own service
with its own defaults; this is the same idea. Each service's pass runs in its own transaction. A service whose
pass fails is counted and retried on its next period; the others, the replica's liveness heartbeat among them,
carry on. A pass that comes back with a full batch means more is waiting, so the service runs again at once.

Tests wait on ``wait_for_passes`` (a condition signalled after every pass) instead of sleeping.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import Connection, Engine

from reference_impl import processes

log = logging.getLogger("d2kit.maintenance")


@dataclass
class Service:
    name: str
    every_seconds: float
    run_pass: Callable[[Connection], int]  # one batch in the caller's transaction; returns how much it did
    batch: int | None = None               # a pass that did this much left more waiting: go again at once
    passes: int = 0
    failures: int = 0
    last_error: str | None = None
    next_due: float = 0.0                  # monotonic
    _signal: threading.Condition = field(default_factory=threading.Condition, repr=False)

    def __post_init__(self) -> None:
        if self.every_seconds <= 0:
            raise ValueError(f"{self.name}: every_seconds must be > 0, got {self.every_seconds}")

    def run_if_due(self, engine: Engine, now: float) -> int:
        """One pass if its period has come (again at once while batches come back full). Never raises."""
        if now < self.next_due:
            return 0
        try:
            with engine.begin() as conn:
                done = self.run_pass(conn)
            self.last_error = None
        except Exception as exc:  # database down, or this service's own bug: it must not stop the others
            done = 0
            self.failures += 1
            self.last_error = processes.describe_error(exc)
            log.warning("%s pass failed (%d so far): %s", self.name, self.failures, self.last_error)
        if done:
            log.debug("%s: %d", self.name, done)
        full = self.batch is not None and done >= self.batch
        self.next_due = now if full else now + self.every_seconds
        with self._signal:
            self.passes += 1
            self._signal.notify_all()
        return done

    def wait_for_passes(self, count: int, timeout: float) -> bool:
        """Block until this service has finished ``count`` passes (failed ones included)."""
        deadline = time.monotonic() + timeout
        with self._signal:
            while self.passes < count:
                left = deadline - time.monotonic()
                if left <= 0 or not self._signal.wait(left):
                    return self.passes >= count
        return True
