"""A TCP proxy the drill controls: the network between one worker and PostgreSQL, with a switch on it.

No packaged toxiproxy is reachable here, so this is a small asyncio one. It listens on 127.0.0.1:<free port>
and forwards every connection to PostgreSQL -- to its Unix socket (the embedded server listens on nothing
else) or to host:port, whichever the server URL names. The worker's DATABASE_URL points at the proxy.

* ``cut()``  -- a partition: every live connection is dropped at once, and new ones are accepted but never
  answered (blackholed), so the client sees what a dead network looks like: a connect that times out.
* ``heal()`` -- the network is back: blackholed connections are closed (the client retries) and new
  connections are forwarded again.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

from sqlalchemy.engine import make_url

from reference_impl import db

DEFAULT_PG_PORT = 5432


@dataclass(frozen=True)
class Upstream:
    unix_socket: str | None = None
    host: str | None = None
    port: int = DEFAULT_PG_PORT

    @classmethod
    def from_url(cls, url: str) -> Upstream:
        """Where libpq would connect for this URL: ``?host=/dir`` means the Unix socket in that directory."""
        parts = urlsplit(url)
        query_host = parse_qs(parts.query).get("host", [None])[0]
        host = query_host or parts.hostname or "localhost"
        port = parts.port or DEFAULT_PG_PORT
        if host.startswith("/"):
            return cls(unix_socket=f"{host}/.s.PGSQL.{port}", port=port)
        return cls(host=host, port=port)

    async def open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.unix_socket:
            return await asyncio.open_unix_connection(self.unix_socket)
        return await asyncio.open_connection(self.host, self.port)


@dataclass
class ProxyStats:
    accepted: int = 0
    forwarded: int = 0
    dropped: int = 0       # live connections cut
    blackholed: int = 0    # connections accepted during a cut and never answered


@dataclass
class TcpProxy:
    server_url: str
    stats: ProxyStats = field(default_factory=ProxyStats)

    def __post_init__(self) -> None:
        self.upstream = Upstream.from_url(self.server_url)
        self.port: int | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="drill-proxy", daemon=True)
        self._cut = False
        self._live: set[asyncio.StreamWriter] = set()
        self._held: set[asyncio.StreamWriter] = set()
        self._server: asyncio.AbstractServer | None = None

    # -- control (called from the drill's thread) ---------------------------------------------------
    def start(self) -> TcpProxy:
        self._thread.start()
        self.port = self._call(self._listen())
        return self

    def url_for(self, database_url: str) -> str:
        """``database_url`` (same user and database) routed through this proxy."""
        routed = make_url(db.sqlalchemy_url(database_url)).set(host="127.0.0.1", port=self.port, query={})
        return routed.render_as_string(hide_password=False).replace("postgresql+psycopg://", "postgresql://", 1)

    def cut(self) -> None:
        self._call(self._set_cut(True))

    def heal(self) -> None:
        self._call(self._set_cut(False))

    def stop(self) -> None:
        if self._thread.is_alive():
            self._call(self._shutdown())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=10)

    # -- the event loop side --------------------------------------------------------------------------
    async def _listen(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    async def _set_cut(self, cut: bool) -> None:
        self._cut = cut
        # Cutting drops live connections; healing releases blackholed ones so their clients retry at once.
        doomed = self._live if cut else self._held
        for writer in list(doomed):
            writer.transport.abort()
        if cut:
            self.stats.dropped += len(self._live) // 2  # a client side and a server side per connection
        doomed.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats.accepted += 1
        if self._cut:
            self.stats.blackholed += 1
            self._held.add(writer)  # never answered: the client's connect timeout is what fires
            return
        try:
            up_reader, up_writer = await self.upstream.open()
        except OSError:
            writer.transport.abort()
            return
        self.stats.forwarded += 1
        self._live.update((writer, up_writer))
        await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        self._live.difference_update((writer, up_writer))

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.transport.abort()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in self._live | self._held:
            writer.transport.abort()
