"""Process registry: who is alive, and how far each process's wall clock is from the database's.

Skew is *shown* (``d2kit status``), never used: every lease, due time and misfire decision reads the
database clock. (The clock-skew drill skews a process's wall clock with libfaketime, from outside.)
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from datetime import UTC, datetime

from sqlalchemy import Connection, Engine, text

log = logging.getLogger("d2kit")

# A worker exits with this (EX_TEMPFAIL) when it recycles itself to end leaked handler threads (worker.py): not a
# crash, so its supervisor starts it again at once.
RECYCLE_EXIT = 75

# A worker's graceful stop (worker.py, _drain): its handlers get this long to finish, then, cancelled, this long again
# to return. A supervisor that stops workers waits at least twice this before it kills one (``d2kit up``).
SHUTDOWN_GRACE_SECONDS = 10.0


def wall_now() -> datetime:
    """This process's wall clock (what a skewed node believes the time is)."""
    return datetime.now(UTC)


def register(engine: Engine, process_id: str, kind: str, pool: str | None = None) -> None:
    with engine.begin() as conn:
        enroll(conn, process_id, kind, pool)


def enroll(conn: Connection, process_id: str, kind: str, pool: str | None = None) -> None:
    """This process's row, (re)started now."""
    conn.execute(text(
        "INSERT INTO processes (id, kind, pool, pid, host, heartbeat_at) VALUES (:id, :k, :p, :pid, :h, now())"
        " ON CONFLICT (id) DO UPDATE SET kind = excluded.kind, pool = excluded.pool, pid = excluded.pid,"
        " host = excluded.host, started_at = now(), heartbeat_at = now(), stopped_at = NULL"),
        {"id": process_id, "k": kind, "p": pool, "pid": os.getpid(), "h": socket.gethostname()})


def heartbeat(conn: Connection, process_id: str) -> None:
    conn.execute(text(
        "UPDATE processes SET heartbeat_at = now(),"
        " skew_ms = extract(epoch FROM CAST(:wall AS timestamptz) - clock_timestamp()) * 1000 WHERE id = :id"),
        {"id": process_id, "wall": wall_now()})


def mark_stopped(engine: Engine, process_id: str) -> None:
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE processes SET stopped_at = now() WHERE id = :id"), {"id": process_id})
    except Exception:  # best effort on the way out: the database may be the thing that is down
        log.warning("could not mark %s stopped", process_id)


def stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM / SIGINT ask for a graceful stop. (SIGKILL, which the drills use, cannot be caught.)"""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())


def configure_logging(process_id: str) -> None:
    logging.basicConfig(level=os.environ.get("D2KIT_LOG_LEVEL", "INFO"),
                        format=f"%(asctime)s {process_id} %(levelname)s %(message)s")


def describe_error(exc: Exception) -> str:
    """First line of an error, for a log line (psycopg errors run to many lines)."""
    message = str(exc).strip()
    return message.splitlines()[0][:200] if message else type(exc).__name__


# The database answered, and said it is down: shut down, crashed, starting up or shutting down (SQLSTATE class 57P),
# or nothing listens at its address any more. A partitioned network never says either: it does not answer.
DOWN_SQLSTATES = ("57P01", "57P02", "57P03")
DOWN_MESSAGES = ("Connection refused", "No such file or directory", "the database system is starting up",
                 "the database system is shutting down", "terminating connection due to administrator command")


def database_down(exc: Exception) -> bool:
    """Did this error come from a database that is down (rather than from no answer at all)?"""
    if os.environ.get("D2KIT_UNSAFE_IGNORE_DATABASE_DOWN") == "1":  # the postgres-restart drill's negative control
        return False
    cause = getattr(exc, "orig", None) or exc
    return getattr(cause, "sqlstate", None) in DOWN_SQLSTATES or any(m in str(exc) for m in DOWN_MESSAGES)
