"""The execution path with real OS processes: replicas racing, workers killed and paused, fencing.

Every assertion reads the recorded history in PostgreSQL. Waits are bounded polls, never timed asserts.
"""

from __future__ import annotations

import time
from datetime import timedelta
from functools import partial

import pytest
from helpers import rows, scalar, wait_until
from sqlalchemy import text

from d2kit.drills.clock_skew import faketime_env
from reference_impl import jobs, tenants
from reference_impl.cluster import LocalCluster
from reference_impl.processes import RECYCLE_EXIT
from reference_impl.supervisor import Supervisor

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(database_url, tmp_path):
    with LocalCluster(database_url, tmp_path / "logs") as running:
        yield running


def submit_many(engine, count: int, *, delay_s: float, **spec) -> list[int]:
    """``count`` one-shot jobs all due at the same instant, ``delay_s`` from now (database clock)."""
    with engine.begin() as conn:
        tenants.ensure_tenant(conn, "t")
        due = conn.execute(text("SELECT now()")).scalar_one() + timedelta(seconds=delay_s)
        return [jobs.submit(conn, "t", jobs.JobSpec(name=f"j{i}", run_at=due, **{"handler": "noop", **spec}))[0]["id"]
                for i in range(count)]


def settled(engine, expected: int) -> bool:
    """``expected`` occurrences exist and all are in a terminal state."""
    return scalar(engine, "SELECT count(*) FILTER (WHERE state IN ('succeeded', 'dead', 'skipped', 'cancelled'))"
                          " = :n AND count(*) = :n FROM occurrences", n=expected)


@pytest.mark.parametrize("replicas", [2, 3])
def test_racing_replicas_materialise_every_occurrence_exactly_once(engine, cluster, replicas):
    job_ids = submit_many(engine, 600, delay_s=3)
    with engine.begin() as conn:  # plus recurring per-second jobs: every replica sees them due every tick
        for i in range(5):
            jobs.submit(conn, "t", jobs.JobSpec(name=f"cron{i}", handler="noop", cron="* * * * * *"))
    for i in range(replicas):
        cluster.start_scheduler(f"s{i}")
    cluster.start_worker("w1")
    wait_until(lambda: scalar(engine, "SELECT count(*) FROM occurrences o JOIN jobs j ON j.id = o.job_id"
                                      " WHERE j.schedule_kind = 'once' AND o.state = 'succeeded'") == len(job_ids),
               timeout=90, what="every one-shot job to succeed")
    time.sleep(2)  # a few more seconds of per-second fires, materialised by racing replicas
    total, distinct = rows(engine, "SELECT count(*), count(DISTINCT (job_id, fire_at)) FROM occurrences")[0]
    assert total == distinct
    per_job = dict(rows(engine, "SELECT job_id, count(*) FROM occurrences WHERE job_id = ANY(:ids) GROUP BY 1",
                        ids=job_ids))
    assert per_job == {job_id: 1 for job_id in job_ids}
    # One statement, one snapshot: the per-second crons are still completing between two separate reads.
    succeeded, distinct = rows(engine, "SELECT count(*), count(DISTINCT occurrence_id) FROM attempts"
                                       " WHERE state = 'succeeded'")[0]
    assert succeeded == distinct


def test_sigkilled_replicas_lose_nothing_and_double_nothing(engine, cluster):
    with engine.begin() as conn:
        tenants.ensure_tenant(conn, "t")
        for i in range(40):
            jobs.submit(conn, "t", jobs.JobSpec(name=f"cron{i}", handler="noop", cron="* * * * * *"))
        start = conn.execute(text("SELECT now()")).scalar_one()
    for i in range(3):
        cluster.start_scheduler(f"s{i}")
    cluster.start_worker("w1")
    for round_ in range(6):  # kill a replica mid-work, restart it, repeatedly
        time.sleep(0.7)
        victim = f"s{round_ % 3}"
        cluster.kill(victim)
        cluster.start_scheduler(victim)
    end = scalar(engine, "SELECT now()") - timedelta(seconds=3)
    wait_until(lambda: scalar(engine, "SELECT min(materialized_through) FROM jobs") > end + timedelta(seconds=3),
               what="materialisation to pass the window")
    # every per-second fire time in (start, end] exists exactly once for every job
    counts = rows(engine, "SELECT job_id, count(*), count(DISTINCT fire_at) FROM occurrences"
                          " WHERE fire_at > :s AND fire_at <= :e GROUP BY job_id", s=start, e=end)
    expected = int((end.replace(microsecond=0) - start.replace(microsecond=0)).total_seconds())
    assert len(counts) == 40
    for _job, total, distinct in counts:
        assert total == distinct
        assert abs(total - expected) <= 1  # window edges fall inside a second


