"""A scheduler replica: materialiser + reaper + cleaner + its own liveness row, in one loop.

Run any number of them (active-active). None is special: kill one at any instant and the others carry on;
correctness comes from row locks and unique keys in PostgreSQL, not from electing a leader.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

from reference_impl import cleaner, db, materializer, processes, reaper
from reference_impl.lease import HEARTBEAT_SECONDS

log = logging.getLogger("d2kit.scheduler")


@dataclass(frozen=True)
class SchedulerConfig:
    scheduler_id: str
    tick_seconds: float = 0.1        # materialise pass period (occurrences are written LOOKAHEAD early)
    reap_every_seconds: float = 0.5  # lease expiry is detected within this of the lease running out
    # After a pass fails (the database unreachable) this replica reaps nothing until it has been back for one
    # workers' heartbeat period. A lease that ran out while the database was unreachable ran out because nobody
    # could heartbeat, not because its worker died: the workers' retried heartbeats renew it first (lease.py).
    # A dead worker is found one grace later. A replica that has not seen a failure reaps from its start.
    reap_grace_seconds: float = HEARTBEAT_SECONDS
    heartbeat_every_seconds: float = 1.0
    archive_every_seconds: float = 1.0  # one batch per second, or per pass while batches come back full
    archive_after: timedelta = cleaner.DEFAULT_ARCHIVE_AFTER
    retention_every_seconds: float = 60.0  # retention is in days: a minute late costs nothing
    retention: timedelta = cleaner.DEFAULT_RETENTION


class Scheduler:
    def __init__(self, url: str, config: SchedulerConfig):
        self.config = config
        self.engine = db.make_engine(url, pool_size=2, application_name=f"d2-scheduler-{config.scheduler_id}")
        self.stop = threading.Event()

    def run(self) -> None:
        cfg = self.config
        last_reap = last_heartbeat = last_archive = last_retention = 0.0
        registered = False
        connected_since: float | None = -math.inf  # start of the current run of passes without a database error
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                if not registered:
                    processes.register(self.engine, cfg.scheduler_id, "scheduler")
                    registered = True
                with self.engine.begin() as conn:
                    inserted = materializer.materialise_due(conn)
                if inserted:
                    log.debug("materialised %d occurrences", inserted)
                if connected_since is None:
                    connected_since = started
                if (started - last_reap >= cfg.reap_every_seconds
                        and started - connected_since >= cfg.reap_grace_seconds):
                    with self.engine.begin() as conn:
                        lost = reaper.reap_expired(conn)
                    if lost:
                        log.info("reaped %d expired leases", lost)
                    last_reap = started
                if started - last_archive >= cfg.archive_every_seconds:
                    with self.engine.begin() as conn:
                        archived = cleaner.archive_finished(conn, cfg.archive_after)
                    if archived:
                        log.debug("archived %d finished occurrences", archived)
                    if archived < cleaner.ARCHIVE_BATCH:  # caught up; a full batch means more is waiting
                        last_archive = started
                if started - last_retention >= cfg.retention_every_seconds:
                    with self.engine.begin() as conn:
                        dropped = cleaner.rotate_history(conn, cfg.retention)
                    with self.engine.begin() as conn:
                        forgotten = cleaner.forget_jobs(conn, cfg.retention)
                    if dropped or forgotten:
                        log.info("retention %s: dropped %d days of history, forgot %d one-shot jobs",
                                 cfg.retention, dropped, forgotten)
                    if forgotten < cleaner.FORGET_BATCH:  # caught up; a full batch means more is waiting
                        last_retention = started
                if started - last_heartbeat >= cfg.heartbeat_every_seconds:
                    processes.heartbeat(self.engine, cfg.scheduler_id)
                    last_heartbeat = started
            except Exception as exc:  # database down or restarting: log, back off, carry on
                log.warning("pass failed: %s", processes.describe_error(exc))
                connected_since = None
                self.stop.wait(0.5)
                continue
            # Only a full pass may have left more due: go again at once. A partial one has caught up; waiting
            # a tick costs no lag (occurrences are written LOOKAHEAD early) and stops a spin of one-row passes
            # under a steady trickle of new jobs.
            if inserted < materializer.JOBS_PER_PASS:
                self.stop.wait(max(0.0, cfg.tick_seconds - (time.monotonic() - started)))
        processes.mark_stopped(self.engine, cfg.scheduler_id)
        self.engine.dispose()
