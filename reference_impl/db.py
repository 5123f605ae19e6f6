"""Database access: which PostgreSQL, engines, and applying the schema.

``DATABASE_URL`` wins when set; otherwise the embedded server (embedded_pg.py) is started on demand.
Everything else talks to PostgreSQL through SQLAlchemy Core with psycopg 3.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from urllib.parse import urlsplit, urlunsplit

import psycopg
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.engine import make_url

SQL_FILES = ("schema.sql", "operations.sql")
MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")

# Every session of the kit's services (scheduler, worker, API, CLI) carries these. A client that stops in the
# middle of a transaction -- SIGSTOP, a long GC pause, a frozen VM, a partition -- keeps its row locks (a
# scheduler pass holds FOR UPDATE on up to 500 due jobs) until PostgreSQL ends its session, and by default it
# never does: no timeout applies, and TCP keepalives, if any, take hours. Each value is set by what it protects:
#   idle in transaction  no transaction of the kit waits on its client for more than a pass's planning
#                        (milliseconds; a catch-up pass on a starved CPU can take longer, and the materialiser
#                        then shrinks its passes until they fit), and a paused replica's locked jobs must go back
#                        well inside the fire lag target (5 s p99); occurrences are written 2 s ahead, so most
#                        of the wait is absorbed (the scheduler-paused drill measures how late they come out).
#   statement            the short pool's lease: no statement of the kit outlives a lease.
#   keepalives           a peer that vanished (partition, dead host) is noticed by both ends within
#                        idle + interval x count = 5 + 2 x 3 = 11 s, a third of a lease.
# The drills' and benchmarks' own sessions (scratch_database) go without: they hold old snapshots on purpose.
IDLE_IN_TRANSACTION_SECONDS = 3
STATEMENT_TIMEOUT_SECONDS = 30
KEEPALIVE_IDLE_SECONDS, KEEPALIVE_INTERVAL_SECONDS, KEEPALIVE_COUNT = 5, 2, 3


def session_settings() -> dict[str, str | int]:
    """libpq connection parameters: client-side keepalives, and the server-side settings as ``options``."""
    if os.environ.get("D2KIT_UNSAFE_NO_SESSION_TIMEOUTS") == "1":  # the scheduler-paused drill's negative control
        return {}
    dead_after = KEEPALIVE_IDLE_SECONDS + KEEPALIVE_INTERVAL_SECONDS * KEEPALIVE_COUNT
    server = {"idle_in_transaction_session_timeout": IDLE_IN_TRANSACTION_SECONDS * 1000,
              "statement_timeout": STATEMENT_TIMEOUT_SECONDS * 1000,
              "tcp_keepalives_idle": KEEPALIVE_IDLE_SECONDS, "tcp_keepalives_interval": KEEPALIVE_INTERVAL_SECONDS,
              "tcp_keepalives_count": KEEPALIVE_COUNT, "tcp_user_timeout": dead_after * 1000}
    return {"keepalives": 1, "keepalives_idle": KEEPALIVE_IDLE_SECONDS,
            "keepalives_interval": KEEPALIVE_INTERVAL_SECONDS, "keepalives_count": KEEPALIVE_COUNT,
            "tcp_user_timeout": dead_after * 1000,
            "options": " ".join(f"-c {name}={value}" for name, value in server.items())}


def database_url() -> str:
    """The URL in use: DATABASE_URL, or the embedded server's (started if needed)."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    from reference_impl import embedded_pg

    return embedded_pg.ensure_running()


def sqlalchemy_url(url: str) -> str:
    scheme, rest = url.split("://", 1)
    if scheme in ("postgres", "postgresql"):
        scheme = "postgresql+psycopg"
    return f"{scheme}://{rest}"


def make_engine(url: str | None = None, *, pool_size: int = 5, application_name: str = "d2kit",
                single_statement: bool = False, timeouts: bool = True) -> Engine:
    """An engine that reconnects by itself: pre-ping on checkout, short connect timeout.

    ``single_statement=True`` is for callers whose every transaction is ONE statement (a worker's d2_claim,
    d2_heartbeat, d2_complete): autocommit and no pre-ping make each call one round trip instead of four
    (ping, BEGIN, statement, COMMIT). A dead connection then shows as that statement failing; the caller
    retries, and SQLAlchemy has already dropped the pool's stale connections.
    ``timeouts=False`` drops the session timeouts above (the drills' and benchmarks' own sessions only)."""
    return create_engine(
        sqlalchemy_url(url or database_url()),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=not single_statement,
        pool_recycle=300,
        connect_args={"connect_timeout": 3, "application_name": application_name,
                      **(session_settings() if timeouts else {})},
        **({"isolation_level": "AUTOCOMMIT"} if single_statement else {}),
    )


