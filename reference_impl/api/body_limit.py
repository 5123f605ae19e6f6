"""Refuse oversized request bodies before anything parses them (413), whether or not Content-Length is sent.

The payload's own 64 KiB limit (jobs.MAX_PAYLOAD_BYTES) is checked after parsing and is a 422 naming
``payload``; this outer limit keeps a client from making the server buffer or parse megabytes first.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_REQUEST_BYTES = 128 * 1024


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_bytes: int = MAX_REQUEST_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send, declared.decode("latin-1"))
            return
        # Chunked bodies (or a Content-Length that lies) are read here, up to the limit, and replayed.
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # client went away before sending its body: nothing to answer
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                await self._refuse(send, f"more than {size}")
                return
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(b"".join(chunks), receive), send)

    async def _refuse(self, send: Send, size: str) -> None:
        body = json.dumps({"detail": f"request body is {size} bytes; the limit is {self.max_bytes}"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: the server's http.disconnect

    return replayed
