"""claim_bounds: the claim starts its scans at the queue's head, not at the bottom of the index.

Why it exists (schema.sql): while any transaction holds an old snapshot, every row claimed or finished since leaves an
index entry nobody can mark dead, and a claim that scans from the bottom walks them all. These tests hold a real
snapshot on a second connection and count, in EXPLAIN ANALYZE of the claim, the heap rows it visits to learn that
an index entry is dead -- a count, not a timing. They also check what the bounds must never cost: a row written
below them is still claimed, and a tenant's cap is still exact.
"""

from __future__ import annotations

from helpers import scalar, wait_until
from sqlalchemy import text
from test_policies import claim, ready_backlog

from d2kit.drills.postgres_limits import claim_cycle, claim_plan, heap_fetches
from reference_impl import tenants

STALE = text("UPDATE claim_bounds SET refreshed_at = now() - interval '1 hour'")


def test_a_held_snapshot_does_not_make_the_claim_walk_what_was_claimed_since(engine):
    with engine.begin() as conn:
        tenants.create_tenant(conn, "t", max_running=100_000)
        ready_backlog(conn, "t", 6_000)
    with engine.connect() as holder:
        holder = holder.execution_options(isolation_level="REPEATABLE READ")
        with holder.begin():
            # This session idles on purpose while 300 claim cycles run; on a loaded machine that is longer than the
            # kit's 3 s idle-in-transaction timeout, which would end the very snapshot the test is about.
            holder.execute(text("SET LOCAL idle_in_transaction_session_timeout = 0"))
            holder.execute(text("SELECT count(*) FROM occurrences")).scalar_one()  # the snapshot is taken here
            for _ in range(300):
                claim_cycle(engine)  # 3,000 claimed and finished since the snapshot (batches of 10)
            with engine.begin() as conn:
                conn.execute(STALE)
                conn.execute(text("SELECT * FROM d2_claim('short', 'w', 0, 30)"))  # refreshes the bounds
            bounded = heap_fetches(claim_plan(engine))
            unbounded = heap_fetches(claim_plan(engine, from_bottom=True))  # the control: no bounds
    assert unbounded > 3_000, f"the held snapshot should have left 6,000 dead entries to walk ({unbounded})"
    assert bounded < unbounded / 10, f"with bounds: {bounded} heap fetches; from the bottom: {unbounded}"


def test_a_row_written_below_the_bounds_is_claimed_within_a_refresh(engine):
    with engine.begin() as conn:
        tenants.create_tenant(conn, "t", max_running=100_000)
        ready_backlog(conn, "t", 50)
    assert claim(engine, 10) == {"t": 10}   # the first claim refreshes: the head is the oldest of the 50
    with engine.begin() as conn:
        conn.execute(STALE)
    assert claim(engine, 10) == {"t": 10}   # refreshed again: the head is now the 21st oldest
    with engine.begin() as conn:
        late = conn.execute(text(  # a catch-up fire written late: older than the head
            "INSERT INTO occurrences (job_id, fire_at, tenant_id, pool, state, ready_at, max_attempts)"
            " SELECT job_id, now() - interval '2 hours', tenant_id, pool, 'ready', now() - interval '2 hours', 3"
            " FROM occurrences LIMIT 1 RETURNING id")).scalar_one()
        below = conn.execute(text("SELECT ready_from > now() - interval '2 hours' FROM claim_bounds"
                                  " WHERE tenant_id = 't' AND pool = 'short'")).scalar_one()
    assert below, "the late row must lie below the bounds, or this test proves nothing"
    wait_until(lambda: claim(engine, 1) and scalar(engine, "SELECT state FROM occurrences WHERE id = :i",
                                                   i=late) == "running",
               timeout=10, what="the late row to be claimed once the bounds are refreshed")


def test_a_cap_is_decided_by_an_exact_count_when_the_estimate_is_too_high(engine):
    with engine.begin() as conn:
        tenants.create_tenant(conn, "t", max_running=5)
        ready_backlog(conn, "t", 20)
    with engine.begin() as conn:
        tokens = conn.execute(text("SELECT token FROM d2_claim('short', 'w', 5, 30)")).scalars().all()
        conn.execute(STALE)
    assert claim(engine, 0) == {}   # refresh: 5 running, counted in running_before
    with engine.begin() as conn:    # two of them finish: the estimate still says 5
        conn.execute(text("SELECT * FROM d2_complete(:t, '{t,t}', '{NULL,NULL}', '{NULL,NULL}')"),
                     {"t": tokens[:2]})
        assert conn.execute(text("SELECT running_before FROM claim_bounds WHERE tenant_id = 't'"
                                 " AND pool = 'short'")).scalar_one() == 5
    assert claim(engine, 10) == {"t": 2}
    assert claim(engine, 10) == {}
