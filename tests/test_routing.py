"""Routing by observed duration (d2_route_by_duration): a recurring job declared short whose recent runs take as
long as the short pool's bound has its next occurrences enqueued to the long pool, scheduled or triggered.

Each execution goes through the real protocol -- trigger, claim, complete -- on a real database; the only thing
chosen by the test is how long ago the handler says it started (a worker reports that, on the database clock).
"""

from __future__ import annotations

from sqlalchemy import text

from reference_impl import jobs, router, tenants

BOUND = jobs.LONG_POOL_FROM.total_seconds()


def submit(engine, **spec) -> int:
    with engine.begin() as conn:
        tenants.ensure_tenant(conn, "t")
        return jobs.submit(conn, "t", jobs.JobSpec(name="nightly", handler="noop", cron="0 3 * * *", **spec))[0]["id"]


def run_once(engine, job_id: int, seconds: float) -> None:
    """One execution of the job that ran ``seconds``: a manual fire time, claimed from its pool, completed."""
    with engine.begin() as conn:
        pool = conn.execute(text("SELECT pool FROM d2_trigger(:j)"), {"j": job_id}).scalar_one()
    with engine.begin() as conn:
        token = conn.execute(text("SELECT token FROM d2_claim(:p, 'w', 1, 30)"), {"p": pool}).scalar_one()
    with engine.begin() as conn:
        assert conn.execute(text(
            "SELECT accepted FROM d2_complete(ARRAY[:t]::bigint[], ARRAY[true], ARRAY[NULL]::text[],"
            " ARRAY[clock_timestamp() - make_interval(secs => :s)])"), {"t": token, "s": seconds}).scalar_one()


def route(engine) -> int:
    with engine.begin() as conn:
        return router.route_by_duration(conn)


def next_pools(engine, job_id: int) -> tuple[str, str]:
    """The pool of the job's next scheduled occurrence (d2_materialise) and of a manual run (d2_enqueue)."""
    with engine.begin() as conn:
        conn.execute(text("SELECT d2_materialise(ARRAY[:j]::bigint[], ARRAY[now() + interval '1 day'],"
                          " ARRAY[NULL]::text[], '{}', '{}', '{}')"), {"j": job_id})
        scheduled = conn.execute(text("SELECT pool FROM occurrences WHERE job_id = :j AND trigger = 'schedule'"),
                                 {"j": job_id}).scalar_one()
        manual = conn.execute(text("SELECT pool FROM d2_trigger(:j)"), {"j": job_id}).scalar_one()
    return scheduled, manual


def test_a_job_declared_short_whose_runs_take_long_is_enqueued_to_the_long_pool(engine):
    job_id = submit(engine)  # nothing declared: the short pool
    for _ in range(3):
        run_once(engine, job_id, BOUND * 1.5)
    assert route(engine) == 1
    assert next_pools(engine, job_id) == ("long", "long")
    with engine.begin() as conn:  # a long-pool worker claims the manual run, with the long pool's max runtime
        [token] = conn.execute(text("SELECT token FROM d2_claim('long', 'w-long', 10, 120)")).scalars().all()
        runtime = conn.execute(text("SELECT deadline - dispatched_at FROM attempts WHERE token = :t"),
                               {"t": token}).scalar_one()
    assert round(runtime.total_seconds()) == 7 * 3600
    assert route(engine) == 0  # asked again, the same answer: nothing written


def test_one_slow_run_in_twenty_keeps_it_short_a_percentile_not_the_max(engine):
    job_id = submit(engine)
    for seconds in [1.0] * 19 + [BOUND * 2]:
        run_once(engine, job_id, seconds)
    assert route(engine) == 0
    assert next_pools(engine, job_id) == ("short", "short")


def test_a_routed_job_whose_runs_get_short_again_goes_back_to_its_declared_pool(engine):
    job_id = submit(engine)
    for _ in range(3):
        run_once(engine, job_id, BOUND * 1.5)
    assert route(engine) == 1
    for _ in range(60):
        run_once(engine, job_id, 1.0)
    assert route(engine) == 1
    assert next_pools(engine, job_id) == ("short", "short")


def test_declared_long_stays_long_however_short_its_runs(engine):
    job_id = submit(engine, pool="long")
    for _ in range(5):
        run_once(engine, job_id, 0.5)
    assert route(engine) == 0
    assert next_pools(engine, job_id) == ("long", "long")
