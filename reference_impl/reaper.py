"""The reaper (River's rescuer): attempts whose lease expired, by the database clock, are lost.

Runs in every scheduler replica; d2_reap (operations.sql) holds the logic -- SKIP LOCKED splits the work
between replicas, and the lease is re-checked under the row lock so a heartbeat that just arrived wins.
A lost attempt's occurrence is retried with a new attempt and a higher fencing token (after backoff), or
is ``dead`` with the reason once ``max_attempts`` are used up -- at once if the job's delivery is
``at_most_once`` (policies.py), which never starts an occurrence twice.
"""

from __future__ import annotations

from sqlalchemy import Connection, text

REAP_BATCH = 1_000


def reap_expired(conn: Connection) -> int:
    """One pass; returns how many attempts were declared lost."""
    return conn.execute(text("SELECT d2_reap(:n)"), {"n": REAP_BATCH}).scalar_one()
