"""A worker process: claims occurrences of one pool in batches, runs their handlers, heartbeats, completes.

These loops share one process; each round trip to the database is batched:

* **claimer** (main thread) -- ``d2_claim`` for up to the free slots; polls every ``poll_seconds`` when
  there is nothing ready, goes again at once when a batch came back full of due rows. It claims ahead: rows
  that come due within ``claim_ahead`` (two poll periods by default) are claimed now and started at their ready
  time, so a job starts on time rather than up to a poll period late (the claim in operations.sql says more).
* **executor** -- ``concurrency`` handler threads, one per slot, each running the attempts handed to it one after
  another (started once: starting a thread per attempt made the claimer wait for every start, and cost more than a
  no-op handler); a finished handler queues its result. An attempt past its max runtime (the heartbeat answers
  ``timeout``) is asked to stop; a handler that has not stopped a heartbeat period later is abandoned: its slot is
  freed, a new thread takes its place, and the attempt is completed as failed, which the database records as
  ``timed_out``. A thread cannot be killed, so an abandoned one that never ends is leaked (its memory, a core if
  it spins, whatever connection or lock it holds); once ``max_abandoned`` of them are still alive the worker
  **recycles**: it claims nothing more, lets its other handlers finish (each bounded by its own max runtime),
  completes them, and exits with ``processes.RECYCLE_EXIT``, so its supervisor (``d2kit up``) starts a fresh
  process -- exiting is the one way to end a thread.
* **heartbeater** -- one ``d2_heartbeat`` per period for every attempt this process holds (running, or
  finished but not yet acknowledged): extends leases, reports skew, hears ``cancel`` / ``lost``. A failed one
  is retried after a short pause, so the leases are renewed as soon as the database is back.
* **completer** -- drains the result queue into one ``d2_complete`` call, lingering a poll period after the first
  result so that handlers finishing close together share it; results that could not be sent
  (database down) stay queued and are sent again -- a completion is never dropped, and a stale one is
  refused by the fence, not by luck.
* **lease watchdog** -- by the monotonic clock (lease.py): an attempt whose lease can no longer be trusted
  gets ``ctx.cancelled``; the handler should stop, and its writes will be refused if it does not. When and why
  it stopped trusting it, and when its handler returned, are reported with the completion (``lease_distrust``).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from reference_impl import db, processes
from reference_impl.handlers import HANDLERS, JobContext
from reference_impl.lease import POOL_LEASE_SECONDS, SAFETY_MARGIN_FRACTION, Lease, heartbeat_period

log = logging.getLogger("d2kit.worker")

# psycopg's own placeholders: these go through db.driver_connection, not SQLAlchemy, and arrays go in binary, cast
# to their types (%b; both explained there).
CLAIM_SQL = "SELECT * FROM d2_claim(%(pool)s, %(worker)s, %(n)s, %(lease)s, %(ahead)s)"
HEARTBEAT_SQL = ("SELECT * FROM d2_heartbeat(%(worker)s, CAST(%(tokens)b AS bigint[]),"
                 " CAST(%(started)b AS timestamptz[]), %(lease)s, %(clock)s)")
COMPLETE_SQL = ("SELECT * FROM d2_complete(CAST(%(tokens)b AS bigint[]), CAST(%(ok)b AS boolean[]),"
                " CAST(%(errors)b AS text[]), CAST(%(started)b AS timestamptz[]))")
DISTRUST_SQL = (
    "INSERT INTO lease_distrust (token, worker_id, source, distrusted_by, handler_stopped_by)"
    " SELECT t, %(worker)s, s, d, h FROM unnest(CAST(%(tokens)s AS bigint[]), CAST(%(sources)s AS text[]),"
    " CAST(%(distrusted)s AS timestamptz[]), CAST(%(stopped)s AS timestamptz[])) AS x (t, s, d, h)"
    " ON CONFLICT (token) DO NOTHING")
RETRY_PAUSE_SECONDS = 0.5  # after a database error, before trying again
COMPLETION_BATCH = 32  # the completer stops lingering once this many results wait (see _complete_loop)
# Claim what comes due within two poll periods: one is the wait before the next claim, the other covers that
# claim's own round trip and the scheduling delays of a busy machine.
CLAIM_AHEAD_POLLS = 2
# The hung-handler drill's negative control only: the worker does not act on 'timeout', so a hung handler keeps its
# slot (the database still ends the attempt timed_out once the lease it stops renewing runs out).
IGNORE_MAX_RUNTIME = os.environ.get("D2KIT_UNSAFE_IGNORE_MAX_RUNTIME") == "1"


@dataclass
class Held:
    """An attempt this process holds: its context, its lease as this process sees it, its timing."""
    ctx: JobContext
    handler: str
    lease: Lease
    dispatched_at: datetime
    claim_sent: float  # monotonic time the claim was sent
    claimed_at: float  # monotonic time the claim returned
    ready_at: datetime  # not before: the claim may hand over a row a little before it is due (claim ahead)
    started_at: datetime | None = None
    distrusted: tuple[str, float] | None = None  # why and when (monotonic) this worker stopped trusting the lease
    returned_at: float | None = None  # monotonic time the handler returned
    finished: bool = False
    timeout_at: float | None = None  # monotonic time the database first answered 'timeout' for it
    abandoned: bool = False
    thread: threading.Thread | None = None

    def on_database_clock_by(self, moment: float) -> datetime:
        """A monotonic moment of this process as an upper bound on the database clock: the claim's now() was read
        after the claim was sent, so the database's time then was at most dispatched_at."""
        return self.dispatched_at + timedelta(seconds=moment - self.claim_sent)

    def on_database_clock_at_least(self, moment: float) -> datetime:
        """A monotonic moment of this process as a lower bound on the database clock: dispatched_at was read before
        the claim returned."""
        return self.dispatched_at + timedelta(seconds=moment - self.claimed_at)

    @property
    def due_when_claimed(self) -> bool:
        return self.ready_at <= self.dispatched_at  # both read on the database clock

    def seconds_until_ready(self) -> float:
        """How long to wait so that the handler starts no earlier than ready_at on the database clock."""
        return (self.ready_at - self.on_database_clock_at_least(time.monotonic())).total_seconds()

    def distrust(self, source: str) -> None:
        """Stop trusting the lease (once: the first reason is the one reported) and ask the handler to stop."""
        self.lease.trusted = False
        self.distrusted = self.distrusted or (source, time.monotonic())
        self.ctx.cancelled.set()


