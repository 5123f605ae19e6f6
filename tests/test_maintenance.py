"""A scheduler replica's maintenance services fail one at a time (reference_impl/maintenance.py).

The fault is real: the test database's d2_rotate_history is replaced by one that raises, so every retention
pass fails inside PostgreSQL. The replica must keep its liveness heartbeat and keep materialising."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from helpers import scalar
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError

from reference_impl import db, jobs, materializer, tenants
from reference_impl.scheduler import Scheduler, SchedulerConfig
from reference_impl.worker import WorkerConfig

# Services whose SQL function the test replaces with one that raises: a real fault, inside PostgreSQL.
# materialise runs every pass: a replica whose passes stop at the first failure would do nothing else at all.
BROKEN = {"rotate_history": "d2_rotate_history", "materialise": "d2_materialise"}


def break_function(conn, name: str) -> None:
    arguments = conn.execute(text("SELECT pg_get_function_arguments(CAST(:f AS regproc))"), {"f": name}).scalar()
    conn.execute(text(f"CREATE OR REPLACE FUNCTION {name}({arguments}) RETURNS integer LANGUAGE plpgsql"
                      " AS $$ BEGIN RAISE EXCEPTION 'injected fault'; END $$"))


@pytest.fixture
def replica(database_url):
    config = SchedulerConfig("maint-1", heartbeat_every_seconds=0.2, retention_every_seconds=0.2)
    scheduler = Scheduler(database_url, config)
    thread = threading.Thread(target=scheduler.run, daemon=True)
    yield scheduler, thread
    scheduler.stop.set()
    if thread.ident is not None:
        thread.join(timeout=10)


@pytest.mark.parametrize("broken", BROKEN)
def test_one_failing_service_stops_none_of_the_others(engine, replica, broken):
    scheduler, thread = replica
    with engine.begin() as conn:
        break_function(conn, BROKEN[broken])
        tenants.ensure_tenant(conn, "t")
        job, _ = jobs.submit(conn, "t", jobs.JobSpec(name="due", handler="noop", run_at=datetime.now(UTC)))
    thread.start()
    services = scheduler.services
    assert services[broken].wait_for_passes(5, timeout=30)
    assert services["heartbeat"].wait_for_passes(3, timeout=30)
    first_beat = scalar(engine, "SELECT heartbeat_at FROM processes WHERE id = 'maint-1'")
    assert services["heartbeat"].wait_for_passes(services["heartbeat"].passes + 2, timeout=30)

    assert services[broken].failures >= 5 and "injected fault" in services[broken].last_error
    healthy = {name: s for name, s in services.items() if name != broken}
    assert all(s.failures == 0 and s.passes >= 1 for s in healthy.values()), \
        {name: (s.passes, s.failures, s.last_error) for name, s in healthy.items()}
    assert scalar(engine, "SELECT heartbeat_at FROM processes WHERE id = 'maint-1'") > first_beat
    materialised = scalar(engine, "SELECT count(*) FROM occurrences WHERE job_id = :j", j=job["id"])
    assert materialised == (0 if broken == "materialise" else 1)


@pytest.mark.parametrize(("make", "field"), [
    (lambda: SchedulerConfig("s", reap_every_seconds=0), "reap_every_seconds"),
    (lambda: SchedulerConfig("s", retention=timedelta(minutes=5)), "retention"),
    (lambda: WorkerConfig("w", lease_seconds=3, heartbeat_seconds=3), "heartbeat_seconds"),
    (lambda: WorkerConfig("w", lease_seconds=10, heartbeat_seconds=9.5), "heartbeat_seconds"),
    (lambda: WorkerConfig("w", concurrency=0), "concurrency"),
])
def test_a_config_that_cannot_work_is_refused_naming_the_field(make, field):
    with pytest.raises(ValueError, match=field):
        make()


@pytest.mark.parametrize("grace", [5.0, 0.0], ids=["with-grace", "without-grace"])
def test_back_from_an_outage_a_replica_reaps_nothing_for_one_grace(engine, database_url, grace):
    """A lease that ran out while the database was unreachable ran out because nobody could heartbeat: a replica
    whose last reap pass failed reaps nothing until it has been back for the grace, and the workers' retried
    heartbeats renew the lease first. Without the grace (the postgres-restart drill's negative control turns it
    off) the first pass that reaches the database reaps it. The outage is real: nothing listens on port 1."""
    with engine.begin() as conn:
        tenants.ensure_tenant(conn, "t")
        job, _ = jobs.submit(conn, "t", jobs.JobSpec(name="long", handler="noop", run_at=datetime.now(UTC)))
        conn.execute(text("SELECT d2_trigger(:j)"), {"j": job["id"]})
    with engine.begin() as conn:  # its lease runs out at once, as during an outage longer than the lease
        conn.execute(text("SELECT * FROM d2_claim('short', 'w', 1, 0.001)"))
    scheduler = Scheduler(database_url, SchedulerConfig("s", reap_grace_seconds=grace))
    reap = scheduler.services["reap"]
    unreachable = db.make_engine("postgresql://nobody@127.0.0.1:1/nothing", pool_size=1)
    try:
        reap.run_if_due(unreachable, time.monotonic())
        assert reap.failures == 1
        reaped = reap.run_if_due(scheduler.engine, reap.next_due)
    finally:
        unreachable.dispose()
        scheduler.engine.dispose()
    assert reap.last_error is None
    attempt = scalar(engine, "SELECT state FROM attempts")
    assert (reaped, attempt) == ((0, "running") if grace else (1, "lost"))


@pytest.mark.slow
@pytest.mark.parametrize("share", [materializer.PLANNING_SHARE_OF_IDLE_TIMEOUT, 10.0],
                         ids=["budgeted-passes", "unbudgeted-passes"])
def test_a_catch_up_pass_plans_within_the_idle_timeout(engine, database_url, monkeypatch, share):
    """Planning runs inside the pass's transaction, so a pass that plans for longer than the session's
    idle_in_transaction_session_timeout is ended with all its work, and would be ended the same way every time: the
    replica never catches up. Here the timeout is 200 ms and 50 jobs have six hours of missed per-minute fire times
    each (real planning, real timeout): each pass plans for a third of the session's timeout, writes what it
    planned, and the passes catch up; allowed ten times the timeout (the control), every pass is ended. (Two hours
    were enough while the fire times were sent as text arrays, whose building took as long as the planning; sent in
    binary, an unbudgeted pass of two hours fitted in the timeout and the control no longer failed.)"""
    monkeypatch.setattr(materializer, "PLANNING_SHARE_OF_IDLE_TIMEOUT", share)
    with engine.begin() as conn:
        tenants.ensure_tenant(conn, "t")
        for i in range(50):
            jobs.submit(conn, "t", jobs.JobSpec(name=f"minutely-{i}", handler="noop", cron="* * * * *"))
        conn.execute(text("UPDATE jobs SET materialized_through = now() - interval '6 hours',"
                          " next_fire_at = now() - interval '6 hours'"))
    slow = create_engine(db.sqlalchemy_url(database_url), pool_pre_ping=True,
                         connect_args={"options": "-c idle_in_transaction_session_timeout=200"})
    budgeted = share < 1
    failed = finished = 0
    try:
        for _ in range(200 if budgeted else 3):
            if not scalar(engine, "SELECT count(*) FROM jobs WHERE next_fire_at < now()"):
                break
            try:
                with slow.begin() as conn:
                    materializer.materialise_due(conn)
                finished += 1
            except DBAPIError as exc:
                assert "idle-in-transaction timeout" in str(exc)
                failed += 1
    finally:
        slow.dispose()
    behind = scalar(engine, "SELECT count(*) FROM jobs WHERE next_fire_at < now()")
    if budgeted:
        assert behind == 0 and finished >= 2  # caught up, in more than one pass: the budget cut the first short
    else:
        assert behind == 50 and finished == 0 and failed == 3  # the fault is real: unbudgeted, each pass is ended
