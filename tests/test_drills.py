"""The failure drills, run the way a candidate runs them: ``d2kit drill run NAME --quick --json``.

Each drill asserts its own invariants on the history in PostgreSQL; here every invariant in the JSON must
hold, and the exit status must agree. Negative controls switch off the mechanism a drill proves (a test-only
switch, never a mock) and the same invariants must then FAIL -- evidence that they can.

Select with ``pytest -m drill``; all of them take a few minutes on 2 cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from d2kit.drills import DRILLS, clock_skew, harness
from d2kit.drills import cli as drill_cli
from d2kit.drills.proxy import TcpProxy
from reference_impl import db

DRILL_TIMEOUT_SECONDS = 240


def run_drill(*args: str) -> tuple[dict, int]:
    completed = subprocess.run([sys.executable, "-m", "d2kit.cli", "drill", "run", *args, "--json"],
                               capture_output=True, text=True, timeout=DRILL_TIMEOUT_SECONDS)
    assert completed.stdout.strip(), f"no JSON on stdout; stderr:\n{completed.stderr[-3000:]}"
    return json.loads(completed.stdout), completed.returncode


def run_negative_control(name: str) -> dict:
    """Run a drill with its mechanism switched off: it must fail (each test then says which invariants)."""
    result, status = run_drill(name, "--quick", "--negative-control")
    assert status == 1 and not result["passed"], "a negative control that passes proves its invariants cannot fail"
    return result


def invariant(result: dict, starts_with: str) -> dict:
    matches = [i for i in result["invariants"] if i["name"].startswith(starts_with)]
    assert len(matches) == 1, f"expected one invariant starting {starts_with!r}, got {matches}"
    return matches[0]


@pytest.mark.drill
@pytest.mark.slow
@pytest.mark.parametrize("name", list(DRILLS))
def test_drill_holds_every_invariant_in_quick_mode(name):
    result, status = run_drill(name, "--quick")
    failed = [f"{i['name']}: {json.dumps(i['observed'], default=str)[:600]}" for i in result["invariants"]
              if not i["holds"]]
    assert not failed, "invariants that did not hold:\n" + "\n".join(failed)
    assert result["invariants"] and result["passed"] and status == 0
    assert result["drill"] == name and result["scaled"], "a drill says how it was scaled down"
    report = Path(result["report"])
    for produced in ("report.md", "report.json", "timeline.svg"):
        assert (report.parent / produced).stat().st_size > 0
    assert "<svg" in (report.parent / "timeline.svg").read_text()


@pytest.mark.drill
@pytest.mark.slow
def test_worker_partition_without_fencing_or_watchdog_fails_on_both_sides_of_the_lease():
    result = run_negative_control("worker-partition")
    effects = invariant(result, "exactly one accepted ledger effect")
    assert not effects["holds"] and len(effects["observed"]["accepted_tokens"]) == 2
    # the stale token overwrote the retry's value: the corruption fencing exists to prevent
    assert effects["observed"]["ledger_now_holds_token"] == min(effects["observed"]["accepted_tokens"])
    assert not invariant(result, "the stale copy's late ledger write was refused")["holds"]
    # the worker's side: without its watchdog it trusted every lease until the database said lost, after the expiry
    trusted = invariant(result, "the partitioned worker stopped trusting each lease by its own monotonic clock")
    assert not trusted["holds"]
    assert {trusted["observed"][job]["source"] for job in ("ledger", "charge", "cooperative")} == {"database"}
    assert all(trusted["observed"][job]["seconds_before_expiry"] < 0 for job in ("ledger", "charge", "cooperative"))
    assert not invariant(result, "the cooperative handler stopped when its lease was distrusted")["holds"]
    # ...and it failed for those reasons only: the fault itself was real and the rest still held
    assert invariant(result, "the fault was real")["holds"]
    assert invariant(result, "the occurrence was re-dispatched with a higher fencing token")["holds"]
    assert invariant(result, "the stale completion was refused and recorded")["holds"]


@pytest.mark.drill
@pytest.mark.slow
def test_replica_double_fire_without_the_unique_key_writes_the_rogue_replay_twice():
    result = run_negative_control("replica-double-fire")
    replay = invariant(result, "the fault was real: a rogue replica replayed")
    assert replay["holds"] and replay["observed"]["inserted"] == replay["observed"]["stale_jobs"] > 0
    refused = invariant(result, "the unique key refused every fire time")
    assert not refused["holds"] and refused["observed"]["refusals_recorded"] == 0
    once = invariant(result, "every job has exactly one occurrence per scheduled fire time")
    assert not once["holds"] and once["observed"]["duplicated"] == replay["observed"]["stale_jobs"]
    # the replicas themselves, crash and all, still never offered a written fire time
    assert invariant(result, "the replicas themselves never offered a written fire time")["holds"]
    assert invariant(result, "the fault was real: scheduler-2 died of SIGKILL")["holds"]


def test_clock_skew_proves_libfaketime_moves_a_child_process_clock_or_says_why_not(tmp_path):
    assert clock_skew.skew_injected(clock_skew.faketime_env(+30, tmp_path), +30) is None
    # the same request without the library preloaded: the clock does not move, and the probe says so
    unskewed = {k: v for k, v in clock_skew.faketime_env(+30, tmp_path).items() if k != "LD_PRELOAD"}
    assert "did not skew" in clock_skew.skew_injected(unskewed, +30)


def test_a_drill_that_cannot_inject_its_fault_is_not_run_never_passed(monkeypatch, server_url, tmp_path):
    def run(drill):
        drill.check("an invariant that held before the fault was tried", True, {})
        drill.not_run("the fault is unavailable on this machine")

    probe = types.ModuleType("d2kit.drills.fault_unavailable")
    probe.__doc__ = "Can the fault be injected?\n\nNot here."
    probe.FOLLOW_UP, probe.run = None, run
    monkeypatch.setitem(sys.modules, probe.__name__, probe)
    monkeypatch.setitem(DRILLS, "fault-unavailable", "fault_unavailable")
    monkeypatch.setenv("DATABASE_URL", server_url)
    monkeypatch.setattr(harness, "REPORTS_DIR", tmp_path)
    result = harness.run_drill("fault-unavailable", quick=True, live=False)
    assert result["verdict"] == "not run: the fault is unavailable on this machine"
    assert not result["passed"] and result["not_run"]
    assert "NOT RUN" in Path(result["report"]).read_text().splitlines()[0]
    assert drill_cli._exit_status([result]) == drill_cli.NOT_RUN_EXIT
    assert drill_cli._exit_status([result, {**result, "passed": False, "not_run": None}]) == 1


@pytest.mark.drill
def test_proxy_cut_drops_live_connections_and_blackholes_new_ones_until_healed(database_url):
    with TcpProxy(database_url) as proxy:
        engine = db.make_engine(proxy.url_for(database_url), pool_size=1)
        try:
            with engine.connect() as conn:
                assert conn.execute(text("SELECT 1")).scalar() == 1
                proxy.cut()
                with pytest.raises(OperationalError):  # the live connection was dropped mid-session
                    conn.execute(text("SELECT 1"))
            with pytest.raises(OperationalError):  # a new connection is never answered: the connect timeout fires
                with engine.connect() as conn:
                    conn.execute(text("SELECT 1"))
            proxy.heal()
            with engine.connect() as conn:
                assert conn.execute(text("SELECT 1")).scalar() == 1
        finally:
            engine.dispose()
    assert proxy.stats.dropped >= 1 and proxy.stats.blackholed >= 1


@pytest.mark.drill
@pytest.mark.slow
def test_catch_up_storm_without_the_admission_bucket_breaks_the_stated_rate():
    result = run_negative_control("catch-up-storm")
    rate = invariant(result, "admission rate held")
    assert not rate["holds"] and rate["observed"]["peak_dispatches_in_1s"] > rate["observed"]["allowed"]
    # the policies' promises do not depend on the bucket: they still hold
    assert all(i["holds"] for i in result["invariants"] if i["name"].startswith("misfire policy"))


@pytest.mark.drill
@pytest.mark.slow
def test_noisy_tenant_without_isolation_starves_the_victim():
    result = run_negative_control("noisy-tenant")
    wait = invariant(result, "the victim's worst wait")
    assert not wait["holds"] and wait["observed"]["wait_s"]["p100"] > 2
    assert invariant(result, "the flood was real")["holds"]


@pytest.mark.drill
@pytest.mark.slow
def test_scheduler_paused_without_session_timeouts_holds_the_jobs_for_the_whole_pause():
    result = run_negative_control("scheduler-paused")
    assert invariant(result, "the fault was real")["holds"]
    waited = invariant(result, "the other replicas materialised the locked jobs")
    assert not waited["holds"] and waited["observed"]["slowest_job_waited_s"] >= waited["observed"]["paused_s"] - 1
    assert invariant(result, "resumed, the paused pass")["observed"]["paused_transaction"] == "committed"
    # nothing was lost or doubled either way: the timeouts are about lateness, the unique key about correctness
    assert invariant(result, "every job has exactly one occurrence")["holds"]


@pytest.mark.drill
@pytest.mark.slow
def test_hung_handler_without_max_runtime_enforcement_keeps_its_slot():
    result, status = run_drill("hung-handler", "--quick", "--negative-control")
    assert status == 1 and not result["passed"]
    assert invariant(result, "the fault was real")["holds"]
    assert not invariant(result, "the slot came back")["holds"]
    assert not invariant(result, "leaked threads were contained")["holds"]
    # the database still ends the attempt timed_out when its lease runs out: the slot, not the record, is lost
    ended = invariant(result, "every hung attempt ended timed_out")
    assert not ended["holds"] and ended["observed"]["attempts"][0]["state"] == "timed_out"


@pytest.mark.drill
@pytest.mark.slow
def test_postgres_restart_without_outage_handling_runs_the_long_jobs_again():
    result = run_negative_control("postgres-restart")
    assert invariant(result, "the fault was real: PostgreSQL was down")["holds"]
    once = invariant(result, "no attempt was declared lost because of the outage alone")
    assert not once["holds"] and once["observed"]["long_pool_attempts"] > once["observed"]["long_jobs"]
    assert invariant(result, "no occurrence has two succeeded attempts")["holds"]  # wasted work, not a double effect