def test_a_job_claimed_ahead_starts_no_earlier_than_its_fire_time(engine, cluster):
    # Staggered fire times 0.1 s apart, a worker polling every 0.5 s and claiming 1.5 s ahead: most rows are handed
    # over before they are due. The handler's first act is a ledger write, stamped by the database's clock.
    with engine.begin() as conn:
        tenants.ensure_tenant(conn, "t")
        due = conn.execute(text("SELECT now()")).scalar_one() + timedelta(seconds=3)
        for i in range(40):
            jobs.submit(conn, "t", jobs.JobSpec(name=f"j{i}", run_at=due + timedelta(seconds=i / 10),
                                                handler="ledger_write"))
    cluster.start_scheduler("s1")
    cluster.start_worker("w1", extra_args=["--poll", "0.5", "--ahead", "1.5"])
    wait_until(partial(settled, engine, 40), timeout=60, what="every job to finish")
    timing = rows(engine, "SELECT count(*) FILTER (WHERE a.dispatched_at < o.fire_at) AS claimed_ahead,"
                          " count(*) FILTER (WHERE e.at < o.fire_at) AS written_early,"
                          " count(*) FILTER (WHERE a.started_at < o.fire_at) AS reported_early, count(*) AS n"
                          " FROM ledger_effects e JOIN attempts a ON a.token = e.token"
                          " JOIN occurrences o ON o.id = a.occurrence_id")[0]
    assert timing.n == 40 and timing.claimed_ahead >= 20, f"too few rows were claimed ahead to prove anything: {timing}"
    assert timing.written_early == 0 and timing.reported_early == 0, timing


def test_a_job_cancelled_while_it_waits_for_its_fire_time_never_starts(engine, cluster):
    # Claimed 5 s ahead under a 3 s lease (heartbeats every second renew it and carry the cancel).
    [job_id] = submit_many(engine, 1, delay_s=6, handler="ledger_write")
    cluster.start_scheduler("s1")
    cluster.start_worker("w1", lease=3, extra_args=["--poll", "0.5", "--ahead", "5"])
    wait_until(lambda: rows(engine, "SELECT token FROM attempts"), timeout=30, what="the job to be claimed ahead")
    assert scalar(engine, "SELECT now() < fire_at FROM occurrences WHERE job_id = :j", j=job_id), \
        "claimed after its fire time: the test proves nothing"
    with engine.begin() as conn:
        conn.execute(text("SELECT d2_cancel_open(:j, 'cancelled by the test')"), {"j": job_id})
    wait_until(partial(settled, engine, 1), timeout=30, what="the occurrence to end")
    [attempt] = rows(engine, "SELECT a.started_at, a.error, o.state FROM attempts a"
                             " JOIN occurrences o ON o.id = a.occurrence_id")
    assert attempt.started_at is None and "never started" in attempt.error, attempt
    assert attempt.state == "cancelled" and scalar(engine, "SELECT count(*) FROM ledger_effects") == 0