@dataclass(frozen=True)
class WorkerConfig:
    worker_id: str
    pool: str = "short"
    concurrency: int = 16
    lease_seconds: float | None = None      # default: the pool's (lease.POOL_LEASE_SECONDS)
    heartbeat_seconds: float | None = None  # default: lease.heartbeat_period
    poll_seconds: float = 0.05
    claim_batch: int = 64
    claim_ahead_seconds: float | None = None  # default: CLAIM_AHEAD_POLLS poll periods; 0 claims only what is due
    shutdown_grace_seconds: float = processes.SHUTDOWN_GRACE_SECONDS
    # Abandoned handler threads still alive at which the worker recycles itself; default a quarter of the slots,
    # so at least three quarters of the process still do useful work before it does.
    max_abandoned: int | None = None

    def __post_init__(self) -> None:
        for name in ("concurrency", "lease", "poll_seconds", "claim_batch", "shutdown_grace_seconds",
                     "abandoned_limit"):
            if getattr(self, name) <= 0:
                raise ValueError(f"WorkerConfig.{name} must be > 0, got {getattr(self, name)}")
        if self.claim_ahead < 0:
            raise ValueError(f"WorkerConfig.claim_ahead_seconds must be >= 0, got {self.claim_ahead}")
        trusted_for = self.lease * (1 - SAFETY_MARGIN_FRACTION)
        if self.heartbeat_every >= trusted_for:
            # The worker would stop trusting every lease before its next heartbeat could renew it.
            raise ValueError(f"WorkerConfig.heartbeat_seconds ({self.heartbeat_every:g}) must be shorter than the "
                             f"part of the lease a worker trusts ({trusted_for:g} s of lease_seconds "
                             f"{self.lease:g})")

    @property
    def lease(self) -> float:
        return self.lease_seconds or POOL_LEASE_SECONDS[self.pool]

    @property
    def claim_ahead(self) -> float:
        if self.claim_ahead_seconds is not None:
            return self.claim_ahead_seconds
        return CLAIM_AHEAD_POLLS * self.poll_seconds

    @property
    def heartbeat_every(self) -> float:
        return self.heartbeat_seconds or heartbeat_period(self.lease)

    @property
    def abandoned_limit(self) -> int:
        return self.max_abandoned if self.max_abandoned is not None else -(-self.concurrency // 4)


class Worker:
    def __init__(self, url: str, config: WorkerConfig):
        self.config = config
        # Handlers write through ``engine`` (their own transactions); the claim, heartbeat and completion loops
        # each send one statement per call through ``calls``.
        self.engine = db.make_engine(url, pool_size=4 + config.concurrency,
                                     application_name=f"d2-worker-{config.worker_id}")
        self.calls = db.make_engine(url, pool_size=3, application_name=f"d2-worker-{config.worker_id}",
                                    single_statement=True)
        self.stop = threading.Event()
        self.held: dict[int, Held] = {}
        self.lock = threading.Lock()
        self.slot_freed = threading.Event()
        self.results: queue.Queue[tuple[int, bool, str | None]] = queue.Queue()
        self.claimed: queue.SimpleQueue[Held] = queue.SimpleQueue()  # for the handler threads
        self.abandoned: list[threading.Thread] = []  # handler threads given up on; alive ones are leaked
        self.recycling = False

    def leaked(self) -> int:
        """Abandoned handler threads still running (one whose hang ended by itself no longer counts)."""
        with self.lock:
            self.abandoned = [thread for thread in self.abandoned if thread.is_alive()]
            return len(self.abandoned)

    # -- claimer ---------------------------------------------------------------------------------
    def run(self) -> int:
        """Serve the pool until asked to stop (returns 0), or until leaked threads make it recycle
        (returns ``processes.RECYCLE_EXIT``)."""
        cfg = self.config
        self._until_registered()
        threads = [threading.Thread(target=loop, name=loop.__name__, daemon=True)
                   for loop in (self._heartbeat_loop, self._complete_loop, self._watch_leases)]
        for thread in threads:
            thread.start()
        for _ in range(cfg.concurrency):
            self._start_handler_thread()
        while not self.stop.is_set():
            if self.leaked() >= cfg.abandoned_limit:
                log.error("%d abandoned handler threads are still running: recycling this worker", self.leaked())
                self.recycling = True
                break
            free = cfg.concurrency - self._busy_slots()
            if free <= 0:
                self.slot_freed.wait(cfg.poll_seconds)
                self.slot_freed.clear()
                continue
            want = min(free, cfg.claim_batch)
            try:
                claimed = self._claim(want)
            except Exception as exc:  # database unreachable or restarting: keep trying
                log.warning("claim failed: %s", processes.describe_error(exc))
                self.stop.wait(RETRY_PAUSE_SECONDS)
                continue
            for held in claimed:
                self.claimed.put(held)
            # Go again at once only when a full batch was all due already: more due work may be waiting. A batch
            # that reached into the claim-ahead window has taken everything due (the claim puts due rows first).
            if len(claimed) < want or not all(held.due_when_claimed for held in claimed):
                self.stop.wait(cfg.poll_seconds)
        if self.recycling:
            self._finish_in_flight()
        self.stop.set()
        drain_started = time.monotonic()
        self._drain()
        log.info("drained in %.1f s%s", time.monotonic() - drain_started,
                 f"; {len(self.held)} attempts still held, left to their leases" if self._holding() else "")
        processes.mark_stopped(self.engine, cfg.worker_id)
        self.engine.dispose()
        self.calls.dispose()
        return processes.RECYCLE_EXIT if self.recycling else 0

    def _until_registered(self) -> None:
        while not self.stop.is_set():
            try:
                processes.register(self.engine, self.config.worker_id, "worker", self.config.pool)
                return
            except Exception as exc:
                log.warning("cannot register yet: %s", processes.describe_error(exc))
                self.stop.wait(RETRY_PAUSE_SECONDS)

    def _claim(self, want: int) -> list[Held]:
        cfg = self.config
        sent_at = time.monotonic()
        with db.driver_connection(self.calls) as conn:
            rows = conn.execute(CLAIM_SQL, {"pool": cfg.pool, "worker": cfg.worker_id, "n": want,
                                            "lease": cfg.lease, "ahead": cfg.claim_ahead}).fetchall()
        claimed = []
        with self.lock:
            for token, occurrence_id, job_id, fire_at, ready_at, attempt, handler, payload, dispatched_at, _ in rows:
                ctx = JobContext(token=token, occurrence_id=occurrence_id, job_id=job_id, fire_at=fire_at,
                                 attempt=attempt, payload=payload, engine=self.engine)
                held = Held(ctx, handler, Lease(cfg.lease, sent_at), dispatched_at, sent_at, time.monotonic(),
                            ready_at)
                self.held[ctx.token] = held
                claimed.append(held)
        return claimed

    def _busy_slots(self) -> int:
        with self.lock:
            return sum(1 for h in self.held.values() if not h.finished)

    # -- executor --------------------------------------------------------------------------------
    def _start_handler_thread(self) -> None:
        threading.Thread(target=self._handler_thread, name="handler", daemon=True).start()

    def _handler_thread(self) -> None:
        """Runs claimed attempts one after another, until one of them is abandoned: this thread is then left to
        its hung handler (and ends if that ever returns); another has taken its place."""
        while True:
            held = self.claimed.get()
            with self.lock:
                if held.abandoned:  # given up on before it started: nothing to run
                    continue
                held.thread = threading.current_thread()
            self._execute(held)
            if held.abandoned:
                return

    def _execute(self, held: Held) -> None:
        # Claimed ahead: wait for ready_at, by the same lower bound on the database clock, so the handler never
        # starts early whatever this machine's wall clock says. Cancelled meanwhile (or its lease distrusted), it
        # never starts at all: the attempt ends failed, and the database decides what follows, as for any other.
        if (wait := held.seconds_until_ready()) > 0 and held.ctx.cancelled.wait(wait):
            ok, error = False, "stopped before its due time: never started"
        else:
            ok, error = self._run_handler(held)
        held.returned_at = time.monotonic()
        with self.lock:
            if held.abandoned:  # already completed for it, and its slot given back
                return
            held.finished = True
        self.slot_freed.set()
        self.results.put((held.ctx.token, ok, error))

    def _run_handler(self, held: Held) -> tuple[bool, str | None]:
        # Handler start on the database clock: dispatch time (database) + time elapsed here since the claim
        # returned (monotonic). A lower bound -- it never lands after the database's finished_at.
        held.started_at = held.on_database_clock_at_least(time.monotonic())
        try:
            HANDLERS[held.handler].run(held.ctx)
        except Exception as exc:
            return False, f"{type(exc).__name__}: {exc}"
        return True, None

    # -- heartbeater -----------------------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        cfg = self.config
        while not self.stop.is_set() or self._holding():
            with self.lock:
                tokens = list(self.held)
                started = [self.held[t].started_at for t in tokens]
            sent_at = time.monotonic()
            try:
                with db.driver_connection(self.calls) as conn:
                    answers = conn.execute(HEARTBEAT_SQL, {
                        "worker": cfg.worker_id, "tokens": tokens, "started": started,
                        "lease": cfg.lease, "clock": processes.wall_now()}).fetchall()
            except Exception as exc:
                down = processes.database_down(exc)
                log.warning("heartbeat failed (%d attempts held%s): %s", len(tokens),
                            "; the database says it is down" if down else "", processes.describe_error(exc))
                if down:
                    with self.lock:
                        for token in tokens:
                            if token in self.held:
                                self.held[token].lease.database_down(sent_at)
                time.sleep(RETRY_PAUSE_SECONDS)
                continue
            with self.lock:
                for token, status in answers:
                    held = self.held.get(token)
                    if held is None:
                        continue
                    if status == "lost":
                        held.distrust("database")
                    else:
                        held.lease.renewed(sent_at)
                        if status == "cancel":
                            held.ctx.cancelled.set()
                        elif status == "timeout" and held.timeout_at is None and not IGNORE_MAX_RUNTIME:
                            log.warning("token %d ran past its max runtime: stopping its handler", token)
                            held.timeout_at = sent_at
                            held.ctx.cancelled.set()
            time.sleep(cfg.heartbeat_every)

    def _holding(self) -> bool:
        with self.lock:
            return bool(self.held)

    # -- lease watchdog --------------------------------------------------------------------------
    def _watch_leases(self) -> None:
        # A quarter of the safety margin: the lease is distrusted at most that late, well before it can expire.
        period = self.config.lease * SAFETY_MARGIN_FRACTION / 4
        watchdog = os.environ.get("D2KIT_UNSAFE_DISABLE_WATCHDOG") != "1"  # worker-partition's negative control
        while not self.stop.is_set() or self._holding():
            now = time.monotonic()
            with self.lock:
                for held in self.held.values():
                    if watchdog and held.lease.trusted and not held.lease.check(now):
                        log.warning("lease of token %d no longer trusted: stopping its handler", held.ctx.token)
                        held.distrust("monotonic_clock")
                    if (held.timeout_at is not None and not held.finished
                            and now - held.timeout_at >= self.config.heartbeat_every):
                        self._abandon(held)
            time.sleep(period)

    def _abandon(self, held: Held) -> None:
        """A handler past its max runtime ignored ``ctx.cancelled`` for a heartbeat period: give its slot back and
        complete its attempt (the database records it timed_out). Called with the lock held."""
        log.error("token %d: handler did not stop within %g s of its max runtime: abandoning its thread",
                  held.ctx.token, self.config.heartbeat_every)
        held.abandoned = held.finished = True
        if held.thread is not None:
            self.abandoned.append(held.thread)
            self._start_handler_thread()  # the slot's new thread; the abandoned one is left to its handler
        self.slot_freed.set()
        self.results.put((held.ctx.token, False, f"max runtime exceeded: the handler did not stop within "
                                                 f"{self.config.heartbeat_every:g} s of being cancelled; abandoned"))

    # -- completer -------------------------------------------------------------------------------
    def _complete_loop(self) -> None:
        unsent: list[tuple[int, bool, str | None]] = []
        while not self.stop.is_set() or self._holding():
            if not unsent:
                try:
                    unsent.append(self.results.get(timeout=0.1))
                except queue.Empty:
                    continue
                # Linger up to one poll period for more: handlers claimed ahead finish one by one, each at its own
                # due time, and sent at once each would cost a round trip and a commit of its own (measured at
                # 833/s: 0.84 completion calls per execution instead of 0.07, twice the CPU). Not past
                # COMPLETION_BATCH: under a backlog larger calls cost the database more per row (draining 20,000,
                # single runs: 4,500/s lingering 50 ms unbounded, 7,600 stopping at 32). A slot is freed when its
                # handler returns, not when this is sent, so the linger delays only the record.
                until = time.monotonic() + self.config.poll_seconds
                while len(unsent) < COMPLETION_BATCH and (left := until - time.monotonic()) > 0:
                    try:
                        unsent.append(self.results.get(timeout=left))
                    except queue.Empty:
                        break
            while True:  # everything that finished meanwhile goes in the same round trip
                try:
                    unsent.append(self.results.get_nowait())
                except queue.Empty:
                    break
            if self._send_completions(unsent):
                unsent = []
            else:
                time.sleep(RETRY_PAUSE_SECONDS)

    def _send_completions(self, batch: list[tuple[int, bool, str | None]]) -> bool:
        with self.lock:
            started = [self.held[token].started_at for token, _, _ in batch]
            distrusted = [self.held[token] for token, _, _ in batch if self.held[token].distrusted]
        try:
            with db.driver_connection(self.calls) as conn:
                if distrusted:  # the evidence first: a completion may be refused, the report of distrust is kept
                    conn.execute(DISTRUST_SQL, {
                        "worker": self.config.worker_id, "tokens": [h.ctx.token for h in distrusted],
                        "sources": [h.distrusted[0] for h in distrusted],
                        "distrusted": [h.on_database_clock_by(h.distrusted[1]) for h in distrusted],
                        "stopped": [h.returned_at and h.on_database_clock_by(h.returned_at) for h in distrusted]})
                answers = conn.execute(COMPLETE_SQL, {
                    "tokens": [b[0] for b in batch], "ok": [b[1] for b in batch],
                    "errors": [b[2] for b in batch], "started": started}).fetchall()
        except Exception as exc:
            log.warning("completion of %d attempts not sent yet: %s", len(batch), processes.describe_error(exc))
            return False
        with self.lock:
            for token, accepted in answers:
                if not accepted:
                    log.warning("completion of token %d refused: stale fencing token", token)
                self.held.pop(token, None)
        return True

    # -- shutdown --------------------------------------------------------------------------------
    def _finish_in_flight(self) -> None:
        """Recycling: no new claims, and the handlers still running finish as they would have -- a long job is not
        cut short by a neighbour's hang; one that hangs too is abandoned at its own max runtime."""
        while self._busy_slots() and not self.stop.is_set():  # SIGTERM meanwhile: the usual graceful drain
            time.sleep(0.05)

    def _drain(self) -> None:
        """Graceful stop: no new claims; give handlers a grace period, then ask them to stop."""
        deadline = time.monotonic() + self.config.shutdown_grace_seconds
        while self._busy_slots() and time.monotonic() < deadline:
            time.sleep(0.05)
        with self.lock:
            for held in self.held.values():
                held.ctx.cancelled.set()
        deadline = time.monotonic() + self.config.shutdown_grace_seconds
        while self._holding() and time.monotonic() < deadline:
            time.sleep(0.05)
