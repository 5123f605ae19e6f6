"""Submitting and managing jobs: validation (shared by the CLI and the HTTP API) and the writes.

Validation happens before anything is written and names the field that is wrong; a job is one INSERT,
so an error can never leave half a job behind.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from sqlalchemy import Connection, text

from reference_impl import policies, schedule, states
from reference_impl.handlers import HANDLERS

MAX_PAYLOAD_BYTES = 64 * 1024
MAX_SCHEDULE_AHEAD = timedelta(days=10 * 365)
# Jobs expected to run this long or longer go to the 'long' pool; so do recurring jobs whose recent runs' p95 is
# this long (router.py), whatever they declared.
LONG_POOL_FROM = timedelta(minutes=1)


class JobSpec(BaseModel):
    """What a tenant asks for. Exactly one of ``run_at`` (one-shot) or ``cron`` (recurring)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    handler: str = Field(description="A registered handler: " + ", ".join(sorted(HANDLERS)))
    # validate_default: a handler that requires payload fields must see an omitted payload too
    payload: dict[str, Any] = Field(default_factory=dict, validate_default=True)
    run_at: datetime | None = Field(None, description="One-shot: when to run (ISO 8601 with offset).")
    # validate_default: "neither run_at nor cron" is reported on this field, so it needs to run on None
    cron: str | None = Field(None, validate_default=True, description=(
        "Recurring: 5 fields, or 6 with seconds last. A field may be hashed, as Jenkins' H: 'H', 'H(a-b)' or "
        "'H/n' take a value hashed from the job's name, so a fleet spreads out; stored and shown resolved."))
    timezone: str = Field("UTC", description="IANA time zone the cron expression is read in.")
    dst_gap: Literal[states.DST_GAP] = "shift"
    dst_overlap: Literal[states.DST_OVERLAP] = "first"
    misfire_policy: Literal[policies.MISFIRE_POLICIES] = "run_once"
    catchup_window_seconds: int = Field(86_400, ge=1, le=366 * 86_400)
    max_catchup: int = Field(100, ge=1, le=policies.MAX_CATCHUP_LIMIT)
    overlap_policy: Literal[policies.OVERLAP_POLICIES] = "allow"
    pool: Literal[states.POOLS] | None = Field(None, description="Defaults from expected_duration_seconds.")
    expected_duration_seconds: float | None = Field(None, ge=0, le=7 * 86_400)
    delivery: Literal[policies.DELIVERY] = Field("at_least_once", description=(
        "What a lost attempt (worker killed or cut off) means: at_least_once retries it; at_most_once never "
        "starts the occurrence twice, so an attempt that does not succeed makes it dead with the reason."))
    # validate_default: the default depends on delivery, which is declared above so it is validated first
    max_attempts: int | None = Field(None, ge=1, le=25, validate_default=True,
                                     description="Default 3; at_most_once: 1, the only value it allows.")
    retry_base_seconds: float = Field(1.0, ge=0, le=3600)
    max_runtime_seconds: float | None = Field(None, gt=0, le=7 * 86_400,
                                              description="Defaults to the pool's (10 minutes short, 7 hours long).")
    idempotency_key: str | None = Field(None, min_length=1, max_length=200)

    @field_validator("handler")
    @classmethod
    def _known_handler(cls, value: str) -> str:
        if value not in HANDLERS:
            raise ValueError(f"unknown handler '{value}'; registered: {', '.join(sorted(HANDLERS))}")
        return value

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: 'America' is a directory, name too long
            raise ValueError(f"unknown IANA time zone '{value}'") from None
        return value

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str | None, info: ValidationInfo) -> str | None:
        # Cross-field checks live on a field so the error names one; a bad run_at is reported on its own.
        if "run_at" in info.data and (info.data["run_at"] is None) == (value is None):
            raise ValueError("give exactly one of run_at (one-shot) or cron (recurring)")
        if value is not None:
            value = schedule.resolve_hashed(value, info.data.get("name", ""))
            schedule.validate_cron(value)
        return value

    @field_validator("max_attempts")
    @classmethod
    def _attempts_fit_delivery(cls, value: int | None, info: ValidationInfo) -> int:
        if info.data.get("delivery") == "at_most_once":
            if value not in (None, 1):
                raise ValueError("an at_most_once job is attempted once: leave max_attempts out or set it to 1")
            return 1
        return 3 if value is None else value

    @field_validator("run_at")
    @classmethod
    def _aware_and_sane(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("run_at needs a UTC offset, e.g. 2026-11-29T09:00:00Z")
        if abs(value - datetime.now(UTC)) > MAX_SCHEDULE_AHEAD:
            raise ValueError("run_at is more than 10 years away")
        return value.astimezone(UTC)

    @field_validator("payload")
    @classmethod
    def _small_valid_payload(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        size = len(json.dumps(value, separators=(",", ":")).encode())
        if size > MAX_PAYLOAD_BYTES:
            raise ValueError(f"payload is {size} bytes; the limit is {MAX_PAYLOAD_BYTES}")
        if info.data.get("handler") in HANDLERS:  # an unknown handler is reported on its own field
            HANDLERS[info.data["handler"]].validate(value)
        return value

    def resolved_pool(self) -> str:
        if self.pool:
            return self.pool
        expected = self.expected_duration_seconds or 0
        return "long" if expected >= LONG_POOL_FROM.total_seconds() else "short"

    def to_schedule(self) -> schedule.Schedule:
        return schedule.Schedule(kind="cron" if self.cron else "once", run_at=self.run_at, cron=self.cron,
                                 timezone=self.timezone, dst_gap=self.dst_gap, dst_overlap=self.dst_overlap)


def unstorable_values(spec: JobSpec) -> list[tuple[tuple[str | int, ...], str]]:
    """Values that parse but PostgreSQL cannot store -- NUL in a string, NaN or Infinity in a number -- pass
    pydantic; find them (with their field path) so callers refuse them instead of failing inside the INSERT."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    pending: list[tuple[tuple[str | int, ...], Any]] = [((name,), value) for name, value in spec.model_dump().items()]
    while pending:  # iterative: a deeply nested payload must not exhaust the stack
        loc, value = pending.pop()
        if isinstance(value, str) and "\x00" in value:
            problems.append((loc, "contains a NUL character, which PostgreSQL cannot store"))
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append((loc, "must be a finite number (JSON has no NaN or Infinity)"))
        elif isinstance(value, dict):
            for key, item in value.items():
                pending += [((*loc, key), key), ((*loc, key), item)]
        elif isinstance(value, list):
            pending += [((*loc, i), item) for i, item in enumerate(value)]
    return sorted(problems, key=lambda p: [str(part) for part in p[0]])


JOB_COLUMNS = (
    "id, tenant_id, name, handler, payload, pool, schedule_kind, run_at, cron, timezone, dst_gap, dst_overlap,"
    " misfire_policy, extract(epoch FROM catchup_window)::int AS catchup_window_seconds, max_catchup,"
    " overlap_policy, delivery, max_attempts, retry_base_seconds,"
    " extract(epoch FROM max_runtime)::float8 AS max_runtime_seconds,"
    " idempotency_key, paused, deleted_at, materialized_through, next_fire_at, schedule_error, created_at,"
    " routed_pool"
)


def submit(conn: Connection, tenant_id: str, spec: JobSpec) -> tuple[dict[str, Any], bool]:
    """Create the job; with an idempotency key already used by this tenant, return that job instead.

    Returns (job, created). The cursor starts at the database's now(): a new cron job never
    "catches up" on fire times from before it existed.
    """
    if spec.idempotency_key is not None:
        existing = get(conn, tenant_id, key=spec.idempotency_key)
        if existing is not None:
            return existing, False
    db_now = conn.execute(text("SELECT now()")).scalar_one()
    sched = spec.to_schedule()
    if sched.kind == "once":
        through, next_fire = datetime.min.replace(tzinfo=UTC), spec.run_at
    else:
        through, next_fire = db_now, schedule.next_fire_after(sched, db_now)
    row = conn.execute(text(
        "INSERT INTO jobs (tenant_id, name, handler, payload, pool, schedule_kind, run_at, cron, timezone,"
        " dst_gap, dst_overlap, misfire_policy, catchup_window, max_catchup, overlap_policy, delivery,"
        " max_attempts, retry_base_seconds, max_runtime, idempotency_key, materialized_through, next_fire_at)"
        " VALUES (:tenant, :name, :handler, CAST(:payload AS jsonb), :pool, :kind, :run_at, :cron, :tz,"
        " :gap, :overlap, :misfire, make_interval(secs => :window), :max_catchup, :overlap_policy, :delivery,"
        " :max_attempts, :retry_base, make_interval(secs => :max_runtime), :key, :through, :next_fire)"
        " ON CONFLICT (tenant_id, idempotency_key) DO NOTHING RETURNING id"),
        {"tenant": tenant_id, "name": spec.name, "handler": spec.handler, "payload": json.dumps(spec.payload),
         "pool": spec.resolved_pool(), "kind": sched.kind, "run_at": spec.run_at, "cron": spec.cron,
         "tz": spec.timezone, "gap": spec.dst_gap, "overlap": spec.dst_overlap, "misfire": spec.misfire_policy,
         "window": spec.catchup_window_seconds, "max_catchup": spec.max_catchup,
         "overlap_policy": spec.overlap_policy, "delivery": spec.delivery, "max_attempts": spec.max_attempts,
         "retry_base": spec.retry_base_seconds, "max_runtime": spec.max_runtime_seconds,
         "key": spec.idempotency_key, "through": through,
         "next_fire": next_fire}).first()
    if row is None:  # lost a race with a concurrent submit of the same key: theirs is the job
        return get(conn, tenant_id, key=spec.idempotency_key), False
    return get(conn, tenant_id, job_id=row.id), True


def get(conn: Connection, tenant_id: str | None, *, job_id: int | None = None,
        key: str | None = None) -> dict[str, Any] | None:
    """A job by id or idempotency key, only if it belongs to ``tenant_id`` (None: any tenant, admin)."""
    where = "id = :id" if job_id is not None else "idempotency_key = :key"
    row = conn.execute(text(f"SELECT {JOB_COLUMNS} FROM jobs WHERE {where}"
                            " AND (CAST(:tenant AS text) IS NULL OR tenant_id = :tenant)"),
                       {"id": job_id, "key": key, "tenant": tenant_id}).mappings().first()
    return dict(row) if row else None


def set_paused(conn: Connection, job_id: int, paused: bool) -> None:
    """Pause or resume. Fire times that pass while paused are misfires on resume: the job's
    misfire_policy decides what runs, and the rest are recorded as skipped."""
    conn.execute(text("UPDATE jobs SET paused = :p WHERE id = :id AND deleted_at IS NULL"),
                 {"p": paused, "id": job_id})


def delete(conn: Connection, job_id: int) -> None:
    """Stop scheduling the job and cancel what is unfinished (running attempts cooperatively).
    Deleting a deleted job changes nothing: it keeps its first deleted_at."""
    deleted = conn.execute(text("UPDATE jobs SET deleted_at = now(), next_fire_at = NULL"
                                " WHERE id = :id AND deleted_at IS NULL"), {"id": job_id}).rowcount
    if deleted:
        conn.execute(text("SELECT d2_cancel_open(:id, 'job deleted')"), {"id": job_id})


def trigger(conn: Connection, job_id: int) -> dict[str, Any]:
    """Run the job once now, outside its schedule; its overlap policy decides the run like a scheduled one
    (d2_trigger in operations.sql). Returns the manual occurrence: its id, state and reason."""
    row = conn.execute(text("SELECT id, state, reason FROM d2_trigger(:id)"), {"id": job_id}).first()
    if row is None:
        raise JobDeleted(f"job {job_id} is deleted")
    return {"job_id": job_id, "occurrence_id": row.id, "state": row.state, "reason": row.reason}


class JobNotFound(LookupError):
    """No such job for this tenant -- another tenant's id included: ids reveal nothing."""


class JobDeleted(Exception):
    """The job is deleted: it can be read, not changed."""


def owned(conn: Connection, tenant_id: str | None, job_id: int, *, live: bool = False) -> dict[str, Any]:
    """The job if ``tenant_id`` may see it (None: any tenant); ``live`` also refuses a deleted one.
    The one lookup the API and the CLI make before acting on a job."""
    job = get(conn, tenant_id, job_id=job_id)
    if job is None:
        raise JobNotFound(f"job {job_id} not found")
    if live and job["deleted_at"] is not None:
        raise JobDeleted(f"job {job_id} is deleted")
    return job


def list_jobs(conn: Connection, tenant_id: str | None, *, name: str | None = None, paused: bool | None = None,
              deleted: bool = False, schedule_kind: str | None = None, limit: int = 50,
              before: int | None = None) -> tuple[list[dict[str, Any]], int | None]:
    """A tenant's jobs (None: every tenant's), newest first, filtered; ``before`` is the previous page's
    ``next_before`` (a job id). Returns (jobs, next_before), next_before None on the last page."""
    found = conn.execute(text(
        f"SELECT {JOB_COLUMNS} FROM jobs"
        " WHERE (CAST(:tenant AS text) IS NULL OR tenant_id = :tenant)"
        " AND (CAST(:name AS text) IS NULL OR name = :name)"
        " AND (CAST(:paused AS boolean) IS NULL OR paused = :paused)"
        " AND (deleted_at IS NOT NULL) = :deleted"
        " AND (CAST(:kind AS text) IS NULL OR schedule_kind = :kind)"
        " AND (CAST(:before AS bigint) IS NULL OR id < :before)"
        " ORDER BY id DESC LIMIT :limit"),
        {"tenant": tenant_id, "name": name, "paused": paused, "deleted": deleted, "kind": schedule_kind,
         "before": before, "limit": limit}).mappings().all()
    page = [dict(row) for row in found]
    return page, (page[-1]["id"] if len(page) == limit else None)
