"""An existing database upgrades to exactly what a new one gets (reference_impl/sql/migrations/README.md).

The old databases are real: built from schema.sql and operations.sql as they stood at older commits (read
with git), then upgraded by the same code `d2kit db upgrade` runs, then their catalogs are compared with a
new database's."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from sqlalchemy import text

from reference_impl import db

ROOT = Path(__file__).resolve().parents[1]
# Commits whose schema a developer's .pgdata may still have: the last before versioning, and older ones that
# lack a column and have indexes that were later redefined.
OLD_SCHEMAS = {
    "before-versioning": "ba043a5",   # history kept in partitions, one-shot jobs forgotten
    "before-history": "8d10436",      # no execution_history, no jobs.history_until
    "before-claim-bounds": "28d13f4",  # old occurrences_running, no claim_bounds
    "foundation": "8db64bb",
}

CATALOG = {
    "columns": """SELECT c.relname || '.' || a.attname, format_type(a.atttypid, a.atttypmod) || ' '
                         || a.attnotnull || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
                    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
                    JOIN pg_namespace n ON n.oid = c.relnamespace
               LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                   WHERE n.nspname = 'public' AND a.attnum > 0 AND NOT a.attisdropped
                     AND c.relkind IN ('r', 'p', 'v') AND NOT c.relispartition""",
    "indexes": """SELECT i.indexname, i.indexdef FROM pg_indexes i JOIN pg_class c ON c.relname = i.indexname
                   WHERE i.schemaname = 'public' AND NOT c.relispartition""",
    "constraints": """SELECT c.relname || '.' || k.conname, pg_get_constraintdef(k.oid)
                        FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
                        JOIN pg_namespace n ON n.oid = c.relnamespace
                       WHERE n.nspname = 'public' AND NOT c.relispartition""",
    "functions": """SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')', md5(p.prosrc)
                      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'""",
    "triggers": """SELECT t.tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
                    JOIN pg_namespace n ON n.oid = c.relnamespace
                   WHERE n.nspname = 'public' AND NOT t.tgisinternal""",
    "views": """SELECT viewname, definition FROM pg_views WHERE schemaname = 'public'""",
    "relation options": """SELECT relname, array_to_string(reloptions, ',') FROM pg_class c
                             JOIN pg_namespace n ON n.oid = c.relnamespace
                            WHERE n.nspname = 'public' AND reloptions IS NOT NULL""",
    "sequences": """SELECT sequencename, data_type || ' ' || increment_by || ' ' || cache_size FROM pg_sequences
                     WHERE schemaname = 'public'""",
    "state transitions": "SELECT machine || ':' || from_state || '>' || to_state, '' FROM state_transitions",
    "pools": "SELECT name, '' FROM pools",
}


def catalog(engine) -> dict[str, dict[str, str]]:
    with engine.begin() as conn:
        return {part: dict(conn.execute(text(query)).all()) for part, query in CATALOG.items()}


def old_schema(commit: str) -> str:
    try:
        return "\n".join(subprocess.run(["git", "show", f"{commit}:reference_impl/sql/{name}"], cwd=ROOT,
                                        capture_output=True, text=True, check=True).stdout
                         for name in db.SQL_FILES)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"!! MIGRATION TEST SKIPPED: commit {commit} is not in this clone (shallow?): {exc}")


@pytest.fixture
def fresh_catalog(server_url):
    with db.scratch_database(server_url, "d2fresh") as (_, engine):
        yield catalog(engine)


@pytest.mark.parametrize("commit", OLD_SCHEMAS.values(), ids=OLD_SCHEMAS.keys())
def test_an_old_database_upgrades_to_equal_a_new_one(server_url, fresh_catalog, commit):
    with db.scratch_database(server_url, "d2old", schema=False) as (_, engine):
        with engine.begin() as conn:
            conn.connection.driver_connection.execute(old_schema(commit))
        old = catalog(engine)
        applied = db.init_schema(engine)
        assert applied == [name for _, name, _ in db.migrations()]
        upgraded = catalog(engine)
        with engine.begin() as conn:
            assert db.schema_version(conn) == db.migrations()[-1][0]
    assert old != fresh_catalog, "the old schema is already today's: this test would prove nothing"
    for part, rows in fresh_catalog.items():
        assert upgraded[part] == rows, f"{part} differ after the upgrade from {commit}"


def test_a_new_database_records_every_migration_and_upgrading_again_applies_nothing(engine):
    with engine.begin() as conn:
        assert db.schema_version(conn) == db.migrations()[-1][0]
        recorded = conn.execute(text("SELECT name FROM schema_migrations ORDER BY version")).scalars().all()
    assert recorded == [name for _, name, _ in db.migrations()]
    assert db.init_schema(engine) == []
