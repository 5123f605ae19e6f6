"""A scheduler replica is paused -- SIGSTOP, a long GC, a frozen VM -- in the middle of a pass, holding row locks
on the due jobs it took. Do those jobs fire late by the whole pause?

No: every session of the kit carries ``idle_in_transaction_session_timeout`` (3 s), so PostgreSQL ends the
paused replica's session a few seconds in, its transaction rolls back, and the locks on its jobs go with it;
the other replicas' next pass finds those jobs due and materialises them, a second or so late at most because
occurrences are written two seconds ahead. When the paused replica wakes up, its pass is refused -- its
transaction was already aborted -- and it reconnects and carries on like a replica that had just started.
A SIGKILL closes the socket at once; a pause or a partition does not, which is why the timeouts exist.

How the drill does it: three replicas and two workers run a few hundred per-second crons. The drill watches
pg_stat_activity until replica 1 is inside a pass (its due-jobs query answered, its transaction holding row
locks) and SIGSTOPs it there, keeps it stopped far longer than the timeout, then resumes it. The invariants
read the history: how long the locked jobs waited for their next occurrence, that the paused pass's transaction
ended aborted, and that every fire time of the window is present once and ran.
"""

from __future__ import annotations

import time

from sqlalchemy import text

from d2kit.drills import invariants, workload
from d2kit.drills.harness import Drill
from reference_impl import db

FOLLOW_UP = None  # beyond the hidden follow-ups: "the scheduler itself can die" -- or merely stop
NEGATIVE_CONTROL = ("the replicas run without session timeouts (D2KIT_UNSAFE_NO_SESSION_TIMEOUTS=1): the paused "
                    "replica keeps its locks for the whole pause, so its jobs' fire times are late by the pause")
REPLICAS = 3
VICTIM = "scheduler-1"
# The locked jobs' next occurrence is written within the timeout plus a pass and a tick of another replica;
# one second of slack for a loaded machine.
BOUND_SECONDS = db.IDLE_IN_TRANSACTION_SECONDS + 1.0
# The victim is inside a pass: its due-jobs query has answered (it plans now) and its transaction holds locks.
IN_PASS_SQL = text(
    "SELECT pid, backend_xid::text::bigint AS xid FROM pg_stat_activity WHERE application_name = :app"
    " AND state = 'idle in transaction' AND backend_xid IS NOT NULL AND query LIKE '%FOR UPDATE SKIP LOCKED%'")


def run(drill: Drill) -> None:
    jobs = 300 if drill.quick else 1_000
    pause = 10.0 if drill.quick else 60.0
    drill.scale("load", f"{jobs} per-second cron jobs, {REPLICAS} replicas, 2 workers")
    drill.scale("pause", f"replica SIGSTOPped mid-pass for {pause:g} s (a GC pause or a frozen VM)")
    env = {"D2KIT_UNSAFE_NO_SESSION_TIMEOUTS": "1"} if drill.negative_control else {}
    if drill.negative_control:
        drill.notes.append("**SESSION TIMEOUTS OFF in every process (negative control).**")

    with drill.phase(f"{REPLICAS} replicas and 2 workers on per-second crons"):
        for i in range(1, REPLICAS + 1):
            drill.cluster.start_scheduler(f"scheduler-{i}", env=env)
        for i in (1, 2):
            drill.cluster.start_worker(f"worker-{i}", concurrency=32, env=env)
        workload.submit_crons(drill.engine, "acme", jobs, "* * * * * *", name="every-second", handler="noop",
                              pool="short")
        start = drill.scalar("SELECT min(created_at) FROM jobs")
        drill.wait_for("every replica to register", lambda: drill.scalar(
            "SELECT count(*) = :n FROM processes WHERE kind = 'scheduler'", n=REPLICAS), timeout=30)
        time.sleep(2.0)

    with drill.phase(f"{VICTIM} SIGSTOPped mid-pass, holding its jobs' row locks"):
        caught = _pause_mid_pass(drill)
        if caught is None:
            drill.check("the fault was real: the replica was stopped inside a pass holding row locks", False,
                        {"searched_s": PAUSE_SEARCH_SECONDS})
            return
        paused_at, pid, xid, locked = caught
        with drill.fault(f"SIGSTOP {VICTIM} (holding {len(locked)} jobs)"):
            session_ended = None
            while (drill.now() - paused_at).total_seconds() < pause:
                if session_ended is None and not drill.scalar(
                        "SELECT count(*) FROM pg_stat_activity WHERE pid = :p", p=pid):
                    session_ended = drill.now()
                time.sleep(0.1)
            drill.cluster.resume(VICTIM)
        resumed_at = drill.now()

    with drill.phase(f"{VICTIM} resumed: refused, reconnects, carries on"):
        drill.wait_for(f"{VICTIM} to heartbeat after the resume", lambda: drill.scalar(
            "SELECT heartbeat_at > CAST(:t AS timestamptz) FROM processes WHERE id = :id", t=resumed_at, id=VICTIM),
            timeout=30)
        time.sleep(2.0)

    with drill.phase("stop the schedules; settle"):
        end = drill.stop_schedules(timeout=60)

    with drill.engine.begin() as conn:
        _check(drill, conn, paused_at, resumed_at, session_ended, pid, xid, locked)
        drill.add(invariants.one_occurrence_per_fire_time(conn, start, end),
                  invariants.every_occurrence_terminal(conn), invariants.no_double_success(conn))
        drill.metrics["dispatch lateness after the fire time (s)"] = invariants.dispatch_lateness(conn)


