"""The CLI can do what the API does, through the same code (jobs.py): every JobSpec field on ``submit``, a
command for every /v1 call, the same tenant scoping, the same refusals, and --json that machines can read."""

from __future__ import annotations

import json

import pytest
import typer
from sqlalchemy import text
from typer.testing import CliRunner

from reference_impl import jobs, tenants
from reference_impl.api.app import create_app
from reference_impl.cli import app

# Each /v1 call and the command that does the same; a new call without a command fails the test below.
CLI_FOR_API = {
    ("POST", "/v1/jobs"): "submit",
    ("GET", "/v1/jobs"): "jobs list",
    ("GET", "/v1/jobs/{job_id}"): "jobs show",
    ("GET", "/v1/jobs/{job_id}/occurrences"): "executions",
    ("POST", "/v1/jobs/{job_id}/pause"): "jobs pause",
    ("POST", "/v1/jobs/{job_id}/resume"): "jobs resume",
    ("DELETE", "/v1/jobs/{job_id}"): "jobs delete",
    ("POST", "/v1/jobs/{job_id}/trigger"): "jobs trigger",
}
# Where an option's name is shorter than the field's (the unit is in its --help).
OPTION_FOR_FIELD = {"catchup_window_seconds": "catchup_window", "expected_duration_seconds": "expected_duration",
                    "retry_base_seconds": "retry_base", "max_runtime_seconds": "max_runtime"}


def command(path: str):
    found = typer.main.get_command(app)
    for part in path.split():
        found = found.commands[part]
    return found


def test_every_api_call_has_a_command_and_every_job_field_an_option():
    spec = create_app("postgresql://unused@/never-connected").openapi()
    v1 = {(method.upper(), path) for path, item in spec["paths"].items() for method in item if path.startswith("/v1")}
    assert v1 == set(CLI_FOR_API)
    for name in CLI_FOR_API.values():
        assert "as_json" in {p.name for p in command(name).params}, f"{name} has no --json"
    options = {p.name for p in command("submit").params}
    missing = [f for f in jobs.JobSpec.model_fields if OPTION_FOR_FIELD.get(f, f) not in options]
    assert not missing, f"JobSpec fields the CLI cannot set: {missing}"


@pytest.fixture
def cli(database_url, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", database_url)
    runner = CliRunner()

    def run(*args: str, expect: int = 0):
        result = runner.invoke(app, list(args))
        assert result.exit_code == expect, result.output
        assert "Traceback" not in result.output
        return json.loads(result.output) if "--json" in args and expect == 0 else result.output

    return run


def test_submit_sets_every_field_the_api_takes(cli):
    job = cli("submit", "--name", "nightly", "--handler", "sleep", "--payload", '{"seconds": 1}',
              "--cron", "30 2 * * *", "--timezone", "Europe/Paris", "--dst-gap", "skip", "--dst-overlap", "both",
              "--misfire-policy", "run_all", "--catchup-window", "600", "--max-catchup", "5",
              "--overlap-policy", "buffer_one", "--expected-duration", "120", "--max-attempts", "7",
              "--retry-base", "2.5", "--idempotency-key", "n-1", "--tenant", "acme", "--json")["job"]
    assert {k: job[k] for k in ("tenant_id", "dst_gap", "dst_overlap", "misfire_policy", "catchup_window_seconds",
                                "max_catchup", "overlap_policy", "pool", "max_attempts", "retry_base_seconds",
                                "idempotency_key", "payload")} == {
        "tenant_id": "acme", "dst_gap": "skip", "dst_overlap": "both", "misfire_policy": "run_all",
        "catchup_window_seconds": 600, "max_catchup": 5, "overlap_policy": "buffer_one", "pool": "long",
        "max_attempts": 7, "retry_base_seconds": 2.5, "idempotency_key": "n-1", "payload": {"seconds": 1}}
    refused = cli("submit", "--name", "x", "--cron", "* * * * *", "--retry-base", "-1", expect=2)
    assert "retry_base_seconds" in refused
    once = cli("submit", "--name", "payroll", "--cron", "0 9 1 * *", "--delivery", "at_most_once", "--json")["job"]
    assert (once["delivery"], once["max_attempts"]) == ("at_most_once", 1)
    refused = cli("submit", "--name", "x", "--cron", "* * * * *", "--delivery", "at_most_once", "--max-attempts", "3",
                  expect=2)
    assert "max_attempts: Value error, an at_most_once job is attempted once" in refused


def test_jobs_commands_act_like_the_api_calls(cli, engine):
    with engine.begin() as conn:
        for tenant in ("acme", "other"):
            tenants.ensure_tenant(conn, tenant)
        mine = jobs.submit(conn, "acme", jobs.JobSpec(name="mine", handler="noop", cron="0 0 1 1 *",
                                                      overlap_policy="skip"))[0]["id"]
        theirs = jobs.submit(conn, "other", jobs.JobSpec(name="theirs", handler="noop", cron="0 0 1 1 *"))[0]["id"]

    assert [j["id"] for j in cli("jobs", "list", "--json")["jobs"]] == [theirs, mine]  # the operator sees all
    assert [j["id"] for j in cli("jobs", "list", "--tenant", "acme", "--json")["jobs"]] == [mine]
    assert f"job {theirs} not found" in cli("jobs", "pause", str(theirs), "--tenant", "acme", expect=2)
    assert cli("jobs", "show", str(mine), "--json")["name"] == "mine"

    assert cli("jobs", "pause", str(mine), "--tenant", "acme", "--json")["paused"] is True
    assert [j["id"] for j in cli("jobs", "list", "--paused", "--json")["jobs"]] == [mine]
    assert cli("jobs", "resume", str(mine), "--json")["paused"] is False
    first = cli("jobs", "trigger", str(mine), "--json")
    assert (first["state"], first["reason"]) == ("ready", None)
    with engine.begin() as conn:  # claimed by a worker: the next manual run overlaps it, and the policy is skip
        conn.execute(text("SELECT * FROM d2_claim('short', 'w1', 1, 30)")).all()
    second = cli("jobs", "trigger", str(mine), "--json")
    assert (second["state"], second["reason"]) == ("skipped", "overlap:skip")
    assert "skipped" in cli("jobs", "trigger", str(mine))

    deleted = cli("jobs", "delete", str(mine), "--json")
    assert cli("jobs", "delete", str(mine), "--json")["deleted_at"] == deleted["deleted_at"] is not None
    assert "is deleted" in cli("jobs", "trigger", str(mine), expect=2)
    assert [j["id"] for j in cli("jobs", "list", "--deleted", "--json")["jobs"]] == [mine]
    assert "not one of once, cron" in cli("jobs", "list", "--kind", "daily", expect=2)
