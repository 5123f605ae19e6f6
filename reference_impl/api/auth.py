"""Who is calling. Every /v1 call carries a tenant's API key and runs as that tenant, in one transaction.

The key comes as ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``; a missing or unknown key is a
401 that says which. The transaction is the request's: a route that fails rolls everything back, and
it commits before the response is sent (``scope="function"``), so a 2xx always means "written".
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Connection

from reference_impl import tenants

bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer <API key>` (from `d2kit tenant create`).")
api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="The same API key, as a header.")


@dataclass(frozen=True)
class TenantSession:
    tenant: tenants.Tenant
    conn: Connection


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(401, message, headers={"WWW-Authenticate": "Bearer"})


def tenant_session(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
    header_key: Annotated[str | None, Security(api_key_header)],
) -> Iterator[TenantSession]:
    presented = {key for key in (credentials.credentials if credentials else None, header_key) if key}
    if not presented:
        raise _unauthorized("missing API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'")
    if len(presented) > 1:
        raise _unauthorized("Authorization and X-API-Key carry different keys; send one")
    with request.app.state.engine.begin() as conn:
        tenant = tenants.authenticate(conn, presented.pop())
        if tenant is None:
            raise _unauthorized("invalid API key")
        yield TenantSession(tenant, conn)


Session = Annotated[TenantSession, Depends(tenant_session, scope="function")]
