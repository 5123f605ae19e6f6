"""Does the record grow without slowing the hot path? The archiver at peak, and retention by DROP against DELETE.

Finished executions leave the queue tables (occurrences, attempts) for day partitions of execution_history, and
retention drops whole days (cleaner.py; the SQL is d2_archive and d2_rotate_history). Two measurements:

* **at peak, archiving as it goes**: the sustained scenario, with finished executions archived after
  ``archive_after_seconds`` instead of an hour, so everything the run finishes moves while the run goes on (and
  the rig's seeded history too, at the start). Reported: fire lag, CPU, and the rows in the queue and in the
  history at the end of the offered load.
* **retention of one day**: ``rows`` finished executions, first their occurrences and attempts deleted from the
  queue tables in batches -- what a row-by-row retention does (this kit's cleaner did, until the history was
  partitioned) -- then the same number archived into a day partition and the day dropped. Reported: seconds and
  WAL bytes of each, and the archiver's rate on the way. The seeded executions are one-shot jobs, one each, and
  retention must also delete those job rows, in either design (a job's idempotency key lives as long as its
  history): d2_forget_jobs, timed on its own -- the part of retention no partition takes away.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sqlalchemy import Connection, Engine, text

from d2kit.bench import harness, scenarios
from d2kit.bench.harness import ClusterShape, Progress, quiet
from reference_impl import cleaner, db

DELETE_BATCH = 5_000  # rows per DELETE transaction, as the row-by-row cleaner did
WAL_LSN_SQL = text("SELECT pg_current_wal_lsn()")
WAL_SINCE_SQL = text("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), CAST(:lsn AS pg_lsn))::bigint")
# Row-by-row retention of the history, as this kit's cleaner did it: the oldest finished occurrences and their
# attempts. (Their one-shot jobs go in either design, through d2_forget_jobs, timed on its own.)
OLDEST_FINISHED_SQL = text(
    "SELECT array_agg(id) FROM (SELECT id FROM occurrences WHERE finished_at IS NOT NULL"
    " ORDER BY finished_at LIMIT :n) x")
DELETE_SQL = (text("DELETE FROM attempts WHERE occurrence_id = ANY (:ids)"),
              text("DELETE FROM occurrences WHERE id = ANY (:ids)"))
AGE_SQL = text("UPDATE occurrences SET finished_at = finished_at - interval '20 days' WHERE finished_at IS NOT NULL")


def at_peak(shape: ClusterShape, rate: float, seconds: float, archive_after_seconds: float,
            progress: Progress = quiet) -> dict[str, Any]:
    """The sustained scenario with the archiver moving every execution ``archive_after_seconds`` after it ends."""
    run = scenarios.sustained(replace(shape, archive_after_seconds=archive_after_seconds), rate, seconds,
                              progress=progress)
    return {"archive_after_seconds": archive_after_seconds, **run}


def retention(rows: int, tenants: int, progress: Progress = quiet) -> dict[str, Any]:
    """On a scratch database: delete ``rows`` finished executions row by row, then archive as many into one day
    and drop the day; seconds and WAL bytes of each."""
    with db.scratch_database(db.database_url(), "d2bench", pool_size=2, application_name="d2-bench") as (_, engine):
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO tenants (id, api_key_hash) SELECT 'bench-' || i, md5('bench-' || i)"
                              " FROM generate_series(0, :n - 1) AS i"), {"n": tenants})
        harness.seed_history(engine, rows, tenants, progress)
        progress(f"retention: deleting {rows:,} executions row by row")
        deleted = _timed(engine, lambda: _in_batches(engine, _delete_batch))

        harness.seed_history(engine, rows, tenants, progress)
        with engine.begin() as conn:
            conn.execute(AGE_SQL)
        progress(f"retention: archiving {rows:,} executions into one day")
        archived = _timed(engine, lambda: _in_batches(engine, cleaner.archive_finished))
        progress("retention: dropping the day")
        dropped = _timed(engine, lambda: _one(engine, cleaner.rotate_history))
        progress(f"retention: forgetting {rows:,} one-shot jobs")
        forgotten = _timed(engine, lambda: _in_batches(engine, cleaner.forget_jobs))
    return {
        "executions": rows,
        "delete_row_by_row": {"seconds": deleted["seconds"], "wal_bytes": deleted["wal_bytes"],
                              "batch": DELETE_BATCH},
        "archive": {"seconds": archived["seconds"], "wal_bytes": archived["wal_bytes"],
                    "batch": cleaner.ARCHIVE_BATCH,
                    "executions_per_second": round(rows / archived["seconds"], 1) if archived["seconds"] else None},
        "drop_day": {"seconds": dropped["seconds"], "wal_bytes": dropped["wal_bytes"],
                     "partitions_dropped": dropped["value"]},
        "forget_one_shot_jobs": {"seconds": forgotten["seconds"], "wal_bytes": forgotten["wal_bytes"],
                                 "jobs": forgotten["value"], "batch": cleaner.FORGET_BATCH},
    }


def _timed(engine: Engine, step) -> dict[str, Any]:
    with engine.begin() as conn:
        lsn = conn.execute(WAL_LSN_SQL).scalar_one()
    started = time.perf_counter()
    value = step()
    seconds = time.perf_counter() - started
    with engine.begin() as conn:
        wal = conn.execute(WAL_SINCE_SQL, {"lsn": lsn}).scalar_one()
    return {"seconds": round(seconds, 3), "wal_bytes": wal, "value": value}


def _in_batches(engine: Engine, step: Callable[[Connection], int]) -> int:
    """Run ``step`` in a transaction of its own until it finds nothing left; how many rows it did in all."""
    total = 0
    while done := _one(engine, step):
        total += done
    return total


def _one(engine: Engine, step: Callable[[Connection], int]) -> int:
    with engine.begin() as conn:
        return step(conn)


def _delete_batch(conn: Connection) -> int:
    ids = conn.execute(OLDEST_FINISHED_SQL, {"n": DELETE_BATCH}).scalar_one() or []
    for statement in DELETE_SQL:  # an empty batch deletes nothing and ends the loop
        conn.execute(statement, {"ids": ids})
    return len(ids)
