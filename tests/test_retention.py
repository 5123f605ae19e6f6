"""History and retention: finished executions leave the queue tables for day partitions, and whole days are dropped.

Everything here goes through the real operations (d2_claim, d2_complete, d2_reap, d2_archive,
d2_rotate_history) on a real PostgreSQL; only the clock of a finished row is moved back, by rewriting
its finished_at, so that "an hour ago" and "20 days ago" exist without waiting for them.
"""

import threading
from datetime import timedelta
from pathlib import Path

import yaml
from helpers import rows, scalar
from sqlalchemy import text

from reference_impl import cleaner, status

ROOT = Path(__file__).resolve().parents[1]
HOUR = timedelta(hours=1)
RETENTION = timedelta(days=14)


def _tenant(engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO tenants (id, api_key_hash) VALUES ('t', 'h')"))


def _job(conn, name: str, kind: str) -> int:
    """A job whose cursor is now(): every fire time written below is one the materialiser has passed."""
    return conn.execute(text(
        "INSERT INTO jobs (tenant_id, name, handler, pool, schedule_kind, run_at, cron, materialized_through,"
        " next_fire_at) VALUES ('t', :name, 'noop', 'short', :kind,"
        " CASE WHEN :kind = 'once' THEN now() - interval '20 days' END,"
        " CASE WHEN :kind = 'cron' THEN '0 * * * *' END, now(), NULL) RETURNING id"),
        {"name": name, "kind": kind}).scalar_one()


def _ready(conn, job: int, days_ago: float) -> int:
    return conn.execute(text(
        "INSERT INTO occurrences (job_id, fire_at, tenant_id, pool, state, ready_at, max_attempts)"
        " VALUES (:j, now() - make_interval(secs => :d * 86400), 't', 'short', 'ready',"
        "         now() - make_interval(secs => :d * 86400), 3)"
        " RETURNING id"), {"j": job, "d": days_ago}).scalar_one()


def _claim(engine) -> list[int]:
    with engine.begin() as conn:
        return [r.token for r in conn.execute(text("SELECT token FROM d2_claim('short', 'w', 100, 30)"))]


def _complete(engine, tokens: list[int]) -> list[bool]:
    with engine.begin() as conn:
        return [r.accepted for r in conn.execute(text("SELECT * FROM d2_complete(:t, :ok, :e, :s)"), {
            "t": tokens, "ok": [True] * len(tokens), "e": [None] * len(tokens), "s": [None] * len(tokens)})]


def _finished_ago(engine, ids: list[int], ago: timedelta) -> None:
    with engine.begin() as conn:
        conn.execute(text("UPDATE occurrences SET finished_at = now() - :ago WHERE id = ANY(:ids)"),
                     {"ago": ago, "ids": ids})


def _archive(engine, after: timedelta = HOUR) -> int:
    with engine.begin() as conn:
        return cleaner.archive_finished(conn, after)


def _record(engine) -> tuple[list, list]:
    """The whole record as readers see it: every execution and every attempt, wherever they are stored."""
    return (rows(engine, "SELECT * FROM all_occurrences ORDER BY id"),
            rows(engine, "SELECT * FROM all_attempts ORDER BY token"))


def _page(engine, job: int) -> list:
    """The API's and the CLI's view of one job: GET /v1/jobs/{id}/occurrences reads status.executions."""
    with engine.begin() as conn:
        return status.executions(conn, job)


def test_the_archiver_moves_finished_executions_with_their_attempts_and_readers_see_no_difference(engine):
    _tenant(engine)
    with engine.begin() as conn:
        cron = _job(conn, "hourly", "cron")
        old, recent = _ready(conn, cron, 2), _ready(conn, cron, 1)
    assert all(_complete(engine, _claim(engine)))
    with engine.begin() as conn:
        unfinished = _ready(conn, cron, 3)  # older than anything, but not finished: stays
    _finished_ago(engine, [old], 2 * HOUR)
    before_record, before_page = _record(engine), _page(engine, cron)

    assert _archive(engine) == 1

    queue = {r.id for r in rows(engine, "SELECT id FROM occurrences")}
    assert queue == {recent, unfinished}
    assert scalar(engine, "SELECT count(*) FROM attempts WHERE occurrence_id = :o", o=old) == 0
    history = rows(engine, "SELECT id, state, attempt_log FROM execution_history")
    assert [(h.id, h.state) for h in history] == [(old, "succeeded")]
    assert [a["worker_id"] for a in history[0].attempt_log] == ["w"]
    # Nothing lost, nothing changed, nothing seen twice: the record and the API's page are the same as before.
    assert _record(engine) == before_record
    assert _page(engine, cron) == before_page
    assert _archive(engine) == 0  # a second pass finds nothing


def test_a_fire_time_the_cursor_has_not_passed_stays_under_the_unique_key(engine):
    """The materialiser writes only fire times after the job's cursor; an occurrence at or below the cursor can
    never be written again, so it may leave the unique key. One above the cursor must not leave it."""
    _tenant(engine)
    with engine.begin() as conn:
        cron = _job(conn, "hourly", "cron")
        occurrence = _ready(conn, cron, 1)
        conn.execute(text("UPDATE jobs SET materialized_through = now() - interval '2 days' WHERE id = :j"),
                     {"j": cron})
    assert all(_complete(engine, _claim(engine)))
    _finished_ago(engine, [occurrence], 2 * HOUR)
    assert _archive(engine) == 0

    with engine.begin() as conn:
        conn.execute(text("UPDATE jobs SET materialized_through = now() WHERE id = :j"), {"j": cron})
    assert _archive(engine) == 1
    # The unique key's job is done by the cursor now: the same fire time cannot come back through d2_materialise.
    fire_at = scalar(engine, "SELECT fire_at FROM execution_history WHERE id = :o", o=occurrence)
    assert scalar(engine, "SELECT count(*) FROM all_occurrences WHERE job_id = :j AND fire_at = :f",
                  j=cron, f=fire_at) == 1


def test_a_stale_worker_finishing_an_archived_attempt_is_refused_and_recorded(engine):
    _tenant(engine)
    with engine.begin() as conn:
        _ready(conn, _job(conn, "hourly", "cron"), 1)
    [stale] = _claim(engine)
    with engine.begin() as conn:  # the stale worker's lease ran out; the reaper retries the occurrence
        conn.execute(text("UPDATE attempts SET lease_expires_at = now() - interval '1 second' WHERE token = :t"),
                     {"t": stale})
        assert conn.execute(text("SELECT d2_reap(100)")).scalar_one() == 1
        conn.execute(text("UPDATE occurrences SET ready_at = now() WHERE state = 'ready'"))  # skip the backoff
    [fresh] = _claim(engine)
    assert _complete(engine, [fresh]) == [True]
    _finished_ago(engine, [scalar(engine, "SELECT id FROM occurrences")], 2 * HOUR)
    assert _archive(engine) == 1

    assert _complete(engine, [stale]) == [False]
    [rejection] = rows(engine, "SELECT token, path, detail FROM fence_rejections")
    assert (rejection.token, rejection.path, rejection.detail) == (stale, "complete", "no such attempt")
    with engine.begin() as conn:
        beat = conn.execute(text("SELECT * FROM d2_heartbeat('w', :t, :s, 30, now())"),
                            {"t": [stale], "s": [None]}).one()
    assert beat.status == "lost"
    [archived] = rows(engine, "SELECT state, attempt_log FROM execution_history")
    assert archived.state == "succeeded"
    assert [(a["token"], a["state"]) for a in archived.attempt_log] == [(stale, "lost"), (fresh, "succeeded")]


def test_retention_drops_whole_days_and_forgets_one_shot_jobs_older_than_it(engine):
    _tenant(engine)
    with engine.begin() as conn:
        old_job, recent_job = _job(conn, "old one-shot", "once"), _job(conn, "recent one-shot", "once")
        cron = _job(conn, "hourly", "cron")
        old_once, recent_once = _ready(conn, old_job, 20), _ready(conn, recent_job, 1)
        old_cron, recent_cron = _ready(conn, cron, 20), _ready(conn, cron, 1)
    assert all(_complete(engine, _claim(engine)))
    _finished_ago(engine, [old_once, old_cron], timedelta(days=20))
    _finished_ago(engine, [recent_once, recent_cron], timedelta(days=1))
    assert _archive(engine) == 4
    assert _days(engine) == [_day(engine, 20), _day(engine, 1)]
    # The archiver noted when each one-shot job's history ends; a recurring job's never does.
    assert dict(rows(engine, "SELECT id, history_until IS NOT NULL FROM jobs")) == {
        old_job: True, recent_job: True, cron: False}

    assert _rotate(engine) == 1
    assert sorted(r.id for r in rows(engine, "SELECT id FROM all_occurrences")) == [recent_once, recent_cron]
    # The old day is gone; today's and tomorrow's were made ahead of the archiver's need.
    assert _days(engine) == [_day(engine, 1), _day(engine, 0), _day(engine, -1)]

    with engine.begin() as conn:
        assert cleaner.forget_jobs(conn, RETENTION) == 1
    # The old one-shot job goes, and its idempotency key with it; the recent one and the recurring job stay.
    assert sorted(r.id for r in rows(engine, "SELECT id FROM jobs")) == sorted([recent_job, cron])
    with engine.begin() as conn:  # a second pass finds nothing
        assert (cleaner.rotate_history(conn, RETENTION), cleaner.forget_jobs(conn, RETENTION)) == (0, 0)


def test_a_reader_holding_the_history_delays_retention_instead_of_stalling_it(engine):
    """Dropping a day needs the history to itself. A long report reading it must cost the rotation a pass (it
    gives up after lock_timeout and the next pass tries again), not block the scheduler loop that runs it."""
    _tenant(engine)
    with engine.begin() as conn:
        occurrence = _ready(conn, _job(conn, "hourly", "cron"), 20)
    assert all(_complete(engine, _claim(engine)))
    _finished_ago(engine, [occurrence], timedelta(days=20))
    assert _archive(engine) == 1
    report = engine.connect()
    transaction = report.begin()
    report.execute(text("SELECT count(*) FROM all_occurrences")).scalar_one()  # holds its lock until commit
    outcome: list[int] = []
    rotation = threading.Thread(target=lambda: outcome.append(_rotate(engine)), daemon=True)
    rotation.start()
    rotation.join(timeout=30)
    assert not rotation.is_alive() and outcome == [0], "the rotation should give up, not wait for the report"
    assert _day(engine, 20) in _days(engine)

    transaction.commit()
    report.close()
    assert _rotate(engine) == 1
    assert _day(engine, 20) not in _days(engine)


def _rotate(engine) -> int:
    with engine.begin() as conn:
        return cleaner.rotate_history(conn, RETENTION)


def _days(engine) -> list[str]:
    return [r.relname for r in rows(engine, "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                                            " WHERE i.inhparent = 'execution_history'::regclass ORDER BY 1")]


def _day(engine, days_ago: int) -> str:
    """The partition name of the UTC day ``days_ago`` days before the database's today."""
    return scalar(engine, "SELECT 'execution_history_' || to_char((now() AT TIME ZONE 'UTC')::date - :d, 'YYYYMMDD')",
                  d=days_ago)


def test_two_replicas_making_the_same_days_partition_both_succeed(engine):
    """The loser of the race waits for the winner's commit, then finds the partition made."""
    day = "2026-01-02"
    winner = engine.connect()
    transaction = winner.begin()
    winner.execute(text("SELECT d2_history_partition(CAST(:d AS date))"), {"d": day})
    errors: list[BaseException] = []

    def loser() -> None:
        try:
            with engine.begin() as conn:
                conn.execute(text("SELECT d2_history_partition(CAST(:d AS date))"), {"d": day})
        except BaseException as exc:  # noqa: BLE001 -- reported by the assert below
            errors.append(exc)

    racer = threading.Thread(target=loser)
    racer.start()
    racer.join(timeout=1.0)
    assert racer.is_alive(), "the loser should be waiting on the winner's uncommitted partition"
    transaction.commit()
    winner.close()
    racer.join(timeout=30)
    assert not racer.is_alive() and errors == []
    assert scalar(engine, "SELECT count(*) FROM pg_inherits WHERE inhparent = 'execution_history'::regclass") == 1


def test_the_defaults_are_the_designs():
    storage = yaml.safe_load((ROOT / "designs" / "d2" / "scale.yaml").read_text())["storage"]
    assert cleaner.DEFAULT_RETENTION == timedelta(days=storage["retention_days"])
    assert cleaner.DEFAULT_ARCHIVE_AFTER == timedelta(minutes=storage["archive_after_minutes"])
