"""The schema applies idempotently and the state machines are enforced by the database itself."""

import re
import time

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from reference_impl import db, policies, states


def test_schema_is_idempotent(engine):
    db.init_schema(engine)  # second application: no error, nothing duplicated
    with engine.begin() as conn:
        assert conn.execute(text("SELECT count(*) FROM state_transitions")).scalar() == 19
        assert conn.execute(text("SELECT count(*) FROM pools")).scalar() == 2


def _occurrence(conn, state: str) -> int:
    conn.execute(text("INSERT INTO tenants (id, api_key_hash) VALUES ('t', 'h') ON CONFLICT DO NOTHING"))
    job = conn.execute(text(
        "INSERT INTO jobs (tenant_id, name, handler, pool, schedule_kind, run_at, materialized_through)"
        " VALUES ('t', 'j', 'noop', 'short', 'once', now(), now()) RETURNING id")).scalar()
    return conn.execute(text(
        "INSERT INTO occurrences (job_id, fire_at, tenant_id, pool, state, ready_at, max_attempts)"
        " VALUES (:j, now(), 't', 'short', :s, now(), 1) RETURNING id"), {"j": job, "s": state}).scalar()


def test_illegal_occurrence_transition_fails(engine):
    with engine.begin() as conn:
        occ = _occurrence(conn, "ready")
        conn.execute(text("UPDATE occurrences SET state = 'running' WHERE id = :o"), {"o": occ})
        conn.execute(text("UPDATE occurrences SET state = 'succeeded', finished_at = now() WHERE id = :o"), {"o": occ})
    with pytest.raises(IntegrityError, match="illegal occurrence transition: succeeded -> ready"):
        with engine.begin() as conn:
            conn.execute(text("UPDATE occurrences SET state = 'ready' WHERE id = :o"), {"o": occ})


def test_occurrence_cannot_be_born_running(engine):
    with pytest.raises(IntegrityError, match="illegal occurrence transition: new -> running"):
        with engine.begin() as conn:
            _occurrence(conn, "running")


def test_a_terminal_occurrence_must_say_when_it_finished(engine):
    # occurrences_unfinished (the overlap policies' index) is keyed on finished_at IS NULL, so the database keeps
    # "finished_at is set" and "the state is terminal" the same fact.
    with engine.begin() as conn:
        occ = _occurrence(conn, "ready")
        conn.execute(text("UPDATE occurrences SET state = 'running' WHERE id = :o"), {"o": occ})
    with pytest.raises(IntegrityError, match="finished_iff_terminal"):
        with engine.begin() as conn:
            conn.execute(text("UPDATE occurrences SET state = 'succeeded' WHERE id = :o"), {"o": occ})
    with pytest.raises(IntegrityError, match="finished_iff_terminal"):
        with engine.begin() as conn:
            conn.execute(text("UPDATE occurrences SET finished_at = now() WHERE id = :o"), {"o": occ})


def test_a_service_session_that_stalls_mid_transaction_is_ended_by_the_server(database_url):
    """The timeouts every service session carries (db.session_settings): a transaction left idle past the limit
    is ended by PostgreSQL -- its locks with it -- and a runaway statement is cancelled."""
    service = db.make_engine(database_url, pool_size=1)
    try:
        with service.connect() as conn:
            assert conn.execute(text("SHOW statement_timeout")).scalar() == f"{db.STATEMENT_TIMEOUT_SECONDS}s"
            with pytest.raises(Exception, match="statement timeout"):
                conn.execute(text("SET LOCAL statement_timeout = '100ms'; SELECT pg_sleep(1)"))
            conn.rollback()
            conn.execute(text("SET idle_in_transaction_session_timeout = '200ms'"))
            conn.execute(text("SELECT 1"))  # a transaction is open, and the client stalls
            time.sleep(0.6)
            with pytest.raises(Exception, match="idle-in-transaction|terminat|closed"):
                conn.execute(text("SELECT 1"))
    finally:
        service.dispose()
    drills_own = db.make_engine(database_url, pool_size=1, timeouts=False)
    try:
        with drills_own.connect() as conn:
            assert conn.execute(text("SHOW idle_in_transaction_session_timeout")).scalar() == "0"
    finally:
        drills_own.dispose()


