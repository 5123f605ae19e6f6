"""The /v1 calls that matter, plus /healthz and /metrics.

Every job lookup is filtered by the caller's tenant, so another tenant's job id is a 404 exactly like
an id that does not exist: ids reveal nothing. Writes go through jobs.py, the same code as the CLI.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Header, Path, Query, Request, Response
from fastapi.responses import PlainTextResponse
from pydantic import AwareDatetime
from sqlalchemy import text

from reference_impl import jobs, states, status
from reference_impl.api import metrics
from reference_impl.api.auth import Session
from reference_impl.api.errors import field_error, reject_unstorable
from reference_impl.api.models import Job, JobPage, OccurrencePage, Problem, Triggered

UNAUTHORIZED = {401: {"model": Problem, "description": "No API key, or an unknown one."}}
v1 = APIRouter(prefix="/v1", tags=["jobs"], responses=UNAUTHORIZED)
ops = APIRouter(tags=["operations"])

JobId = Annotated[int, Path(ge=1, le=2**63 - 1, description="The job's id.")]
NOT_FOUND = {404: {"model": Problem, "description": "No such job for this tenant (another tenant's id included)."}}
DELETED = {409: {"model": Problem, "description": "The job is deleted."}}

CREATE_EXAMPLES = {
    "daily": {"summary": "Recurring: 09:00 Paris time, catch up once after an outage", "value": {
        "name": "daily-report", "handler": "noop", "cron": "0 9 * * *", "timezone": "Europe/Paris",
        "misfire_policy": "run_once", "overlap_policy": "skip"}},
    "once": {"summary": "One-shot, with an idempotency key", "value": {
        "name": "send-invoice-1042", "handler": "sleep", "payload": {"seconds": 2},
        "run_at": "2027-01-01T09:00:00Z", "idempotency_key": "invoice-1042"}},
    "long": {"summary": "A 6-hour job: the 'long' pool, so it never queues in front of short ones", "value": {
        "name": "nightly-rebuild", "handler": "sleep", "payload": {"seconds": 21600}, "cron": "0 1 * * *",
        "expected_duration_seconds": 21600, "overlap_policy": "skip", "max_attempts": 1}},
}
# A replay must ask for the same job; anything else is a client bug that silently reusing the job would hide.
REPLAY_FIELDS = ("name", "handler", "payload", "run_at", "cron", "timezone", "dst_gap", "dst_overlap",
                 "misfire_policy", "catchup_window_seconds", "max_catchup", "overlap_policy", "delivery",
                 "max_attempts", "retry_base_seconds", "max_runtime_seconds")


@v1.post("/jobs", status_code=201, response_model=Job, summary="Create a job (idempotent with a key)",
         responses={200: {"model": Job, "description": "Replay: this idempotency key already made this job; "
                                                       "nothing was written."},
                    400: {"model": Problem, "description": "The body is not UTF-8 text."},
                    413: {"model": Problem, "description": "Request body over 128 KiB."}})
def create_job(
    spec: Annotated[jobs.JobSpec, Body(openapi_examples=CREATE_EXAMPLES)],
    session: Session,
    response: Response,
    idempotency_key: Annotated[str | None, Header(
        alias="Idempotency-Key", min_length=1, max_length=200,
        description="Same key, same tenant: the same job comes back (200) instead of a second one. "
                    "May be given in the body as `idempotency_key` instead.")] = None,
) -> dict[str, Any]:
    """A one-shot job (`run_at`) or a recurring one (`cron` in `timezone`), with its misfire and overlap
    policies. Validation is the CLI's: a bad field is a 422 naming it, and nothing is written.
    Retrying a create after a timeout is safe only with an idempotency key."""
    if idempotency_key is not None:
        if spec.idempotency_key not in (None, idempotency_key):
            raise field_error(("header", "Idempotency-Key"), "differs from body.idempotency_key; send one key")
        spec = spec.model_copy(update={"idempotency_key": idempotency_key})
    reject_unstorable(spec)
    job, created = jobs.submit(session.conn, session.tenant.id, spec)
    if created:
        response.headers["Location"] = f"/v1/jobs/{job['id']}"
        return job
    differing = [f for f in REPLAY_FIELDS if getattr(spec, f) != job[f]]
    if spec.resolved_pool() != job["pool"]:
        differing.append("pool")
    if differing:
        raise field_error(("body", "idempotency_key"), f"already used for job {job['id']}, which differs in: "
                                                       f"{', '.join(differing)}; use a new key for a new job")
    response.status_code = 200
    response.headers["Idempotent-Replayed"] = "true"
    return job


@v1.get("/jobs", response_model=JobPage, summary="List jobs")
def list_jobs(
    session: Session,
    name: Annotated[str | None, Query(min_length=1, max_length=200, pattern=r"^[^\x00]*$",
                                      description="Only jobs with exactly this name.")] = None,
    paused: Annotated[bool | None, Query(description="Only paused (true) or only unpaused (false) jobs.")] = None,
    deleted: Annotated[bool, Query(description="Deleted jobs instead of live ones.")] = False,
    schedule_kind: Annotated[Literal[states.SCHEDULE_KINDS] | None, Query(description="One-shot or recurring.")]
    = None,
    limit: Annotated[int, Query(ge=1, le=200, description="Jobs per page.")] = 50,
    before: Annotated[int | None, Query(ge=1, le=2**63 - 1, description="Only jobs older than this id "
                                                                       "(from `next_before`).")] = None,
) -> dict[str, Any]:
    """This tenant's jobs, newest first (live ones unless `deleted=true`)."""
    page, next_before = jobs.list_jobs(session.conn, session.tenant.id, name=name, paused=paused, deleted=deleted,
                                       schedule_kind=schedule_kind, limit=limit, before=before)
    return {"jobs": page, "next_before": next_before}


