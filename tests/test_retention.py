"""Retention: the cleaner deletes finished executions older than the retention, and nothing else."""

from datetime import timedelta
from pathlib import Path

import yaml
from helpers import rows, scalar
from sqlalchemy import text

from reference_impl import cleaner

ROOT = Path(__file__).resolve().parents[1]


def _job(conn, name: str, kind: str) -> int:
    return conn.execute(text(
        "INSERT INTO jobs (tenant_id, name, handler, pool, schedule_kind, run_at, cron, materialized_through,"
        " next_fire_at) VALUES ('t', :name, 'noop', 'short', :kind,"
        " CASE WHEN :kind = 'once' THEN now() - interval '20 days' END,"
        " CASE WHEN :kind = 'cron' THEN '0 * * * *' END, now(), NULL) RETURNING id"),
        {"name": name, "kind": kind}).scalar_one()


def _ready(conn, job: int, days_ago: int) -> int:
    return conn.execute(text(
        "INSERT INTO occurrences (job_id, fire_at, tenant_id, pool, state, ready_at, max_attempts)"
        " VALUES (:j, now() - make_interval(days => :d), 't', 'short', 'ready', now() - make_interval(days => :d), 1)"
        " RETURNING id"), {"j": job, "d": days_ago}).scalar_one()


def _run_everything_ready(engine) -> None:
    """Claim and complete through the real operations, so the history is what the system writes."""
    with engine.begin() as conn:
        tokens = [r.token for r in conn.execute(text("SELECT token FROM d2_claim('short', 'w', 100, 30)"))]
        conn.execute(text("SELECT * FROM d2_complete(:t, :ok, :e, :s)"),
                     {"t": tokens, "ok": [True] * len(tokens), "e": [None] * len(tokens), "s": [None] * len(tokens)})


def test_the_cleaner_deletes_only_finished_history_older_than_the_retention(engine):
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO tenants (id, api_key_hash) VALUES ('t', 'h')"))
        once = _job(conn, "old one-shot", "once")
        cron = _job(conn, "hourly", "cron")
        old_once, old_cron, recent_cron = _ready(conn, once, 20), _ready(conn, cron, 20), _ready(conn, cron, 1)
    _run_everything_ready(engine)
    with engine.begin() as conn:
        still_ready = _ready(conn, cron, 30)  # unfinished, and older than anything: must survive
        # Finished 20 days ago, as far as the retention is concerned (finished_at is the database's own stamp).
        conn.execute(text("UPDATE occurrences SET finished_at = finished_at - interval '20 days' WHERE id = ANY(:ids)"),
                     {"ids": [old_once, old_cron]})
    assert scalar(engine, "SELECT count(*) FROM attempts") == 3

    with engine.begin() as conn:
        deleted = cleaner.clean_expired(conn, timedelta(days=14))

    assert deleted == 2
    left = {r.id: r.state for r in rows(engine, "SELECT id, state FROM occurrences")}
    assert left == {recent_cron: "succeeded", still_ready: "ready"}
    assert [r.occurrence_id for r in rows(engine, "SELECT occurrence_id FROM attempts")] == [recent_cron]
    # The one-shot job has no history left, so it goes; the recurring job stays.
    assert [r.id for r in rows(engine, "SELECT id FROM jobs")] == [cron]
    with engine.begin() as conn:
        assert cleaner.clean_expired(conn, timedelta(days=14)) == 0  # a second pass finds nothing


def test_the_default_retention_is_the_designs():
    scale = yaml.safe_load((ROOT / "designs" / "d2" / "scale.yaml").read_text())
    assert cleaner.DEFAULT_RETENTION == timedelta(days=scale["storage"]["retention_days"])
