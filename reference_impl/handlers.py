"""Job handlers: what a worker runs for an occurrence.

A handler is a function ``handler(ctx: JobContext) -> None``; raising marks the attempt failed (it is
retried with backoff until ``max_attempts``, unless the job is ``at_most_once``). Register one with
``@handler("name")``, optionally with a ``validate(payload)`` that raises ``ValueError`` naming the bad
field -- it runs at submission, so a bad payload is a 422 instead of a dead job at 3 a.m.

Handlers get a stable ``ctx.idempotency_key`` (same for every retry of one occurrence) and the attempt's
fencing token ``ctx.token``; a handler with side effects passes the token to its write path
(``ctx.fenced_ledger_write`` shows how) so a stale attempt's late write is refused by the storage.
``ctx.cancelled`` is set when the job is cancelled or the worker stopped trusting its lease: long
handlers should check it.

To add one: write the function in this module (or a module imported by it), decorate it, done:

    @handler("send_report", validate=require_fields("recipient"))
    def send_report(ctx):
        ...
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, text


class Cancelled(Exception):
    """Raised by a handler that stopped because ``ctx.cancelled`` was set."""


class StaleToken(Exception):
    """The job's own write path refused this attempt's fencing token."""


@dataclass
class JobContext:
    token: int
    occurrence_id: int
    job_id: int
    fire_at: datetime
    attempt: int
    payload: dict[str, Any]
    engine: Engine
    cancelled: threading.Event = field(default_factory=threading.Event)

    @property
    def idempotency_key(self) -> str:
        return f"job-{self.job_id}@{self.fire_at.isoformat()}"

    def charge(self, account: str, amount: int) -> str:
        """Charge once per occurrence: deduplicated by ``idempotency_key`` and fenced by ``token`` (d2_charge).
        Returns 'applied', 'duplicate' (an earlier attempt already charged: success) or 'stale'."""
        with self.engine.begin() as conn:
            if os.environ.get("D2KIT_UNSAFE_DISABLE_DEDUP") == "1":  # negative control only: the token alone
                conn.execute(text("SET LOCAL d2.unsafe_disable_dedup = on"))
            return conn.execute(text("SELECT d2_charge(:k, :a, :n, :t)"), {
                "k": self.idempotency_key, "a": account, "n": amount, "t": self.token}).scalar_one()

    def fenced_ledger_write(self, key: str, value: str) -> bool:
        """Write through the fence: refused (False) if a higher token already wrote ``key``."""
        with self.engine.begin() as conn:
            if os.environ.get("D2KIT_UNSAFE_DISABLE_FENCING") == "1":  # drills' negative control only
                conn.execute(text("SET LOCAL d2.unsafe_disable_fencing = on"))
            return bool(conn.execute(text("SELECT d2_fenced_ledger_write(:k, :v, :t)"),
                                     {"k": key, "v": value, "t": self.token}).scalar())


Handler = Callable[[JobContext], None]


@dataclass(frozen=True)
class Registered:
    run: Handler
    validate: Callable[[dict[str, Any]], None]


HANDLERS: dict[str, Registered] = {}


def _accept_anything(payload: dict[str, Any]) -> None:
    return None


def handler(name: str, validate: Callable[[dict[str, Any]], None] = _accept_anything):
    def register(fn: Handler) -> Handler:
        HANDLERS[name] = Registered(fn, validate)
        return fn
    return register


def _number(payload: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = payload.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ValueError(f"payload.{key} must be a number between {low} and {high}")
    return float(value)


def _work_seconds(ctx: JobContext, default: float, high: float) -> float:
    """``payload.seconds``, or ``payload.first_attempt_seconds`` for the first attempt when given: a stalled first
    attempt and a quick retry (the worker-partition drill)."""
    seconds = _number(ctx.payload, "seconds", default, 0, high)
    if ctx.attempt == 1:
        seconds = _number(ctx.payload, "first_attempt_seconds", seconds, 0, high)
    return seconds


def _validate_sleep(payload: dict[str, Any]) -> None:
    _number(payload, "seconds", 1, 0, 7 * 24 * 3600)
    _number(payload, "first_attempt_seconds", 1, 0, 7 * 24 * 3600)


def _validate_fail_n(payload: dict[str, Any]) -> None:
    _number(payload, "n", 1, 0, 100)


def _validate_ledger(payload: dict[str, Any]) -> None:
    _number(payload, "seconds", 0, 0, 24 * 3600)
    _number(payload, "first_attempt_seconds", 0, 0, 24 * 3600)
    if not isinstance(payload.get("value", ""), str):
        raise ValueError("payload.value must be a string")


@handler("noop")
def noop(ctx: JobContext) -> None:
    """Does nothing: the load tests and benchmarks measure the scheduler, not the job."""


@handler("sleep", validate=_validate_sleep)
def sleep(ctx: JobContext) -> None:
    """Sleeps ``payload.seconds`` (default 1), stopping early if cancelled: a handler that cooperates.
    ``payload.first_attempt_seconds``, when given, is how long the FIRST attempt sleeps (worker-partition drill)."""
    if ctx.cancelled.wait(_work_seconds(ctx, 1, 7 * 24 * 3600)):
        raise Cancelled("cancelled while sleeping")


@handler("hang", validate=_validate_sleep)
def hang(ctx: JobContext) -> None:
    """Blocks ``payload.seconds`` (default 1) and never looks at ``ctx.cancelled``: a hung handler (an endless
    loop, a call without a timeout). Only the max runtime gets its slot back: the worker abandons it."""
    threading.Event().wait(_number(ctx.payload, "seconds", 1, 0, 7 * 24 * 3600))


def _validate_charge(payload: dict[str, Any]) -> None:
    _number(payload, "amount", 1, 1, 1_000_000)
    _number(payload, "first_attempt_seconds", 0, 0, 24 * 3600)
    if not isinstance(payload.get("account", "demo"), str):
        raise ValueError("payload.account must be a string")


@handler("charge", validate=_validate_charge)
def charge(ctx: JobContext) -> None:
    """Charges ``payload.amount`` (default 1) to ``payload.account`` at once, then works: the first attempt for
    ``payload.first_attempt_seconds`` (default 0), so a stalled first attempt charges BEFORE its retry does --
    the case a fencing token cannot catch and the idempotency-key dedup does (d2_charge)."""
    outcome = ctx.charge(str(ctx.payload.get("account", "demo")), int(_number(ctx.payload, "amount", 1, 1, 1_000_000)))
    if outcome == "stale":
        raise StaleToken(f"charge refused token {ctx.token} for {ctx.idempotency_key}")
    if ctx.attempt == 1:
        threading.Event().wait(_number(ctx.payload, "first_attempt_seconds", 0, 0, 24 * 3600))


@handler("fail_n", validate=_validate_fail_n)
def fail_n(ctx: JobContext) -> None:
    """Fails its first ``payload.n`` attempts (default 1), then succeeds: exercises retries and dead."""
    n = int(_number(ctx.payload, "n", 1, 0, 100))
    if ctx.attempt <= n:
        raise RuntimeError(f"fail_n: failing attempt {ctx.attempt} of the first {n}")


@handler("ledger_write", validate=_validate_ledger)
def ledger_write(ctx: JobContext) -> None:
    """Works for ``payload.seconds``, then writes ``payload.value`` to the ledger under the occurrence's
    idempotency key, through the fence. It deliberately does NOT check ``ctx.cancelled`` before writing:
    it stands for a process that was paused or partitioned and cannot know it lost its lease -- the case
    only the storage-side fence can catch. ``payload.first_attempt_seconds``, when given, is how long the
    FIRST attempt works: a stalled first attempt whose write lands after its retry's (worker-partition drill)."""
    seconds = _work_seconds(ctx, 0, 24 * 3600)
    if seconds:
        threading.Event().wait(seconds)
    value = str(ctx.payload.get("value", f"written by token {ctx.token}"))
    if not ctx.fenced_ledger_write(ctx.idempotency_key, value):
        raise StaleToken(f"ledger refused token {ctx.token} for {ctx.idempotency_key}")
