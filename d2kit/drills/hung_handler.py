"""A handler hangs -- an endless loop, a call without a timeout -- and ignores every request to stop. Heartbeats
come from the worker process, not the handler, so its lease never runs out. Does it hold its slot forever?

No: every attempt has a deadline, dispatch + its max runtime, on the database clock. Past it the heartbeat
answers ``timeout``, the worker cancels the handler, and a heartbeat period later it abandons the thread: the
slot is given back and the attempt ends ``timed_out`` with the reason, retried or dead per the job's retry
policy. A thread cannot be killed, so the abandoned ones are counted, and after ``--max-abandoned`` of them the
worker finishes its other handlers and exits with status 75; its supervisor starts a fresh process at once.

How the drill does it: one scheduler and one worker with a single slot, under the real supervisor of
``d2kit up``, run per-second crons and a job whose handler blocks for an hour and never looks at its
cancellation flag, with a max runtime of a second or two and three attempts. The worker recycles after two
abandoned threads. The invariants read the history: each hung attempt ended ``timed_out``, abandoned, within
the bound; the occurrence was retried, then dead with the reason; after each abandonment the same process
claimed another job while the hung thread still blocked; after the second the worker was recycled and the new
process took work; every fire time ran.

What the negative control turns off: the worker's side of the max runtime (it ignores the heartbeat's
``timeout``, so it neither cancels nor abandons). The database's side stays: the heartbeat stops extending the
lease past the deadline, so the reaper still ends the attempt ``timed_out`` -- but the hung thread keeps the
worker's only slot, no later job is claimed, nothing is recycled, and the drill fails.
"""

from __future__ import annotations

import threading
import time
from functools import partial

from sqlalchemy import text

from d2kit.drills import invariants, workload
from d2kit.drills.harness import Drill, DrillError
from reference_impl.lease import heartbeat_period
from reference_impl.processes import RECYCLE_EXIT
from reference_impl.supervisor import Supervisor

FOLLOW_UP = None  # beyond the hidden follow-ups: the prompt's own "jobs ... up to 6 hours", one of which hangs
NEGATIVE_CONTROL = ("the worker ignores the max runtime (D2KIT_UNSAFE_IGNORE_MAX_RUNTIME=1): it never cancels "
                    "or abandons a handler past its deadline, so the hung handler keeps the worker's only slot "
                    "(the database still ends the attempt timed_out once the lease it stops renewing runs out)")
WORKER = "worker-1"
MAX_ABANDONED = 2
ATTEMPTS = 3  # the hung job's max_attempts: two abandoned by the first process, the third by the recycled one
SLACK_SECONDS = 1.0  # a loaded 2-core machine: scheduling delays on top of the protocol's own bound
CLAIM_GAP_SECONDS = 2.0  # per-second crons keep work due: a free slot claims within a tick, a poll and the slack


