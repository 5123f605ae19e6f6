"""The bench's profile (d2kit/bench/profile.py): py-spy's stacks summarised by function, and a real attach; the
database's backends sampled from pg_stat_activity on a real server."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter

import pytest
from sqlalchemy import text

from d2kit.bench.profile import (
    SAMPLES_PER_SECOND,
    DatabaseActivity,
    PythonProfile,
    backends_by_activity,
    py_spy,
    statement_name,
    top_functions,
)


def test_a_functions_lines_add_up_and_shares_are_of_all_samples():
    raw = [
        "main (app.py:10);plan (app.py:20);dump (lib.py:5) 6",
        "main (app.py:10);plan (app.py:22) 3",
        "main (app.py:11);wait (lib.py:9) 1",
        "a malformed line",
    ]
    summary = top_functions(raw, seconds=1.0)
    assert summary["samples"] == 10
    assert summary["gil_held_percent_of_one_core"] == round(100 * 10 / SAMPLES_PER_SECOND, 1)
    by_name = {f["function"]: f for f in summary["top_self"]}
    assert by_name["dump (lib.py)"]["self_share"] == 0.6
    assert by_name["plan (app.py)"]["self_share"] == 0.3           # lines 20 and 22 are one function
    assert by_name["plan (app.py)"]["total_share"] == 0.9          # on the stack in 9 of 10 samples
    assert "main (app.py)" not in by_name                          # never running itself
    assert summary["top_self"][0]["function"] == "dump (lib.py)"


def test_no_samples_is_an_empty_profile_not_an_error():
    assert top_functions([], seconds=2.0) == {"samples": 0, "gil_held_percent_of_one_core": 0.0, "top_self": []}


def test_a_statement_is_named_by_the_function_it_calls_else_by_its_first_words():
    assert statement_name("SELECT * FROM d2_claim('short', 'w1', 64, 30, 0.1)") == "d2_claim"
    assert statement_name("SELECT token, accepted\n  FROM d2_complete ($1, $2, $3, $4)") == "d2_complete"
    insert = "INSERT INTO jobs (tenant_id, name, handler) VALUES ($1, $2, $3)"
    assert statement_name(insert) == "INSERT INTO jobs (tenant_id, name,"


def test_backends_are_sample_counts_over_samples_and_idle_in_transaction_is_not_active():
    counts = Counter({("d2_claim", "CPU"): 54, ("d2_claim", "Lock/transactionid"): 44,
                      ("d2_complete", "CPU"): 27, ("d2_claim", "idle in transaction"): 10})
    summary = backends_by_activity(counts, samples=100)
    assert summary["mean_active_backends"] == 1.25                 # (54 + 44 + 27) / 100; the idle 10 excluded
    assert summary["top"][0] == {"statement": "d2_claim", "activity": "CPU", "backends": 0.54}
    assert [row["backends"] for row in summary["top"]] == [0.54, 0.44, 0.27, 0.1]


def test_it_sees_a_backend_waiting_on_a_row_lock_and_the_holder_idle_in_its_transaction(engine):
    """Two real backends: one holds a row lock and sits idle in its transaction, one waits for that lock inside a
    d2_* call. The sampler must name each by its statement and activity."""
    with engine.begin() as conn:
        conn.execute(text("CREATE FUNCTION d2_wait_for_pool() RETURNS void LANGUAGE sql AS "
                          "$$ SELECT 1 FROM pools WHERE name = 'short' FOR UPDATE $$"))
    holder = engine.connect()
    holder_tx = holder.begin()
    holder.execute(text("SELECT 1 FROM pools WHERE name = 'short' FOR UPDATE"))
    waiter_done = threading.Event()

    def wait_for_the_lock():
        with engine.begin() as conn:
            conn.execute(text("SELECT d2_wait_for_pool()"))
        waiter_done.set()

    waiter = threading.Thread(target=wait_for_the_lock, daemon=True)
    waiter.start()
    activity = DatabaseActivity(engine)
    activity.start()
    time.sleep(0.6)
    summary = activity.result()
    holder_tx.rollback()
    holder.close()
    assert waiter_done.wait(10)
    assert "not_run" not in summary, summary
    rows = {(row["statement"], row["activity"]): row["backends"] for row in summary["top"]}
    assert summary["samples"] >= 10
    assert rows.get(("d2_wait_for_pool", "Lock/transactionid"), 0) > 0.8, rows    # waiting nearly every sample
    assert rows.get(("SELECT 1 FROM pools WHERE", "idle in transaction"), 0) > 0.8, rows
    assert summary["mean_active_backends"] < 1.2                   # the holder is idle, not active


BUSY = textwrap.dedent("""
    import time
    def spin_the_interpreter():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            sum(range(1000))
    spin_the_interpreter()