@v1.get("/jobs/{job_id}", response_model=Job, summary="Get a job", responses=NOT_FOUND)
def get_job(job_id: JobId, session: Session) -> dict[str, Any]:
    """The job as stored, including its materialiser cursor and next fire time."""
    return jobs.owned(session.conn, session.tenant.id, job_id)


@v1.get("/jobs/{job_id}/occurrences", response_model=OccurrencePage, summary="A job's occurrences and attempts",
        responses=NOT_FOUND)
def list_occurrences(
    job_id: JobId,
    session: Session,
    limit: Annotated[int, Query(ge=1, le=200, description="Occurrences per page.")] = 50,
    before: Annotated[AwareDatetime | None, Query(description="Only fire times before this (from `next_before`).")]
    = None,
) -> dict[str, Any]:
    """"How do you know it ran?": every occurrence, newest first -- skipped ones with their reason -- each
    with every attempt: worker, fencing token, lease, times, outcome."""
    jobs.owned(session.conn, session.tenant.id, job_id)
    rows = status.executions(session.conn, job_id, limit, before)
    return {"job_id": job_id, "occurrences": rows, "next_before": rows[-1]["fire_at"] if len(rows) == limit else None}


@v1.post("/jobs/{job_id}/pause", response_model=Job, summary="Pause a job", responses={**NOT_FOUND, **DELETED})
def pause_job(job_id: JobId, session: Session) -> dict[str, Any]:
    """Stop materialising new occurrences. Fire times that pass while paused are misfires on resume:
    the job's misfire_policy decides what runs, and the rest are recorded as skipped."""
    jobs.owned(session.conn, session.tenant.id, job_id, live=True)
    jobs.set_paused(session.conn, job_id, True)
    return jobs.owned(session.conn, session.tenant.id, job_id)


@v1.post("/jobs/{job_id}/resume", response_model=Job, summary="Resume a job", responses={**NOT_FOUND, **DELETED})
def resume_job(job_id: JobId, session: Session) -> dict[str, Any]:
    """Materialise again; missed fire times are handled by the job's misfire_policy."""
    jobs.owned(session.conn, session.tenant.id, job_id, live=True)
    jobs.set_paused(session.conn, job_id, False)
    return jobs.owned(session.conn, session.tenant.id, job_id)


@v1.delete("/jobs/{job_id}", response_model=Job, summary="Delete a job", responses=NOT_FOUND)
def delete_job(job_id: JobId, session: Session) -> dict[str, Any]:
    """Nothing fires after this. Waiting and ready occurrences are cancelled; running attempts are asked
    to stop (cooperatively, at their next heartbeat). The history stays readable. Deleting twice is a no-op."""
    jobs.owned(session.conn, session.tenant.id, job_id)
    jobs.delete(session.conn, job_id)
    return jobs.owned(session.conn, session.tenant.id, job_id)


@v1.post("/jobs/{job_id}/trigger", status_code=202, response_model=Triggered, summary="Run a job once, now",
         responses={**NOT_FOUND, **DELETED})
def trigger_job(job_id: JobId, session: Session) -> dict[str, Any]:
    """A manual occurrence at this instant, outside the schedule (also for a paused job: it is explicit). The
    job's overlap policy decides it like a scheduled fire time: while an earlier run is unfinished, `allow`
    runs it alongside, `skip` records it skipped, `buffer_one`/`buffer_all` queue it (`waiting`),
    `cancel_other` cancels the earlier run first. The answer's `state` and `reason` say which."""
    jobs.owned(session.conn, session.tenant.id, job_id, live=True)
    return jobs.trigger(session.conn, job_id)


@ops.get("/healthz", summary="Liveness and database reachability",
         responses={503: {"model": Problem, "description": "The database is unreachable."}})
def healthz(request: Request) -> dict[str, str]:
    """200 when the database answers `SELECT 1`; 503 (never 500) when it does not. No API key needed."""
    with request.app.state.engine.connect() as conn:
        conn.execute(text("SELECT 1"))
    return {"status": "ok"}


@ops.get("/metrics", summary="Prometheus metrics", response_class=PlainTextResponse,
         responses={200: {"content": {metrics.CONTENT_TYPE: {}}, "description": "Prometheus text format."},
                    503: {"model": Problem, "description": "The database is unreachable."}})
def prometheus_metrics(request: Request) -> PlainTextResponse:
    """Due, running, dispatched, completed, lost, dead and skipped counts and the fire-lag histogram, for the
    whole installation (no tenant breakdown, no API key: scrape it from inside the network)."""
    with request.app.state.engine.begin() as conn:
        body = metrics.render(conn)
    return PlainTextResponse(body, media_type=metrics.CONTENT_TYPE)