def run(drill: Drill) -> None:
    max_runtime = 1.0 if drill.quick else 3.0
    lease = 1.5 if drill.quick else 3.0
    heartbeat = heartbeat_period(lease)
    # max runtime, then a heartbeat to hear 'timeout', a heartbeat of grace before abandoning, the completion
    bound = max_runtime + 2 * heartbeat + SLACK_SECONDS
    crons = 5 if drill.quick else 20
    drill.scale("max runtime", f"{max_runtime:g} s (the short pool's 10 minutes), lease {lease:g} s, heartbeat "
                               f"{heartbeat:g} s")
    drill.scale("worker", f"one worker with one slot, recycled after {MAX_ABANDONED} abandoned threads "
                          "(default: a quarter of the slots)")
    drill.scale("load", f"{crons} per-second no-op crons and one job that hangs for an hour, {ATTEMPTS} attempts")
    env = {"D2KIT_UNSAFE_IGNORE_MAX_RUNTIME": "1"} if drill.negative_control else {}
    if drill.negative_control:
        drill.notes.append("**MAX RUNTIME NOT ENFORCED BY THE WORKER (negative control).**")

    supervisor = Supervisor(drill.cluster)
    ticking = threading.Event()
    ticker = threading.Thread(target=_tick, args=(supervisor, ticking), daemon=True)
    with drill.phase("a scheduler and a one-slot supervised worker on per-second crons"):
        drill.cluster.start_scheduler("scheduler-1")
        supervisor.add(partial(drill.cluster.start_worker, WORKER, concurrency=1, lease=lease, env=env,
                               extra_args=["--max-abandoned", str(MAX_ABANDONED)]))
        ticker.start()
        workload.submit_crons(drill.engine, "acme", crons, "* * * * * *", name="every-second", handler="noop",
                              pool="short")
        start = drill.scalar("SELECT min(created_at) FROM jobs")
        drill.wait_for("the worker to run the crons", lambda: drill.scalar(
            "SELECT count(*) >= :n FROM occurrences WHERE state = 'succeeded'", n=crons), timeout=30)

    with drill.phase("a handler that hangs for an hour and ignores cancellation"):
        [hung] = workload.submit_one_shots(
            drill.engine, "acme", 1, workload.db_now(drill.engine), name="hangs", handler="hang",
            payload={"seconds": 3600}, max_runtime_seconds=max_runtime, max_attempts=ATTEMPTS, retry_base_seconds=0)
        ended = _wait_softly(drill, "the hung job's attempts to time out and the occurrence to end",
                             lambda: drill.scalar("SELECT finished_at IS NOT NULL FROM occurrences WHERE job_id = :j",
                                                  j=hung), timeout=ATTEMPTS * (bound + lease) + 20)
        if ended:  # the recycled process has taken work too
            _wait_softly(drill, "the recycled worker to claim work", lambda: drill.scalar(
                "SELECT count(*) > 0 FROM attempts a JOIN processes p ON p.id = a.worker_id"
                " WHERE a.worker_id = :w AND a.dispatched_at > p.started_at", w=WORKER), timeout=30)
        time.sleep(2.0)

    with drill.phase("stop the schedules; settle"):
        with drill.engine.begin() as conn:
            conn.execute(text("UPDATE jobs SET paused = true"))
            end = conn.execute(text("SELECT min(materialized_through) FROM jobs WHERE schedule_kind = 'cron'"
                                    )).scalar_one()
        # When the hung job never ended its one slot is still held, and what is due behind it cannot end either.
        _wait_softly(drill, "every occurrence to end", lambda: drill.scalar(
            "SELECT count(*) = 0 FROM occurrences WHERE finished_at IS NULL"), timeout=30 if ended else 5)
    ticking.set()
    ticker.join(timeout=5)

    seat = supervisor.seats[WORKER]
    with drill.engine.begin() as conn:
        _check(drill, conn, hung, bound, max_runtime, seat.restarts, seat.last_exit)
        drill.add(invariants.one_occurrence_per_fire_time(conn, start, end), invariants.every_occurrence_terminal(conn),
                  invariants.no_double_success(conn), invariants.attempts_accounted(conn))
        drill.focus = [r[0] for r in conn.execute(text(
            "SELECT id FROM occurrences WHERE job_id = :j UNION ALL (SELECT id FROM occurrences WHERE job_id <> :j"
            " ORDER BY fire_at DESC LIMIT 12)"), {"j": hung})]


def _tick(supervisor: Supervisor, done: threading.Event) -> None:
    """The supervisor's loop, as ``d2kit up`` runs it: notice a member that exited, start it again."""
    while not done.wait(0.1):
        supervisor.tick()


def _wait_softly(drill: Drill, what: str, condition, timeout: float) -> bool:
    """A wait whose timeout is an observation, not a crash: the negative control never gets there, and its
    invariants must still be read from the history."""
    try:
        drill.wait_for(what, condition, timeout)
    except DrillError as exc:
        drill.notes.append(f"gave up waiting: {exc}")
        return False
    return True


