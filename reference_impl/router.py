"""The router: a recurring job goes to the pool its observed run times call for, not only to the one declared.

Runs in every scheduler replica, once a minute; d2_route_by_duration (operations.sql) holds the rule -- a job
declared short whose recent p95 run time reaches the short pool's bound (jobs.LONG_POOL_FROM, the same bound a
declared expected duration is held to) has its next occurrences enqueued to the long pool, and goes back when
its runs get short again. Two replicas routing at once write the same answer.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Connection, text

from reference_impl.jobs import LONG_POOL_FROM

ROUTE_EVERY = timedelta(minutes=1)


def route_by_duration(conn: Connection, every: timedelta = ROUTE_EVERY) -> int:
    """One pass over the jobs that finished an execution since the pass before (twice the period, so a late pass
    misses none); returns how many changed pool."""
    return conn.execute(text("SELECT d2_route_by_duration(:bound, make_interval(secs => :since))"),
                        {"bound": LONG_POOL_FROM.total_seconds(), "since": 2 * every.total_seconds()}).scalar_one()
