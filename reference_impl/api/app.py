"""The FastAPI application: one engine per app, disposed when the app shuts down."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from reference_impl import db
from reference_impl.api import errors, routes
from reference_impl.api.body_limit import MAX_REQUEST_BYTES, BodySizeLimit

DESCRIPTION = f"""
The few calls a tenant needs: create a job, read it, read every occurrence and attempt it produced,
pause / resume / delete it, trigger it now. Plus `/healthz` and `/metrics` (Prometheus).

* **Auth**: every `/v1` call needs the tenant's API key, as `Authorization: Bearer <key>` or
  `X-API-Key: <key>` (`d2kit tenant create <id>` prints one). Another tenant's job is a 404.
* **Errors**: bad input is a 422 whose `detail[].field` names the field (`body.cron`,
  `body.payload`); a request body over {MAX_REQUEST_BYTES // 1024} KiB is a 413; nothing is ever half-written
  (one transaction per request). An unreachable database is a 503.
* **Idempotency**: send `Idempotency-Key` (or `idempotency_key` in the body) to make a create safe to
  retry: the same key returns the same job (200, `Idempotent-Replayed: true`).
"""


def create_app(url: str | None = None) -> FastAPI:
    engine = db.make_engine(url, application_name="d2kit-api")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        engine.dispose()

    app = FastAPI(title="D2 Kit scheduler API", version="1", description=DESCRIPTION, lifespan=lifespan)
    app.state.engine = engine
    app.add_middleware(BodySizeLimit, max_bytes=MAX_REQUEST_BYTES)
    errors.install(app)
    app.include_router(routes.v1)
    app.include_router(routes.ops)
    return app