def test_killed_worker_attempt_is_lost_then_rerun_with_a_higher_token(engine, cluster):
    [job_id] = submit_many(engine, 1, delay_s=0, handler="sleep", payload={"seconds": 2}, retry_base_seconds=0.1)
    cluster.start_scheduler("s1")
    cluster.start_worker("doomed", lease=2)
    first = wait_until(lambda: rows(engine, "SELECT token FROM attempts WHERE worker_id = 'doomed'"),
                       what="the first attempt")[0].token
    cluster.kill("doomed")
    cluster.start_worker("rescuer", lease=2)
    wait_until(lambda: scalar(engine, "SELECT state FROM occurrences WHERE job_id = :j", j=job_id) == "succeeded",
               what="the occurrence to succeed on the second worker")
    attempts = rows(engine, "SELECT token, worker_id, state, error FROM attempts ORDER BY token")
    assert [(a.worker_id, a.state) for a in attempts] == [("doomed", "lost"), ("rescuer", "succeeded")]
    assert attempts[1].token > first
    assert "lease expired" in attempts[0].error


def test_an_at_most_once_job_whose_worker_is_killed_is_dead_with_the_reason_not_run_again(engine, cluster):
    [job_id] = submit_many(engine, 1, delay_s=0, handler="sleep", payload={"seconds": 2}, delivery="at_most_once")
    cluster.start_scheduler("s1")
    cluster.start_worker("doomed", lease=2)
    wait_until(lambda: rows(engine, "SELECT token FROM attempts WHERE worker_id = 'doomed'"), what="the attempt")
    cluster.kill("doomed")
    cluster.start_worker("idle", lease=2)  # free to take a retry, if one were made
    # Waits for any end, so that a retry that ran fails the assertions below at once, not by this wait's timeout.
    wait_until(lambda: scalar(engine, "SELECT state FROM occurrences WHERE job_id = :j", j=job_id) in ("dead",
                                                                                                      "succeeded"),
               what="the reaper to find the lost attempt")
    attempts = rows(engine, "SELECT worker_id, state FROM attempts")
    assert [(a.worker_id, a.state) for a in attempts] == [("doomed", "lost")]
    reason = scalar(engine, "SELECT reason FROM occurrences WHERE job_id = :j", j=job_id)
    assert reason.startswith("lost attempt; at-most-once job is not retried: lease expired at ")


def test_paused_workers_late_completion_and_late_write_are_refused(engine, cluster):
    [job_id] = submit_many(engine, 1, delay_s=0, handler="ledger_write", payload={"seconds": 3, "value": "v"},
                           retry_base_seconds=0.1)
    cluster.start_scheduler("s1")
    cluster.start_worker("paused", lease=2)
    stale = wait_until(lambda: rows(engine, "SELECT token FROM attempts WHERE worker_id = 'paused'"),
                       what="the first attempt")[0].token
    cluster.pause("paused")  # SIGSTOP: a process pause (GC, frozen VM) mid-job, lease still "held"
    cluster.start_worker("healthy", lease=2)
    fresh = wait_until(lambda: scalar(engine, "SELECT fence_token FROM ledger"), timeout=60,
                       what="the second attempt's ledger write")
    cluster.resume("paused")  # SIGCONT: it finishes its sleep and writes late, with the stale token
    wait_until(lambda: scalar(engine, "SELECT count(*) FROM fence_rejections WHERE token = :t", t=stale) == 2,
               what="both late writes of the paused worker to be refused")
    assert fresh > stale
    refused = dict(rows(engine, "SELECT path, detail FROM fence_rejections WHERE token = :t", t=stale))
    assert set(refused) == {"ledger_write", "complete"}
    assert f"token {fresh}" in refused["ledger_write"] and f"held by token {fresh}" in refused["complete"]
    assert scalar(engine, "SELECT count(*) FROM ledger_effects WHERE accepted") == 1
    assert scalar(engine, "SELECT state FROM occurrences WHERE job_id = :j", j=job_id) == "succeeded"


def test_failures_retry_with_backoff_then_die_with_the_reason(engine, cluster):
    recovers = submit_many(engine, 1, delay_s=0, handler="fail_n", payload={"n": 1}, retry_base_seconds=0.1)[0]
    dies = submit_many(engine, 1, delay_s=0, handler="fail_n", payload={"n": 5}, max_attempts=3,
                       retry_base_seconds=0.1)[0]
    cluster.start_scheduler("s1")
    cluster.start_worker("w1")
    wait_until(lambda: settled(engine, 2), what="both jobs to settle")
    state = dict(rows(engine, "SELECT job_id, state FROM occurrences"))
    assert state == {recovers: "succeeded", dies: "dead"}
    reason = scalar(engine, "SELECT reason FROM occurrences WHERE job_id = :j", j=dies)
    assert reason.startswith("failed after 3 of 3 attempts: RuntimeError: fail_n")
    tokens = [r.token for r in rows(engine, "SELECT a.token FROM attempts a JOIN occurrences o"
                                            " ON o.id = a.occurrence_id WHERE o.job_id = :j ORDER BY a.attempt",
                                    j=dies)]
    assert len(tokens) == 3 and tokens == sorted(tokens)


