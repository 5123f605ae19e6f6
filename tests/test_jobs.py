"""Submitting jobs: validation names the field and writes nothing; idempotency keys return the same job."""

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError
from sqlalchemy import text

from reference_impl import jobs, tenants


def job_count(engine) -> int:
    with engine.begin() as conn:
        return conn.execute(text("SELECT count(*) FROM jobs")).scalar_one()


@pytest.fixture
def tenant(engine) -> str:
    with engine.begin() as conn:
        tenants.ensure_tenant(conn, "acme")
    return "acme"


def test_idempotent_submit_returns_the_same_job(engine, tenant):
    spec = jobs.JobSpec(name="report", handler="noop", cron="0 9 * * *", timezone="Europe/Paris",
                        idempotency_key="report-v1")
    with engine.begin() as conn:
        first, created_first = jobs.submit(conn, tenant, spec)
    with engine.begin() as conn:
        second, created_second = jobs.submit(conn, tenant, spec)
    assert (created_first, created_second) == (True, False)
    assert first["id"] == second["id"]
    assert job_count(engine) == 1


def test_same_key_for_another_tenant_is_another_job(engine, tenant):
    spec = jobs.JobSpec(name="report", handler="noop", run_at=datetime.now(UTC), idempotency_key="k")
    with engine.begin() as conn:
        tenants.ensure_tenant(conn, "other")
        a, _ = jobs.submit(conn, tenant, spec)
        b, _ = jobs.submit(conn, "other", spec)
    assert a["id"] != b["id"]


def test_new_cron_job_starts_from_the_database_clock(engine, tenant):
    with engine.begin() as conn:
        job, _ = jobs.submit(conn, tenant, jobs.JobSpec(name="tick", handler="noop", cron="* * * * *"))
        db_now = conn.execute(text("SELECT now()")).scalar_one()
    assert job["materialized_through"] <= db_now < job["next_fire_at"] <= db_now + timedelta(minutes=1)


BAD_INPUTS = [
    ({"cron": "61 * * * *"}, "cron"),
    ({"cron": "H(50-70) * * * *"}, "cron"),  # a hashed range outside the minute field
    ({"cron": "H/0 * * * *"}, "cron"),
    ({"cron": "* * * * *", "timezone": "Mars/Olympus_Mons"}, "timezone"),
    ({"run_at": datetime.now(UTC), "handler": "rm_rf"}, "handler"),
    ({"run_at": datetime.now(UTC) + timedelta(days=365 * 20)}, "run_at"),
    ({"run_at": datetime(2026, 1, 1, 9)}, "run_at"),  # no offset: ambiguous
    ({"run_at": datetime.now(UTC), "payload": {"blob": "x" * 70_000}}, "payload"),
    ({"run_at": datetime.now(UTC), "handler": "sleep", "payload": {"seconds": "ten"}}, "payload.seconds"),
    ({}, "run_at"),  # neither run_at nor cron
    ({"run_at": datetime.now(UTC), "cron": "* * * * *"}, "run_at"),  # both
    ({"run_at": datetime.now(UTC), "misfire_policy": "sometimes"}, "misfire_policy"),
    ({"run_at": datetime.now(UTC), "delivery": "exactly_once"}, "delivery"),
    ({"run_at": datetime.now(UTC), "delivery": "at_most_once", "max_attempts": 3}, "max_attempts"),
]


@pytest.mark.parametrize(("fields", "field_named"), BAD_INPUTS)
def test_bad_input_names_the_field_and_writes_nothing(engine, tenant, fields, field_named):
    before = job_count(engine)
    with pytest.raises(ValidationError) as error:
        jobs.JobSpec(**{"name": "bad", "handler": "noop", **fields})
    described = " ".join(f"{'.'.join(map(str, e['loc']))} {e['msg']}" for e in error.value.errors())
    assert field_named in described
    assert job_count(engine) == before


def d2kit(database_url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reference_impl.cli", *args], capture_output=True, text=True,
                          env={"DATABASE_URL": database_url, "PATH": "/usr/bin:/bin"}, timeout=60)


def test_cli_rejects_bad_input_with_the_field_and_no_traceback(database_url, engine):
    result = d2kit(database_url, "submit", "--name", "x", "--cron", "* * * *", "--timezone", "Nowhere/Land")
    assert result.returncode == 2
    assert "cron:" in result.stdout and "timezone:" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    assert job_count(engine) == 0


def test_cli_submit_and_executions_as_json(database_url):
    created = d2kit(database_url, "submit", "--name", "x", "--run-at", "now", "--idempotency-key", "a", "--json")
    again = d2kit(database_url, "submit", "--name", "x", "--run-at", "now", "--idempotency-key", "a", "--json")
    first, second = json.loads(created.stdout), json.loads(again.stdout)
    assert first["created"] is True and second["created"] is False
    assert first["job"]["id"] == second["job"]["id"]
    history = d2kit(database_url, "executions", str(first["job"]["id"]), "--json")
    assert json.loads(history.stdout) == []  # nothing materialised yet: no scheduler is running


def test_cli_executions_shows_a_hashed_schedule_resolved(database_url):
    created = d2kit(database_url, "submit", "--name", "nightly-report", "--cron", "H 3 * * *", "--json")
    job = json.loads(created.stdout)["job"]
    minute = job["cron"].split()[0]
    assert minute.isdigit() and job["cron"] == f"{minute} 3 * * *"  # stored resolved, as the API returns it
    shown = d2kit(database_url, "executions", str(job["id"]))
    assert f"{minute} 3 * * * (UTC)" in shown.stdout and "H 3" not in shown.stdout


def test_pause_resume_delete_and_trigger(engine, tenant):
    with engine.begin() as conn:
        job, _ = jobs.submit(conn, tenant, jobs.JobSpec(name="j", handler="noop", cron="* * * * *"))
        jobs.set_paused(conn, job["id"], True)
        assert jobs.get(conn, tenant, job_id=job["id"])["paused"] is True
        jobs.set_paused(conn, job["id"], False)
        manual = jobs.trigger(conn, job["id"])["occurrence_id"]
        jobs.delete(conn, job["id"])
        state, reason = conn.execute(text("SELECT state, reason FROM occurrences WHERE id = :o"), {"o": manual}).one()
        deleted = jobs.get(conn, tenant, job_id=job["id"])
    assert (state, reason) == ("cancelled", "job deleted")
    assert deleted["deleted_at"] is not None and deleted["next_fire_at"] is None


def test_a_tenant_cannot_read_another_tenants_job(engine, tenant):
    with engine.begin() as conn:
        tenants.ensure_tenant(conn, "other")
        job, _ = jobs.submit(conn, tenant, jobs.JobSpec(name="j", handler="noop", cron="* * * * *"))
        assert jobs.get(conn, "other", job_id=job["id"]) is None
        assert jobs.get(conn, tenant, job_id=job["id"]) is not None
