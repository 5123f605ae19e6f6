"""Sub-pools (d2_sub_pool in operations.sql): a pool's tenants split by hash, one claimer per sub-pool at a time.
Claims of different sub-pools run side by side; caps stay exact because a tenant lives in one sub-pool; one
claimer still serves every sub-pool; a re-split waits for the claims under the old split. Each test holds a real
claim open on one connection and claims on another."""

from __future__ import annotations

import threading

import psycopg
import pytest
from sqlalchemy import text
from test_policies import ready_backlog

from reference_impl import tenants

CLAIM = "SELECT occurrence_id, job_id FROM d2_claim('short', %s, %s, 30)"


def split(engine, sub_pools: int) -> None:
    with engine.begin() as conn:
        conn.execute(text("UPDATE pools SET sub_pools = :n WHERE name = 'short'"), {"n": sub_pools})


def two_tenants_in_different_sub_pools(engine, max_running: int = 100, backlog: int = 20) -> tuple[str, str]:
    with engine.begin() as conn:
        sub = {name: conn.execute(text("SELECT d2_sub_pool(:t, 2)"), {"t": name}).scalar_one()
               for name in (f"tenant-{i}" for i in range(20))}
        first = next(name for name, s in sub.items() if s == 0)
        second = next(name for name, s in sub.items() if s == 1)
        for name in (first, second):
            tenants.create_tenant(conn, name, max_running=max_running)
            ready_backlog(conn, name, backlog)
    return first, second


def refresh_bounds(engine, sub_pools: int = 2) -> None:
    """Bounds for every sub-pool's tenants, committed: each tenant is then visible to every claim, so only the
    split keeps a claim to its own sub-pool's tenants (and no claim below writes bounds another one waits for)."""
    with engine.begin() as conn:
        for sub in range(sub_pools):
            conn.execute(text("SELECT d2_refresh_claim_bounds('short', :n, :s)"), {"n": sub_pools, "s": sub})


def driver_url(database_url: str) -> str:
    return database_url.replace("postgresql+psycopg://", "postgresql://")


def claimed_tenants(conn: psycopg.Connection, rows) -> set[str]:
    ids = [occurrence_id for occurrence_id, _ in rows]
    return {t for (t,) in conn.execute("SELECT DISTINCT tenant_id FROM occurrences WHERE id = ANY(%s)", [ids])}


@pytest.mark.parametrize("sub_pools", [1, 2])
def test_claims_of_different_sub_pools_run_side_by_side_and_one_sub_pool_is_serial(engine, database_url, sub_pools):
    first, second = two_tenants_in_different_sub_pools(engine)
    split(engine, sub_pools)
    refresh_bounds(engine, sub_pools)
    with psycopg.connect(driver_url(database_url)) as holder, psycopg.connect(driver_url(database_url)) as other:
        held = holder.execute(CLAIM, ["holder", 5]).fetchall()  # its transaction stays open: its lock is held
        other.execute("SET lock_timeout = '500ms'")
        if sub_pools == 1:
            # The control: one sub-pool is one claimer at a time, so the second claim waits for the first.
            with pytest.raises(psycopg.errors.LockNotAvailable):
                other.execute(CLAIM, ["other", 5]).fetchall()
            return
        took = other.execute(CLAIM, ["other", 5]).fetchall()
        assert len(held) == 5 and len(took) == 5
        # Each served the sub-pool it holds: the other tenant's rows, not rows of the tenant being claimed.
        assert len(claimed_tenants(holder, held) | claimed_tenants(other, took)) == 2
        assert claimed_tenants(holder, held).isdisjoint(claimed_tenants(other, took))
        assert claimed_tenants(holder, held) <= {first, second}


def test_caps_stay_exact_when_claims_of_sub_pools_run_side_by_side(engine, database_url):
    """A claim open on a tenant's sub-pool keeps every other claimer off that tenant, whatever it counts: the cap
    is reached once, not once per claimer."""
    first, second = two_tenants_in_different_sub_pools(engine, max_running=3)
    split(engine, 2)
    refresh_bounds(engine)
    with psycopg.connect(driver_url(database_url)) as holder:
        held = holder.execute(CLAIM, ["holder", 3]).fetchall()  # a full batch from the first sub-pool it takes
        held_tenant = claimed_tenants(holder, held)
        assert len(held) == 3 and len(held_tenant) == 1
        results: list[int] = []

        def claimer(i: int) -> None:
            with psycopg.connect(driver_url(database_url), autocommit=True) as conn:
                for _ in range(5):
                    results.append(len(conn.execute(CLAIM, [f"c{i}", 10]).fetchall()))

        threads = [threading.Thread(target=claimer, args=(i,)) for i in range(3)]
        for thread in threads:
            thread.start()
        # The others cannot finish while the holder keeps its sub-pool (they queue behind it): let them try first.
        threading.Event().wait(1.0)
        holder.commit()
        for thread in threads:
            thread.join(30)
    with engine.begin() as conn:
        running = dict(conn.execute(text("SELECT tenant_id, count(*) FROM occurrences WHERE state = 'running'"
                                         " GROUP BY 1")).all())
    assert running == {first: 3, second: 3}, running