def test_status_reports_processes_and_their_skew(engine, cluster, tmp_path):
    cluster.start_scheduler("s1", env=faketime_env(+30, tmp_path))  # libfaketime: the process's real wall clock
    cluster.start_worker("w1", lease=3, env=faketime_env(-30, tmp_path))
    wait_until(lambda: scalar(engine, "SELECT count(*) FROM processes WHERE skew_ms IS NOT NULL") == 2,
               what="both processes to report skew")
    skew = dict(rows(engine, "SELECT id, skew_ms FROM processes"))
    assert 29_000 < skew["s1"] < 31_000
    assert -31_000 < skew["w1"] < -29_000


def test_a_hung_handler_times_out_and_its_slot_comes_back_within_the_bound(engine, cluster):
    """Max runtime 1 s, a handler that ignores cancellation, one slot: the heartbeat answers 'timeout', the worker
    cancels, then abandons the thread a heartbeat period later; the attempt ends timed_out and the slot runs the
    next job while the hung thread still blocks."""
    lease = 1.5  # heartbeat every 0.5 s
    [hung] = submit_many(engine, 1, delay_s=0, handler="hang", payload={"seconds": 60}, max_runtime_seconds=1,
                         max_attempts=1)
    cluster.start_scheduler("s1")
    # two leaked threads before it recycles (the default for one slot is one): here the slot itself comes back
    cluster.start_worker("w1", concurrency=1, lease=lease, extra_args=["--max-abandoned", "2"])
    wait_until(lambda: scalar(engine, "SELECT state FROM occurrences WHERE job_id = :j", j=hung) == "dead",
               timeout=30, what="the hung occurrence to be dead")
    [attempt] = rows(engine, "SELECT a.state, a.error, extract(epoch FROM a.finished_at - a.dispatched_at) AS held_s,"
                             " o.reason FROM attempts a JOIN occurrences o ON o.id = a.occurrence_id"
                             " WHERE o.job_id = :j", j=hung)
    assert attempt.state == "timed_out" and "max runtime" in attempt.error
    assert attempt.reason.startswith("timed_out after 1 of 1 attempts")  # the history says why
    # the bound: max runtime + a heartbeat to hear 'timeout' + a heartbeat of grace + the completion round trip
    assert attempt.held_s <= 1 + 2 * lease / 3 + 2.0
    [after] = submit_many(engine, 1, delay_s=0)
    wait_until(lambda: scalar(engine, "SELECT state FROM occurrences WHERE job_id = :j", j=after) == "succeeded",
               timeout=15, what="the next job to run in the freed slot, with the hung thread still blocked")