""")


def test_it_attaches_to_a_running_process_and_names_where_its_cpu_goes():
    if py_spy() is None:
        pytest.skip("!! PROFILE NOT TESTED: py-spy is not installed "
                    "(it is a dependency of the kit: `make test` installs it)")
    busy = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        time.sleep(0.5)
        profile = PythonProfile({"worker": [busy.pid]}, seconds=2).result()
    finally:
        busy.kill()
        busy.wait()
    if "not permitted" in str(profile.get("not_run", "")).lower():
        pytest.skip(f"!! PROFILE NOT TESTED: this machine does not let py-spy attach (ptrace): {profile['not_run']}")
    assert "not_run" not in profile, profile
    worker = profile["worker"]
    assert worker["samples"] > 0
    assert worker["top_self"][0]["function"].startswith("spin_the_interpreter"), worker["top_self"][:3]
    assert worker["gil_held_percent_of_one_core"] > 50  # a busy loop holds the GIL nearly all the time


def test_the_load_tests_page_renders_the_profile_from_the_results_file(tmp_path, monkeypatch):
    from d2kit.site import design_doc

    profile = {"offered_per_second": 2000, "executions_per_second": 1998.8,
               "fire_lag_ms": {"p50": 13.0, "p95": 41.5, "p99": 54.8, "max": 69.6},
               "cpu_percent": {"postgres": 34.9, "worker": 16.1, "machine": 94.9},
               "cost_per_execution": {"calls": {"d2_claim": 0.061, "d2_complete": 0.05},
                                      "database_us": {"d2_claim": 401.2, "d2_complete": 142.0},
                                      "database_self_us": {"d2_claim": 382.7, "d2_complete": 64.3}},
               "python_profile": {"worker": {"samples": 197, "gil_held_percent_of_one_core": 24.6, "top_self": [
                   {"function": "Worker.run (reference_impl/worker.py)", "self_share": 0.096, "total_share": 0.457}]},
                   "scheduler": {"samples": 0, "gil_held_percent_of_one_core": 0.0, "top_self": []}},
               "database_activity": {"samples": 5900, "interval_ms": 10.0, "mean_active_backends": 1.41, "top": [
                   {"statement": "d2_claim", "activity": "CPU", "backends": 0.54},
                   {"statement": "d2_claim", "activity": "Lock/transactionid", "backends": 0.44}]}}
    path = tmp_path / "latest.json"
    path.write_text(json.dumps({"bench": {"profile": profile}}))
    monkeypatch.setattr(design_doc, "LOAD_RESULTS", path)
    page = design_doc.render("load-tests.md.j2", site=True)
    section = page.split("## Where the time goes at the maximum rate", 1)[1].split("\n## ", 1)[0]
    assert "At 2,000 executions/s offered" in section
    assert "| `d2_claim` | 0.061 | 382.7 | 401.2 |" in section
    assert section.index("`d2_claim`") < section.index("`d2_complete`")  # biggest own time first
    assert "held the GIL 24.6% of one core" in section
    assert "| `Worker.run (reference_impl/worker.py)` | 9.6% | 45.7% |" in section
    assert "on average\n1.41 were running a statement" in section
    assert "| `d2_claim` | Lock/transactionid | 0.440 |" in section
    assert section.index("PostgreSQL's backends") < section.index("**worker** processes")

    profile["python_profile"] = {"not_run": "py-spy is not installed"}
    profile["database_activity"] = {"not_run": "pg_stat_activity could not be sampled: no samples"}
    path.write_text(json.dumps({"bench": {"profile": profile}}))
    page = design_doc.render("load-tests.md.j2")
    assert "The Python profile was not taken: py-spy is not installed." in page
    assert "The database's backends were not sampled: pg_stat_activity could not be sampled: no samples." in page

    path.write_text(json.dumps({"bench": {}}))
    assert "Not measured yet: `d2kit bench run --only profile`" in design_doc.render("load-tests.md.j2")


def test_section_8_says_what_breaks_first_from_the_measured_run(tmp_path, monkeypatch):
    from d2kit.site import design_doc

    bench = {"max_rate": {"max_sustainable_per_second": 2000.0, "lag_limit_ms": 100.0, "steps": [
                 {"offered_per_second": 2000, "sustainable": True, "p99_lag_ms_median": 19.1},
                 {"offered_per_second": 3000, "sustainable": False, "p99_lag_ms_median": 878.3,
                  "runs": [{"backlog_max_by_stage": {"unclaimed": 40, "unmaterialised": 5200}}]}]},
             "profile": {"offered_per_second": 2000, "executions_per_second": 1998.8,
                         "cpu_percent": {"postgres": 61.0, "worker": 25.0, "machine": 97.0},
                         "cost_per_execution": {"index_entries_at_most": 33.0,
                                                "database_self_us": {"d2_claim": 300.0, "d2_settle": 100.0}}}}
    path = tmp_path / "latest.json"
    path.write_text(json.dumps({"bench": bench}))
    monkeypatch.setattr(design_doc, "LOAD_RESULTS", path)
    section = design_doc.render_reference_design().split("## 8.", 1)[1].split("\n## ", 1)[0]
    said = " ".join(section.split("**What measuring says breaks first**", 1)[1].split())
    assert "sustains 2,000 executions/s, 2.4× the peak, not 10×." in said
    assert "At 3,000/s p99 fire lag was 878 ms" in said
    assert "what piled up was fire times due but not yet materialised (up to 5,200; 40 not yet claimed)" in said
    assert "what runs out is CPU per execution" in said
    assert "`d2_claim`'s own statements take 300 µs (75%)" in said
    assert "up to 33 index entries" in said

    bench["profile"]["cpu_percent"]["machine"] = 60.0
    path.write_text(json.dumps({"bench": bench}))
    said = " ".join(design_doc.render_reference_design().split())
    assert "the CPU was not used up, so a serial step ran out first, the materialiser" in said
    assert "in the order the measurements give: relieve the materialiser (more replicas" in said
    assert "relieve the claim" not in said

    bench["max_rate"]["steps"][1]["runs"][0]["backlog_max_by_stage"] = {"unclaimed": 9000, "unmaterialised": 0}
    path.write_text(json.dumps({"bench": bench}))
    said = " ".join(design_doc.render_reference_design().split())
    assert "occurrences due but not yet claimed (up to 9,000; 0 not yet materialised)" in said
    assert "a serial step ran out first, the claim" in said
    assert ("in the order the measurements give: relieve the claim (the sub-pools above, once the lag they added is"
            " understood), then make") in said
    assert "relieve the materialiser" not in said

    met = json.loads(json.dumps(bench))  # every step sustained, the last one the goal: nothing is said to have failed
    met["max_rate"].update(max_sustainable_per_second=8330.0, steps=[met["max_rate"]["steps"][0]])
    path.write_text(json.dumps({"bench": met}))
    said = " ".join(design_doc.render_reference_design().split())
    assert "sustains 8,330 executions/s, 10.0× the peak: the 10× goal, which is the search's last step" in said
    assert "not 10×" not in said and "p99 fire lag was" not in said

    del bench["max_rate"]["steps"][1]["runs"]  # results measured before the backlog was split by stage
    path.write_text(json.dumps({"bench": bench}))
    said = " ".join(design_doc.render_reference_design().split())
    assert "At 3,000/s p99 fire lag was 878 ms against the 100 ms limit." in said
    assert "in the order the measurements give: make an execution touch fewer index entries" in said


def test_the_load_tests_page_renders_the_poll_period_trade_from_the_results_file(tmp_path, monkeypatch):
    from d2kit.site import design_doc

    def run(lag, cpu):
        return {"p99_lag_ms": lag, "our_cpu_percent": cpu, "claims_per_execution": 0.3, "lost_occurrences": 0}

    poll = {"offered_per_second": 833, "seconds": 45, "rounds": 3, "cluster": {"poll_seconds": 0.005},
            "periods": [{"poll_seconds": 0.005, "claim_ahead_seconds": 0.01,
                         "median": {"p99_lag_ms": 7.4, "our_cpu_percent": 38.2, "claims_per_execution": 0.362},
                         "lost_occurrences": 0, "runs": [run(7.1, 37.0), run(7.4, 38.2), run(9.9, 40.1)]},
                        {"poll_seconds": 0.05, "claim_ahead_seconds": 0.0,
                         "median": {"p99_lag_ms": 61.0, "our_cpu_percent": 24.0, "claims_per_execution": 0.048},
                         "lost_occurrences": 0, "runs": [run(61.0, 24.0), run(58.2, 23.5), run(64.8, 24.9)]}]}
    path = tmp_path / "latest.json"
    path.write_text(json.dumps({"bench": {"poll_period": poll, "sustained": {"cluster": {"poll_seconds": 0.02}}}}))
    monkeypatch.setattr(design_doc, "LOAD_RESULTS", path)
    section = design_doc.render("load-tests.md.j2", site=True).split(
        "## What the poll period costs at the peak", 1)[1].split("\n## ", 1)[0]
    assert "| 5 ms | 10 ms | 7.4 (7.1–9.9) | 38.2 (37.0–40.1) | 0.362 | 0 |" in section
    assert "| 50 ms | off | 61.0 (58.2–64.8) | 24.0 (23.5–24.9) | 0.048 | 0 |" in section
    assert "medians of\n3 alternating rounds" in section
    assert "the sustained part ran at 20 ms" in " ".join(section.split())

    path.write_text(json.dumps({"bench": {}}))
    assert "Not measured yet: `d2kit bench run --only poll_period`" in design_doc.render("load-tests.md.j2")


def test_section_8_prices_the_poll_period_from_the_measured_run(tmp_path, monkeypatch):
    from d2kit.site import design_doc

    periods = [{"poll_seconds": seconds, "claim_ahead_seconds": ahead,
                "median": {"p99_lag_ms": lag, "our_cpu_percent": cpu}}
               for seconds, ahead, lag, cpu in ((0.005, 0.01, 3.4, 51.7), (0.05, 0.0, 54.5, 22.3))]
    path = tmp_path / "latest.json"
    path.write_text(json.dumps({"bench": {"poll_period": {"offered_per_second": 833, "rounds": 3,
                                                          "periods": periods}}}))
    monkeypatch.setattr(design_doc, "LOAD_RESULTS", path)
    said = " ".join(design_doc.render_reference_design().split("## 8.", 1)[1].split("\n## ", 1)[0].split())
    assert ("5 ms gave p99 fire lag 3.4 ms for 51.7% of the machine, 50 ms without claiming ahead gave p99 fire lag "
            "54.5 ms for 22.3% of the machine") in said

    path.write_text(json.dumps({"bench": {}}))
    assert "its period is a price" not in design_doc.render_reference_design()


def test_the_peers_section_gives_each_rounds_ratio_and_their_median(tmp_path, monkeypatch):
    """A ratio of medians can hide how far apart the rounds were: the page also gives each round's ratio (the
    rounds alternate, so round i of ours pairs with round i of theirs) and the median of those ratios."""
    from d2kit.site import design_doc

    peers = {"rounds": 3,
             "medians": {"ours": {"sustained": 9847.2, "p99_lag_ms_at_833": 0.9, "drain": 13485.8},
                         "pgqueuer": {"sustained": 6347.8, "p99_lag_ms_at_833": 11.4, "drain": 8598.5}},
             "runs": {"ours": {"sustained": [7980.4, 9847.2, 11052.2], "p99_lag_ms_at_833": [1.2, 0.8, 0.9],
                               "drain": [13485.8, 14447.2, 12356.8]},
                      "pgqueuer": {"sustained": [6347.8, 7129.4, 5850.0], "p99_lag_ms_at_833": [12.7, 11.3, 11.4],
                                   "drain": [8598.5, 8612.3, 7360.2]}}}
    path = tmp_path / "latest.json"
    path.write_text(json.dumps({"bench": {"peers": peers}}))
    monkeypatch.setattr(design_doc, "LOAD_RESULTS", path)
    section = design_doc.render("load-tests.md.j2", site=True).split(
        "## Against other PostgreSQL queues", 1)[1].split("\n## ", 1)[0]
    said = " ".join(section.split())
    assert "| pgqueuer | 6,348 (5,850–7,129) |" in section
    # 7980.4 / 6347.8, 9847.2 / 7129.4, 11052.2 / 5850.0: the middle one, not the ratio of the medians (1.55)
    assert "sustained 1.26 / 1.38 / 1.89 (median 1.38)" in said
    assert "drain 1.57 / 1.68 / 1.68 (median 1.68)" in said
    assert "p99 start delay, theirs over ours, 10.58 / 14.13 / 12.67 (median 12.67)" in said
    assert "**ours**" not in said