PAUSE_SEARCH_SECONDS = 60.0  # a pass holds its locks for milliseconds: on a loaded machine, catching one takes a while


def _pause_mid_pass(drill: Drill):
    """SIGSTOP the victim while its pass holds row locks on due jobs; retried (stop, look, resume) until the
    stop lands inside a pass. Returns (paused at, backend pid, transaction id, ids of the jobs it locked)."""
    app = f"d2-scheduler-{VICTIM}"
    deadline = time.monotonic() + PAUSE_SEARCH_SECONDS
    with drill.engine.connect() as conn:
        while time.monotonic() < deadline:
            seen = conn.execute(IN_PASS_SQL, {"app": app}).first()
            conn.rollback()  # each probe reads a fresh pg_stat_activity snapshot
            if seen is None:
                time.sleep(0.002)
                continue
            drill.cluster.pause(VICTIM)
            paused_at = drill.now()
            held = conn.execute(IN_PASS_SQL, {"app": app}).first()
            # Rows it locked carry its transaction id as xmax while it is open.
            locked = [r[0] for r in conn.execute(text(
                "SELECT id FROM jobs WHERE xmax::text::bigint = :xid"), {"xid": held.xid})] if held else []
            conn.rollback()
            if held is not None and held.pid == seen.pid and locked:
                return paused_at, held.pid, held.xid, locked
            drill.cluster.resume(VICTIM)  # it had moved on: let it run and try again
    return None


def _check(drill: Drill, conn, paused_at, resumed_at, session_ended, pid: int, xid: int, locked: list[int]) -> None:
    pause_s = round((resumed_at - paused_at).total_seconds(), 2)
    drill.check("the fault was real: the replica was stopped inside a pass holding row locks on due jobs",
                bool(locked), {"jobs_locked": len(locked), "backend_pid": pid, "paused_s": pause_s})
    released = None if session_ended is None else round((session_ended - paused_at).total_seconds(), 2)
    drill.check(f"PostgreSQL ended the paused replica's session within {BOUND_SECONDS:g} s "
                f"(idle_in_transaction_session_timeout {db.IDLE_IN_TRANSACTION_SECONDS} s), releasing its locks",
                released is not None and released <= BOUND_SECONDS,
                {"session_ended_after_s": released, "paused_s": pause_s})
    # The locked jobs' first occurrence written after the pause began: by another replica, once the locks went.
    waited = conn.execute(text(
        "SELECT max(first_written) FROM (SELECT extract(epoch FROM min(o.created_at) - CAST(:p AS timestamptz))"
        " AS first_written FROM occurrences o WHERE o.job_id = ANY (:ids) AND o.created_at > :p GROUP BY o.job_id) x"),
        {"p": paused_at, "ids": locked}).scalar()
    late = conn.execute(text(
        "SELECT max(extract(epoch FROM created_at - fire_at)) FROM occurrences WHERE job_id = ANY (:ids)"),
        {"ids": locked}).scalar()
    drill.check(f"the other replicas materialised the locked jobs within {BOUND_SECONDS:g} s of the pause, "
                "not after it", waited is not None and float(waited) <= BOUND_SECONDS,
                {"locked_jobs": len(locked), "slowest_job_waited_s": waited and round(float(waited), 2),
                 "worst_written_after_fire_time_s": late and round(float(late), 2), "paused_s": pause_s})
    status = conn.execute(text(
        "SELECT pg_xact_status(CAST(((pg_current_xact_id()::text::bigint >> 32 << 32) + :x)::text AS xid8))"),
        {"x": xid}).scalar()
    back = conn.execute(text(
        "SELECT (SELECT heartbeat_at > CAST(:r AS timestamptz) FROM processes WHERE id = :id) AS heartbeats,"
        " (SELECT array_agg(pid) FROM pg_stat_activity WHERE application_name = :app) AS pids"),
        {"r": resumed_at, "id": VICTIM, "app": f"d2-scheduler-{VICTIM}"}).mappings().one()
    drill.check("resumed, the paused pass was refused (its transaction aborted) and the same process carried on "
                "with a new session", status == "aborted" and back["heartbeats"] and pid not in (back["pids"] or [])
                and drill.cluster.alive()[VICTIM],
                {"paused_transaction": status, "heartbeat_after_resume": back["heartbeats"],
                 "old_backend_pid": pid, "backend_pids_now": back["pids"]})
    drill.metrics.update({"jobs locked by the paused pass": len(locked), "pause (s)": pause_s,
                          "session ended after (s)": released,
                          "locked jobs' next occurrence written after (s)": waited and round(float(waited), 2)})