def _check(drill: Drill, conn, hung: int, bound: float, max_runtime: float, restarts: int,
           last_exit: int | None) -> None:
    attempts = [dict(r) for r in conn.execute(text(
        "SELECT a.token, a.attempt, a.state, a.error, a.finished_at,"
        " coalesce(a.finished_at, clock_timestamp()) > a.deadline AS past_deadline,"
        " round(extract(epoch FROM a.finished_at - a.dispatched_at)::numeric, 2)::float AS held_s,"
        " (SELECT round(extract(epoch FROM min(n.dispatched_at) - a.finished_at)::numeric, 2)::float"
        "    FROM attempts n WHERE n.worker_id = a.worker_id AND n.dispatched_at > a.finished_at) AS next_claim_s"
        " FROM attempts a JOIN occurrences o ON o.id = a.occurrence_id WHERE o.job_id = :j ORDER BY a.token"),
        {"j": hung}).mappings()]
    occurrence = conn.execute(text("SELECT state, reason FROM occurrences WHERE job_id = :j"),
                              {"j": hung}).mappings().one()
    registered = conn.execute(text("SELECT started_at FROM processes WHERE id = :w"), {"w": WORKER}).scalar_one()
    shown = [{k: (str(v) if k == "finished_at" else v) for k, v in a.items() if k != "error"} for a in attempts]

    drill.check("the fault was real: the hung handler was still running when its max runtime ran out",
                bool(attempts) and all(a["past_deadline"] for a in attempts),
                [{"token": a["token"], "past_deadline": a["past_deadline"]} for a in attempts])
    drill.check(f"every hung attempt ended timed_out, its thread abandoned by the worker (the handler ignored "
                f"cancellation), within {bound:g} s of its dispatch (max runtime {max_runtime:g} s + a heartbeat to "
                "hear it + a heartbeat of grace)",
                len(attempts) == ATTEMPTS and all(a["state"] == "timed_out" and "abandoned" in (a["error"] or "")
                                                  and a["held_s"] is not None and a["held_s"] <= bound
                                                  for a in attempts),
                {"attempts": shown, "errors": [a["error"] for a in attempts]})
    drill.check(f"the occurrence was retried per its retry policy ({ATTEMPTS} attempts, each with a higher token), "
                "then dead with the reason",
                len(attempts) == ATTEMPTS and [a["attempt"] for a in attempts] == list(range(1, ATTEMPTS + 1))
                and occurrence["state"] == "dead"
                and (occurrence["reason"] or "").startswith(f"timed_out after {ATTEMPTS} of {ATTEMPTS} attempts"),
                dict(occurrence))
    # The abandonments that did not make the worker recycle: the same process's only slot took the next job.
    kept = [a for a in attempts if a["attempt"] != MAX_ABANDONED]
    drill.check(f"the slot came back: after each abandonment, the worker's one slot claimed another job within "
                f"{CLAIM_GAP_SECONDS:g} s while the hung thread still blocked",
                len(kept) == ATTEMPTS - 1 and all(a["next_claim_s"] is not None
                                                  and a["next_claim_s"] <= CLAIM_GAP_SECONDS for a in kept),
                [{"token": a["token"], "next_claim_s": a["next_claim_s"]} for a in kept])
    recycled_after = [a for a in attempts if a["attempt"] == MAX_ABANDONED]
    took_work = conn.execute(text("SELECT count(*) FROM attempts WHERE worker_id = :w AND dispatched_at > :r"),
                             {"w": WORKER, "r": registered}).scalar_one()
    drill.check(f"leaked threads were contained: after {MAX_ABANDONED} abandoned threads the worker exited to be "
                f"recycled (status {RECYCLE_EXIT}), its supervisor started a fresh process at once, and that "
                "process claimed work",
                restarts == 1 and last_exit == RECYCLE_EXIT and bool(recycled_after)
                and recycled_after[0]["finished_at"] is not None and registered > recycled_after[0]["finished_at"]
                and took_work > 0,
                {"supervisor_restarts": restarts, "last_exit_status": last_exit,
                 "worker_registered_at": str(registered), "attempts_by_the_new_process": took_work})
    drill.metrics.update({"hung attempts (s held)": [a["held_s"] for a in attempts],
                          "next claim after an abandonment (s)": [a["next_claim_s"] for a in attempts]})
