"""The cleaner (River's JobCleaner): retention for the execution history.

Runs in every scheduler replica, once a minute; d2_clean (operations.sql) holds the logic. Finished
occurrences older than the retention are deleted in batches with their attempts, and one-shot jobs left
without any occurrence go with them -- so the retention is also how long a one-shot job's idempotency key
is remembered. Unfinished work is never touched.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Connection, text

# The design's storage.retention_days (designs/d2/scale.yaml); a test keeps the two equal.
DEFAULT_RETENTION = timedelta(days=14)
CLEAN_BATCH = 5_000  # rows per transaction: short locks, and a big backlog of history goes over several passes


def clean_expired(conn: Connection, retention: timedelta = DEFAULT_RETENTION) -> int:
    """One pass; returns how many finished occurrences were deleted."""
    return conn.execute(text("SELECT d2_clean(:retention, :n)"),
                        {"retention": retention, "n": CLEAN_BATCH}).scalar_one()