def test_one_claimer_serves_every_sub_pool_without_an_empty_claim(engine):
    """The claim picks among the sub-pools that have something due, so a lone worker is never sent to an empty
    one while work waits in another (an empty answer would cost it a poll period)."""
    two_tenants_in_different_sub_pools(engine, backlog=10)
    split(engine, 2)
    refresh_bounds(engine)  # so that neither sub-pool is picked only for a refresh
    sizes = []
    while sum(sizes) < 20 and len(sizes) < 20:
        with engine.begin() as conn:
            sizes.append(len(conn.execute(text("SELECT * FROM d2_claim('short', 'w', 4, 30)")).all()))
    assert sum(sizes) == 20 and all(sizes), sizes


def test_a_resplit_waits_for_the_claims_under_the_old_split(engine, database_url):
    two_tenants_in_different_sub_pools(engine)
    with psycopg.connect(driver_url(database_url)) as holder, psycopg.connect(driver_url(database_url)) as other:
        assert holder.execute(CLAIM, ["holder", 5]).fetchall()
        other.execute("SET lock_timeout = '300ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            other.execute("UPDATE pools SET sub_pools = 2 WHERE name = 'short'")
        other.rollback()
        holder.commit()
        other.execute("UPDATE pools SET sub_pools = 2 WHERE name = 'short'")
        other.commit()
    with engine.begin() as conn:
        assert len(conn.execute(text("SELECT * FROM d2_claim('short', 'w', 40, 30)")).all()) > 0


def test_a_refresh_counts_only_its_own_sub_pool_so_an_open_claim_is_never_left_out_of_a_cap(engine, database_url):
    """Bounds are refreshed one sub-pool at a time, under its lock (d2_refresh_claim_bounds). A refresh of every
    tenant from another sub-pool's claim would count a tenant while a claim of its own sub-pool is open: its
    running rows not yet visible, their tokens already below the bound, so they would be counted by neither part
    of the estimate, and with a cap large against the batch the estimate decides."""
    first, second = two_tenants_in_different_sub_pools(engine, max_running=10, backlog=40)
    split(engine, 2)
    with psycopg.connect(driver_url(database_url)) as holder:
        # Hold a claim of the first tenant's sub-pool open, its bounds refreshed inside it.
        while not claimed_tenants(holder, held := holder.execute(CLAIM, ["holder", 3]).fetchall()) == {first}:
            holder.rollback()
        assert len(held) == 3

        def other_sub_pool() -> None:  # the holder has the first sub-pool, so this claim takes the second's
            with psycopg.connect(driver_url(database_url), autocommit=True) as conn:
                conn.execute(CLAIM, ["other", 3]).fetchall()

        thread = threading.Thread(target=other_sub_pool)
        thread.start()
        threading.Event().wait(0.5)
        holder.commit()
        thread.join(30)
    with psycopg.connect(driver_url(database_url), autocommit=True) as conn:
        for _ in range(30):
            conn.execute(CLAIM, ["w", 2]).fetchall()
        running = conn.execute("SELECT count(*) FROM occurrences WHERE state = 'running' AND tenant_id = %s",
                               [first]).fetchone()[0]
    assert running == 10, f"{first} has {running} running against a cap of 10"


def test_one_claim_serves_every_sub_pool_no_other_claimer_holds(engine):
    """A claim takes what is due wherever it is, as with one sub-pool: serving one sub-pool per claim left the
    other's due rows to later polls (p99 fire lag 57 ms at 833/s, measured on the bench)."""
    first, second = two_tenants_in_different_sub_pools(engine, backlog=5)
    split(engine, 2)
    with engine.begin() as conn:
        claimed = conn.execute(text("SELECT occurrence_id FROM d2_claim('short', 'w', 20, 30)")).scalars().all()
        assert dict(conn.execute(text("SELECT tenant_id, count(*) FROM occurrences WHERE id = ANY(:ids) GROUP BY 1"),
                                 {"ids": claimed}).all()) == {first: 5, second: 5}


def test_what_is_due_in_one_sub_pool_comes_before_what_is_not_yet_due_in_another(engine):
    """The claim-ahead window must not let one sub-pool's rows that are not due yet take the batch while another's
    due rows wait: a first pass takes what is due, a second what comes due ahead. Claimed eight times (each rolled
    back), so a claim that served whichever sub-pool came first in its random order would fail almost surely."""
    later, due = two_tenants_in_different_sub_pools(engine, backlog=5)
    split(engine, 2)
    with engine.begin() as conn:
        conn.execute(text("UPDATE occurrences SET ready_at = now() + interval '2 seconds' WHERE tenant_id = :t"),
                     {"t": later})
    refresh_bounds(engine)
    for _ in range(8):
        with engine.connect() as conn:
            claimed = conn.execute(text("SELECT occurrence_id FROM d2_claim('short', 'w', 5, 30, 5)")).scalars().all()
            tenants_claimed = conn.execute(text("SELECT DISTINCT tenant_id FROM occurrences WHERE id = ANY(:ids)"),
                                           {"ids": claimed}).scalars().all()
            conn.rollback()
        assert tenants_claimed == [due], tenants_claimed
