"""A scheduler replica: its maintenance services (maintenance.py), each on its own period, in one loop.

Run any number of them (active-active). None is special: kill one at any instant and the others carry on;
correctness comes from row locks and unique keys in PostgreSQL, not from electing a leader. The services:

* ``materialise`` (materializer.py): due fire times become occurrence rows;
* ``reap`` (reaper.py): attempts whose lease expired, by the database clock, are lost and retried;
* ``archive``, ``rotate_history`` and ``forget_jobs`` (cleaner.py): finished executions move to the history,
  days older than the retention are dropped, and one-shot jobs that old are forgotten;
* ``route`` (router.py): a recurring job whose recent runs take long has its next occurrences sent to the long
  pool, whatever it declared;
* ``heartbeat``: this replica's liveness row (``d2kit status``).

A failing service is counted and tried again on its next period; it never stops the others.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import Connection

from reference_impl import cleaner, db, materializer, processes, reaper, router
from reference_impl.lease import HEARTBEAT_SECONDS
from reference_impl.maintenance import Service

log = logging.getLogger("d2kit.scheduler")


@dataclass(frozen=True)
class SchedulerConfig:
    scheduler_id: str
    tick_seconds: float = 0.1        # materialise pass period (occurrences are written LOOKAHEAD early)
    reap_every_seconds: float = 0.5  # lease expiry is detected within this of the lease running out
    # After a reap pass fails (the database unreachable) this replica reaps nothing until it has been back for one
    # workers' heartbeat period. A lease that ran out while the database was unreachable ran out because nobody
    # could heartbeat, not because its worker died: the workers' retried heartbeats renew it first (lease.py).
    # A dead worker is found one grace later. A replica that has not seen a failure reaps from its start.
    reap_grace_seconds: float = HEARTBEAT_SECONDS
    heartbeat_every_seconds: float = 1.0
    archive_every_seconds: float = 1.0  # one batch per second, or per pass while batches come back full
    archive_after: timedelta = cleaner.DEFAULT_ARCHIVE_AFTER
    retention_every_seconds: float = 60.0  # retention is in days: a minute late costs nothing
    retention: timedelta = cleaner.DEFAULT_RETENTION
    route_every_seconds: float = router.ROUTE_EVERY.total_seconds()  # a job's pool follows its run times this late

    def __post_init__(self) -> None:
        for name in ("tick_seconds", "reap_every_seconds", "heartbeat_every_seconds", "archive_every_seconds",
                     "retention_every_seconds", "route_every_seconds"):
            if getattr(self, name) <= 0:
                raise ValueError(f"SchedulerConfig.{name} must be > 0, got {getattr(self, name)}")
        if self.retention <= self.archive_after:
            raise ValueError(f"SchedulerConfig.retention ({self.retention}) must be longer than archive_after "
                             f"({self.archive_after}): history would be dropped before it is archived")


class Scheduler:
    def __init__(self, url: str, config: SchedulerConfig):
        self.config = config
        self.engine = db.make_engine(url, pool_size=2, application_name=f"d2-scheduler-{config.scheduler_id}")
        self.stop = threading.Event()
        cfg = config
        self.services = {service.name: service for service in (
            Service("materialise", cfg.tick_seconds, materializer.materialise_due, batch=materializer.JOBS_PER_PASS),
            Service("reap", cfg.reap_every_seconds, self._reap, batch=reaper.REAP_BATCH),
            Service("archive", cfg.archive_every_seconds,
                    lambda conn: cleaner.archive_finished(conn, cfg.archive_after), batch=cleaner.ARCHIVE_BATCH),
            Service("rotate_history", cfg.retention_every_seconds,
                    lambda conn: cleaner.rotate_history(conn, cfg.retention)),
            Service("forget_jobs", cfg.retention_every_seconds,
                    lambda conn: cleaner.forget_jobs(conn, cfg.retention), batch=cleaner.FORGET_BATCH),
            Service("route", cfg.route_every_seconds, lambda conn: router.route_by_duration(
                conn, timedelta(seconds=cfg.route_every_seconds))),
            Service("heartbeat", cfg.heartbeat_every_seconds, self._heartbeat),
        )}
        self._enrolled = False
        self._reachable_since = -math.inf  # monotonic: the first reap pass that succeeded after one that failed

    def _reap(self, conn: Connection) -> int:
        now = time.monotonic()
        if self.services["reap"].last_error is not None:  # the pass before this one failed: the database is back
            self._reachable_since = now
        if now - self._reachable_since < self.config.reap_grace_seconds:
            return 0
        return reaper.reap_expired(conn)

    def _heartbeat(self, conn: Connection) -> int:
        if self._enrolled:
            processes.heartbeat(conn, self.config.scheduler_id)
        else:  # the first pass that reaches the database (re)starts this replica's row
            processes.enroll(conn, self.config.scheduler_id, "scheduler")
            self._enrolled = True
        return 1

    def run(self) -> None:
        while not self.stop.is_set():
            now = time.monotonic()
            for service in self.services.values():
                service.run_if_due(self.engine, now)
            next_due = min(service.next_due for service in self.services.values())
            self.stop.wait(max(0.0, next_due - time.monotonic()))
        log.info("stopping")
        processes.mark_stopped(self.engine, self.config.scheduler_id)
        self.engine.dispose()
