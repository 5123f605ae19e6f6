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

from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.engine import make_url

SQL_FILES = ("schema.sql", "operations.sql")
MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


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
                single_statement: bool = False) -> Engine:
    """An engine that reconnects by itself: pre-ping on checkout, short connect timeout.

    ``single_statement=True`` is for callers whose every transaction is ONE statement (a worker's d2_claim,
    d2_heartbeat, d2_complete): autocommit and no pre-ping make each call one round trip instead of four
    (ping, BEGIN, statement, COMMIT). A dead connection then shows as that statement failing; the caller
    retries, and SQLAlchemy has already dropped the pool's stale connections."""
    return create_engine(
        sqlalchemy_url(url or database_url()),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=not single_statement,
        pool_recycle=300,
        connect_args={"connect_timeout": 3, "application_name": application_name},
        **({"isolation_level": "AUTOCOMMIT"} if single_statement else {}),
    )


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
    engine = make_engine(url, pool_size=pool_size, application_name=application_name)
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
