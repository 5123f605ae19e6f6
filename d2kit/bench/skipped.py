"""What a run of skipped fire times costs: one row per fire time (what the design writes) against one row per run.

After a 2-hour outage, each per-minute cron under ``run_once`` has 119 fire times that will not run. The design
records each as an occurrence ``skipped`` with its reason -- the same row and the same unique key as a fire time
that ran, so "every fire time has a row" is checked one way everywhere. The alternative is one row per job for
the whole run of skipped times (first, last, count, reason). Both are written here into a scratch database the
way a catch-up pass would, in one transaction each: seconds, WAL bytes and bytes on disk (table and indexes).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from d2kit.bench import history
from d2kit.bench.harness import Progress, quiet
from reference_impl import db

JOBS_SQL = text(
    "INSERT INTO jobs (tenant_id, name, handler, pool, schedule_kind, cron, materialized_through, next_fire_at)"
    " SELECT 'bench', 'skipped-' || i, 'noop', 'short', 'cron', '* * * * *', now(), now() + interval '1 minute'"
    " FROM generate_series(1, :n) AS i")
PER_TIME_SQL = text(
    "INSERT INTO occurrences (job_id, fire_at, tenant_id, pool, state, ready_at, max_attempts, reason, finished_at)"
    " SELECT j.id, t.at, j.tenant_id, j.pool, 'skipped', t.at, j.max_attempts, 'misfire:superseded', now()"
    " FROM jobs j, LATERAL (SELECT date_trunc('minute', now()) - make_interval(mins => k) AS at"
    "                       FROM generate_series(1, :missed) AS k) t")
# The alternative's table, made for the measurement only: one row per job per run of skipped fire times.
RANGES_TABLE_SQL = text(
    "CREATE TABLE skipped_runs (job_id bigint NOT NULL REFERENCES jobs (id), first_fire_at timestamptz NOT NULL,"
    " last_fire_at timestamptz NOT NULL, fire_times integer NOT NULL, reason text NOT NULL,"
    " PRIMARY KEY (job_id, first_fire_at))")
PER_RUN_SQL = text(
    "INSERT INTO skipped_runs (job_id, first_fire_at, last_fire_at, fire_times, reason)"
    " SELECT id, date_trunc('minute', now()) - make_interval(mins => :missed), date_trunc('minute', now())"
    "        - interval '1 minute', :missed, 'misfire:superseded' FROM jobs")
SIZE_SQL = text("SELECT pg_total_relation_size(CAST(:t AS regclass))")


def compare(jobs: int, missed: int, progress: Progress = quiet) -> dict[str, Any]:
    """``jobs`` per-minute crons with ``missed`` skipped fire times each, recorded both ways."""
    with db.scratch_database(db.database_url(), "d2bench", pool_size=2, application_name="d2-bench") as (_, engine):
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO tenants (id, api_key_hash) VALUES ('bench', md5('bench'))"))
            conn.execute(JOBS_SQL, {"n": jobs})
            conn.execute(RANGES_TABLE_SQL)
            empty = {t: conn.execute(SIZE_SQL, {"t": t}).scalar_one() for t in ("occurrences", "skipped_runs")}
        progress(f"skipped rows: {jobs * missed:,} one per fire time")
        per_time = history._timed(engine, lambda: _write(engine, PER_TIME_SQL, missed))
        progress(f"skipped rows: {jobs:,} one per run")
        per_run = history._timed(engine, lambda: _write(engine, PER_RUN_SQL, missed))
        with engine.begin() as conn:
            sizes = {t: conn.execute(SIZE_SQL, {"t": t}).scalar_one() - empty[t] for t in empty}
    return {"jobs": jobs, "missed_per_job": missed,
            "one_row_per_fire_time": {"rows": per_time["value"], "seconds": per_time["seconds"],
                                      "wal_bytes": per_time["wal_bytes"], "bytes": sizes["occurrences"]},
            "one_row_per_run": {"rows": per_run["value"], "seconds": per_run["seconds"],
                                "wal_bytes": per_run["wal_bytes"], "bytes": sizes["skipped_runs"]}}


def _write(engine, statement, missed: int) -> int:
    with engine.begin() as conn:
        return conn.execute(statement, {"missed": missed}).rowcount