@contextmanager
def driver_connection(engine: Engine) -> Iterator[psycopg.Connection]:
    """psycopg's own connection, checked out of ``engine``'s pool, for a loop that calls one statement many times a
    second (a worker's claim, heartbeat and completion). SQLAlchemy's result machinery costs about 200 us of CPU a
    call on top of psycopg's (measured: 298 against 102 us for an empty claim), which at a 20 ms poll was most of
    an idle worker's CPU. A connection whose statement failed at the connection level is dropped, not pooled.

    Arrays on these paths (a worker's completions and heartbeats, the materialiser's fire times) go in PostgreSQL's
    binary format, psycopg's placeholder ``%b``: psycopg builds a text array element by element in Python, and that
    was the largest single cost of the scheduler's Python at 6,000 executions/s (31%) and 10% of a worker's.
    Measured: four 32-element arrays (tokens, flags, texts, times) dump in 136 us as text, 30 us in binary. A binary
    list is typed by its values (small ints go as smallint[]; an empty or all-NULL list has no type), so each such
    parameter is cast to its type in the statement."""
    pooled = engine.raw_connection()
    try:
        yield pooled.driver_connection
    except psycopg.OperationalError:
        pooled.invalidate()
        raise
    finally:
        pooled.close()


def _sql_folder():
    return resources.files("reference_impl") / "sql"


def schema_sql() -> str:
    return "\n".join((_sql_folder() / name).read_text() for name in SQL_FILES)


def migrations() -> list[tuple[int, str, str]]:
    """(version, file name, SQL) of every migration in sql/migrations/, oldest first."""
    found = []
    for entry in (_sql_folder() / "migrations").iterdir():
        if match := MIGRATION_NAME.match(entry.name):
            found.append((int(match.group(1)), entry.name, entry.read_text()))
    return sorted(found)


def schema_version(conn: Connection) -> int | None:
    """The newest migration recorded in this database; None before versioning (or before any schema)."""
    if conn.execute(text("SELECT to_regclass('schema_migrations')")).scalar() is None:
        return None
    return conn.execute(text("SELECT max(version) FROM schema_migrations")).scalar()


def init_schema(engine: Engine) -> list[str]:
    """Bring the database to the current schema, in one transaction; returns what was applied.

    A new database gets schema.sql, which is always the whole current schema, and every migration is recorded
    as applied. An existing one gets its pending migrations (sql/migrations/: only what ``CREATE ... IF NOT
    EXISTS`` cannot do, such as a new column on an existing table or a changed index), then schema.sql and
    operations.sql again, which create whatever is new and replace every function, view and trigger. A
    database from before versioning (tables, no schema_migrations) has every migration pending."""
    with engine.begin() as conn:
        conn.execute(text("SELECT pg_advisory_xact_lock(424242)"))  # concurrent inits wait for each other
        new_database = conn.execute(text("SELECT to_regclass('jobs')")).scalar() is None
        recorded = set()
        if conn.execute(text("SELECT to_regclass('schema_migrations')")).scalar() is not None:
            recorded = set(conn.execute(text("SELECT version FROM schema_migrations")).scalars())
        pending = [(version, name, sql) for version, name, sql in migrations() if version not in recorded]
        driver = conn.connection.driver_connection  # scripts go straight to psycopg: '%' in format() stays
        if not new_database:
            for _, _, sql in pending:
                driver.execute(sql)
        driver.execute(schema_sql())
        for version, name, _ in pending:
            conn.execute(text("INSERT INTO schema_migrations (version, name) VALUES (:v, :n)"),
                         {"v": version, "n": name})
    if new_database:
        return ["schema.sql (new database)"]
    return [name for _, name, _ in pending]


def with_database(url: str, dbname: str) -> str:
    """The same server URL pointing at another database."""
    return make_url(sqlalchemy_url(url)).set(database=dbname).render_as_string(hide_password=False).replace(
        "postgresql+psycopg://", "postgresql://", 1
    )


def _run_outside_transaction(url: str, statement: str) -> None:
    """CREATE/DROP DATABASE cannot run inside a transaction block."""
    admin = create_engine(sqlalchemy_url(url), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(statement))
    finally:
        admin.dispose()


def create_scratch_database(url: str, prefix: str = "d2") -> str:
    """Create a fresh database on the same server (drills and tests each get their own); return its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    _run_outside_transaction(url, f'CREATE DATABASE "{name}"')
    return with_database(url, name)


@contextmanager
def scratch_database(server_url: str, prefix: str, *, schema: bool = True, pool_size: int = 5,
                     application_name: str = "d2kit") -> Iterator[tuple[str, Engine]]:
    """A fresh database (with the schema unless ``schema=False``) and an engine on it; dropped afterwards."""
    url = create_scratch_database(server_url, prefix)
    engine = make_engine(url, pool_size=pool_size, application_name=application_name, timeouts=False)
    try:
        if schema:
            init_schema(engine)
        yield url, engine
    finally:
        engine.dispose()
        drop_database(url)


def drop_database(url: str) -> None:
    name = make_url(sqlalchemy_url(url)).database
    _run_outside_transaction(with_database(url, "postgres"), f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        parts = parts._replace(netloc=netloc)
    return urlunsplit(parts)
