"""How the API says no: always a 4xx/503 with a message, the field named for bad input, never a traceback.

Validation errors keep FastAPI's documented shape ({"detail": [{"loc", "msg", "type"}]}) and add
``field`` ("body.cron", "header.Idempotency-Key"), dropping ``input`` (it can echo 128 KiB back).
A unique violation is a 409; an unreachable database is a 503. Any other database error stays a 500:
it is a bug to fix (the fuzz test looks for them), not something to relabel as the client's fault.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa_exc

from reference_impl.jobs import JobDeleted, JobNotFound, JobSpec, unstorable_values
from reference_impl.processes import describe_error


def field_error(loc: Sequence[str | int], message: str) -> RequestValidationError:
    """A validation error found by the API itself, reported exactly like FastAPI's own."""
    return RequestValidationError([_error(loc, message)])


def _error(loc: Sequence[str | int], message: str) -> dict[str, Any]:
    return {"loc": tuple(loc), "msg": message, "type": "value_error"}


def _described(error: dict[str, Any]) -> dict[str, Any]:
    loc = [str(part) for part in error.get("loc", ())]
    message = str(error.get("msg", "invalid"))
    if error.get("type") == "json_invalid":  # FastAPI puts the character offset in loc; say it instead
        loc, message = loc[:1], f"invalid JSON at character {loc[-1]}: {error.get('ctx', {}).get('error', '')}"
    return {"loc": loc, "field": ".".join(loc), "msg": message.removeprefix("Value error, "),
            "type": str(error.get("type", "value_error"))}


async def _validation_failed(request: Request, error: RequestValidationError) -> JSONResponse:
    return JSONResponse({"detail": [_described(e) for e in error.errors()]}, status_code=422)


async def _conflict(request: Request, error: sa_exc.IntegrityError) -> JSONResponse:
    return JSONResponse({"detail": f"conflicts with existing data: {describe_error(error.orig)}"}, status_code=409)


async def _database_unavailable(request: Request, error: Exception) -> JSONResponse:
    return JSONResponse({"detail": f"database unavailable, retry later: {describe_error(error)}"},
                        status_code=503, headers={"Retry-After": "5"})


async def _not_found(request: Request, error: JobNotFound) -> JSONResponse:
    return JSONResponse({"detail": str(error)}, status_code=404)


async def _deleted(request: Request, error: JobDeleted) -> JSONResponse:
    return JSONResponse({"detail": str(error)}, status_code=409)


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation_failed)
    app.add_exception_handler(JobNotFound, _not_found)
    app.add_exception_handler(JobDeleted, _deleted)
    app.add_exception_handler(sa_exc.IntegrityError, _conflict)
    # OperationalError: connection refused/lost, query cancelled; TimeoutError: the pool is exhausted.
    app.add_exception_handler(sa_exc.OperationalError, _database_unavailable)
    app.add_exception_handler(sa_exc.TimeoutError, _database_unavailable)


def reject_unstorable(spec: JobSpec) -> None:
    """Refuse values PostgreSQL cannot store (NUL, NaN, Infinity), naming every such field, before the INSERT."""
    problems = [_error(("body", *loc), message) for loc, message in unstorable_values(spec)]
    if problems:
        raise RequestValidationError(problems)
