"""The cleaner (River's JobCleaner): keeps the queue tables small and the history bounded.

Runs in every scheduler replica, as maintenance services of its own (scheduler.py); the logic of each is in
operations.sql:

* ``archive_finished`` (d2_archive), every second: finished occurrences older than the archive delay leave the
  queue tables for the day's partition of ``execution_history``, with their attempts. The claim, completion
  and reaper only ever read the queue tables, so history of any length costs the hot path nothing.
* ``rotate_history`` (d2_rotate_history), once a minute: today's and tomorrow's partitions are made ahead of
  need, and whole days of history older than the retention are dropped -- no row-by-row DELETE, no dead
  tuples, milliseconds a day.
* ``forget_jobs`` (d2_forget_jobs), once a minute and again at once while batches come back full: one-shot
  jobs whose last execution is older than the retention are deleted, so the retention is also how long a
  one-shot job's idempotency key is remembered.

Unfinished work is never touched.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Connection, text

# The design's storage.archive_after_minutes and storage.retention_days (designs/d2/scale.yaml); a test keeps
# them equal.
DEFAULT_ARCHIVE_AFTER = timedelta(minutes=60)
DEFAULT_RETENTION = timedelta(days=14)
# Rows per archive transaction. One batch a second per replica moves up to this many a second: more than the
# design's peak of 833 finished executions/s from a single replica, in transactions short enough that the
# scheduler loop sharing the connection barely notices.
ARCHIVE_BATCH = 2_000
FORGET_BATCH = 5_000  # one-shot jobs deleted per transaction: short row locks on jobs


def archive_finished(conn: Connection, after: timedelta = DEFAULT_ARCHIVE_AFTER, limit: int = ARCHIVE_BATCH) -> int:
    """One batch; returns how many finished occurrences moved to the history."""
    return conn.execute(text("SELECT d2_archive(:after, :n)"), {"after": after, "n": limit}).scalar_one()


def forget_jobs(conn: Connection, retention: timedelta = DEFAULT_RETENTION, limit: int = FORGET_BATCH) -> int:
    """One batch; returns how many one-shot jobs were deleted."""
    return conn.execute(text("SELECT d2_forget_jobs(:retention, :n)"),
                        {"retention": retention, "n": limit}).scalar_one()


def rotate_history(conn: Connection, retention: timedelta = DEFAULT_RETENTION) -> int:
    """Returns how many days of history were dropped."""
    return conn.execute(text("SELECT d2_rotate_history(:retention)"), {"retention": retention}).scalar_one()