# Where Python names what schema.sql constrains (reference_impl/states.py, policies.py): (table, column) -> names.
NAMED_IN_PYTHON = {
    ("jobs", "schedule_kind"): states.SCHEDULE_KINDS,
    ("jobs", "dst_gap"): states.DST_GAP,
    ("jobs", "dst_overlap"): states.DST_OVERLAP,
    ("jobs", "misfire_policy"): policies.MISFIRE_POLICIES,
    ("jobs", "overlap_policy"): policies.OVERLAP_POLICIES,
    ("jobs", "delivery"): policies.DELIVERY,
    ("occurrences", "trigger"): states.TRIGGERS,
    ("execution_history", "state"): states.OCCURRENCE_TERMINAL,
}


def test_python_names_what_the_schema_constrains(engine):
    with engine.begin() as conn:
        checks = conn.execute(text(
            "SELECT c.relname, pg_get_constraintdef(k.oid) FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid"
            " WHERE k.contype = 'c' AND NOT c.relispartition")).all()
        machines = conn.execute(text("SELECT machine, from_state, to_state FROM state_transitions")).all()
        pools = set(conn.execute(text("SELECT name FROM pools")).scalars())
        open_states = conn.execute(text(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'finished_iff_terminal'")).scalar()
    constrained = {}
    for table, definition in checks:
        if match := re.fullmatch(r"CHECK \(\(?(\w+) = ANY \(ARRAY\[(.*)\]\)\)\)?", definition):
            constrained[(table, match.group(1))] = set(re.findall(r"'(\w+)'::text", match.group(2)))
    for key, names in NAMED_IN_PYTHON.items():
        assert constrained[key] == set(names), key
    reached = {m: {to for machine, _, to in machines if machine == m} for m in ("occurrence", "attempt")}
    assert reached["occurrence"] == set(states.OCCURRENCE_STATES)
    assert reached["attempt"] == set(states.ATTEMPT_STATES)
    assert set(re.findall(r"'(\w+)'::text", open_states)) == set(states.OCCURRENCE_OPEN)
    assert pools == set(states.POOLS)


def test_materialise_records_every_fire_time_the_unique_key_refused(engine):
    """A pass offering fire times that already have their occurrence (a stale cursor replayed) inserts nothing for
    them and records each one, as many times as it was offered -- for jobs that allow overlap (the set-based INSERT)
    and for one that does not (d2_enqueue)."""
    materialise = text("SELECT d2_materialise(CAST(:jobs AS bigint[]), CAST(:fires AS timestamptz[]),"
                       " CAST(:reasons AS text[]), '{}', '{}', '{}')")
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO tenants (id, api_key_hash) VALUES ('t', 'h')"))
        allow, skip = conn.execute(text(
            "INSERT INTO jobs (tenant_id, name, handler, pool, schedule_kind, cron, materialized_through,"
            "                  overlap_policy)"
            " VALUES ('t', 'a', 'noop', 'short', 'cron', '* * * * *', now(), 'allow'),"
            "        ('t', 's', 'noop', 'short', 'cron', '* * * * *', now(), 'skip') RETURNING id")).scalars().all()
        first = ["2030-01-01 00:00+00", "2030-01-01 00:01+00"]
        assert conn.execute(materialise, {"jobs": [allow, allow, skip], "fires": [*first, first[0]],
                                          "reasons": [None] * 3}).scalar_one() == 3
        assert conn.execute(text("SELECT count(*) FROM duplicate_fire_refusals")).scalar_one() == 0
        # Replayed: both of the first pass's fire times again (one of them twice), one new, and the skip job's.
        offered = {"jobs": [allow, allow, allow, allow, skip], "reasons": [None] * 5,
                   "fires": [first[0], first[0], first[1], "2030-01-01 00:02+00", first[0]]}
        assert conn.execute(materialise, offered).scalar_one() == 1
        refused = conn.execute(text("SELECT job_id, fire_at::text FROM duplicate_fire_refusals ORDER BY 1, 2")).all()
        assert [(job, fire[:16]) for job, fire in refused] == [
            (allow, "2030-01-01 00:00"), (allow, "2030-01-01 00:00"), (allow, "2030-01-01 00:01"),
            (skip, "2030-01-01 00:00")]
        assert conn.execute(text("SELECT count(*) FROM occurrences")).scalar_one() == 4
