"""What the API returns, as documented in /openapi.json. Requests are ``jobs.JobSpec``, shared with the CLI."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from reference_impl import policies, states


class Problem(BaseModel):
    """Every non-validation error: one sentence saying what is wrong."""

    detail: str = Field(examples=["job 42 not found"])


class Job(BaseModel):
    id: int
    tenant_id: str
    name: str
    handler: str
    payload: dict[str, Any]
    pool: str
    schedule_kind: Literal["once", "cron"]
    run_at: datetime | None
    cron: str | None
    timezone: str
    dst_gap: str
    dst_overlap: str
    misfire_policy: str
    catchup_window_seconds: int
    max_catchup: int
    overlap_policy: str
    delivery: Literal[policies.DELIVERY] = Field(description="at_least_once retries a lost attempt; at_most_once "
                                                 "records its occurrence dead instead.")
    max_attempts: int
    retry_base_seconds: float
    max_runtime_seconds: float | None = Field(description="Past it an attempt is cancelled, then timed_out; "
                                              "null: the pool's default.")
    idempotency_key: str | None
    paused: bool
    deleted_at: datetime | None = Field(description="Set once deleted: nothing fires after it.")
    materialized_through: datetime = Field(description="Every fire time up to here has its occurrence row.")
    next_fire_at: datetime | None = Field(description="Null when nothing is left to fire.")
    schedule_error: str | None = Field(description="Why the scheduler could not plan this job's next fire "
                                       "times; it retries every minute. Null when all is well.")
    created_at: datetime
    routed_pool: str | None = Field(description="Where its next occurrences go instead of `pool`: 'long' once the "
                                    "p95 of its recent run times reaches the short pool's bound. Null: `pool`.")


class Attempt(BaseModel):
    token: int = Field(description="Fencing token: only this attempt may complete the occurrence while current.")
    attempt: int
    worker_id: str
    state: Literal[states.ATTEMPT_STATES]
    dispatched_at: datetime
    started_at: datetime | None
    heartbeat_at: datetime | None
    lease_expires_at: datetime = Field(description="Database clock.")
    finished_at: datetime | None
    error: str | None


class Occurrence(BaseModel):
    id: int
    fire_at: datetime = Field(description="The scheduled instant; unique per job.")
    trigger: Literal[states.TRIGGERS]
    state: Literal[states.OCCURRENCE_STATES]
    attempts: int
    current_token: int | None
    reason: str | None = Field(description="Why it was skipped, died or was cancelled.")
    finished_at: datetime | None
    attempt_log: list[Attempt]


class OccurrencePage(BaseModel):
    job_id: int
    occurrences: list[Occurrence] = Field(description="Newest fire time first.")
    next_before: datetime | None = Field(description="Pass as `before` for the next (older) page; null on the last.")


class JobPage(BaseModel):
    jobs: list[Job] = Field(description="Newest first.")
    next_before: int | None = Field(description="Pass as `before` for the next (older) page; null on the last.")


class Triggered(BaseModel):
    job_id: int
    occurrence_id: int = Field(description="The manual occurrence; follow it under /occurrences.")
    state: Literal["ready", "waiting", "skipped"] = Field(
        description="ready: runs now; waiting: queued behind an unfinished run (overlap policy buffer_* or "
                    "cancel_other); skipped: not run (overlap policy skip or a full buffer), see reason.")
    reason: str | None = Field(description="Why it was skipped; null otherwise.")