def test_a_worker_with_too_many_hung_threads_recycles_and_its_supervisor_restarts_it(engine, cluster):
    """A thread cannot be killed: after --max-abandoned hung handlers the worker claims nothing more, lets its other
    handler finish (not cut short), exits 75, and the supervisor starts a fresh process at once."""
    [hung] = submit_many(engine, 1, delay_s=0, handler="hang", payload={"seconds": 600}, max_runtime_seconds=1,
                         max_attempts=1)
    [neighbour] = submit_many(engine, 1, delay_s=0, handler="sleep", payload={"seconds": 4})
    cluster.start_scheduler("s1")
    supervisor = Supervisor(cluster)
    first = supervisor.add(partial(cluster.start_worker, "w1", concurrency=2, lease=1.5,
                                   extra_args=["--max-abandoned", "1"]))

    def restarted() -> bool:
        supervisor.tick()
        return supervisor.seats["w1"].restarts == 1

    wait_until(restarted, timeout=30, every=0.1, what="the worker to recycle and be started again")
    assert first.popen.returncode == RECYCLE_EXIT
    assert scalar(engine, "SELECT a.state FROM attempts a JOIN occurrences o ON o.id = a.occurrence_id"
                          " WHERE o.job_id = :j", j=hung) == "timed_out"
    # the neighbour ran to the end in the old process: one attempt, succeeded, before the new registration
    wait_until(lambda: scalar(engine, "SELECT started_at > (SELECT max(finished_at) FROM attempts) FROM processes"
                                      " WHERE id = 'w1'"), timeout=30, what="the fresh process to register")
    assert [tuple(r) for r in rows(engine, "SELECT a.state, a.finished_at < p.started_at FROM attempts a"
                                           " JOIN occurrences o ON o.id = a.occurrence_id JOIN processes p"
                                           " ON p.id = a.worker_id WHERE o.job_id = :j", j=neighbour)] == [
        ("succeeded", True)]
    [after] = submit_many(engine, 1, delay_s=0)
    wait_until(lambda: scalar(engine, "SELECT state FROM occurrences WHERE job_id = :j", j=after) == "succeeded",
               timeout=30, what="the fresh process to run the next job")


def test_a_cooperative_handler_past_its_max_runtime_is_cancelled_and_retried(engine, cluster):
    [job_id] = submit_many(engine, 1, delay_s=0, handler="sleep", payload={"seconds": 60}, max_runtime_seconds=1,
                           max_attempts=2, retry_base_seconds=0)
    cluster.start_scheduler("s1")
    cluster.start_worker("w1", lease=1.5)
    wait_until(lambda: scalar(engine, "SELECT state FROM occurrences WHERE job_id = :j", j=job_id) == "dead",
               timeout=30, what="both attempts to time out")
    attempts = rows(engine, "SELECT state, error FROM attempts ORDER BY token")
    assert [a.state for a in attempts] == ["timed_out", "timed_out"]  # retried per its policy, then dead
    assert all(a.error.startswith("Cancelled") for a in attempts)  # it stopped when asked: nothing abandoned


@pytest.mark.parametrize("dedup", [True, False], ids=["token-and-dedup", "token-alone"])
def test_a_stale_attempt_that_charges_first_is_caught_by_the_dedup_not_by_the_token(engine, cluster, dedup):
    """The fence refuses a stale write only after a newer token wrote. Here the stale attempt writes FIRST: with
    the token alone (the negative control) the charge is applied twice; deduplicated on the occurrence's
    idempotency key it is applied once."""
    env = {} if dedup else {"D2KIT_UNSAFE_DISABLE_DEDUP": "1"}
    [job_id] = submit_many(engine, 1, delay_s=0, handler="charge", payload={"amount": 5, "first_attempt_seconds": 30},
                           retry_base_seconds=0.1)
    cluster.start_scheduler("s1")
    cluster.start_worker("paused", lease=2, env=env)
    stale = wait_until(lambda: scalar(engine, "SELECT token FROM charges"), what="the first attempt's charge")
    cluster.pause("paused")  # SIGSTOP after it charged: its lease runs out, the occurrence is retried
    cluster.start_worker("healthy", lease=2, env=env)
    wait_until(lambda: scalar(engine, "SELECT state FROM occurrences WHERE job_id = :j", j=job_id) == "succeeded",
               what="the retry to succeed")
    cluster.kill("paused")  # its handler would sleep out its 30 s first attempt: the teardown's drain would wait 15 s
    charges = rows(engine, "SELECT token, outcome FROM charges ORDER BY id")
    assert charges[0].token == stale and charges[1].token > stale  # the stale attempt wrote first
    applied = scalar(engine, "SELECT coalesce(sum(amount), 0) FROM charges WHERE outcome = 'applied'")
    if dedup:
        assert [c.outcome for c in charges] == ["applied", "duplicate"] and applied == 5
    else:  # the higher token passes the fence: the customer is charged twice
        assert [c.outcome for c in charges] == ["applied", "applied"] and applied == 10
