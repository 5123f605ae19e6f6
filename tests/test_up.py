"""``d2kit up`` is something you can leave running: it outlives PostgreSQL restarts and outages, brings killed
members back, and stops cleanly on Ctrl-C.

Everything is real: ``d2kit up`` runs as its own process on a private embedded PostgreSQL (never the shared
server -- restarting that would cut everyone else off), PostgreSQL is restarted and stopped with ``d2kit db``,
members are SIGKILLed and SIGSTOPped. What ``up`` sees it writes to ``up.json`` in its log folder; what the
cluster did is read from the database.

The soak -- minutes of random faults against one ``d2kit up`` -- runs with ``make soak`` (or
``D2KIT_SOAK_SECONDS=180 pytest -s -k soak tests/test_up.py``); it is skipped otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from helpers import rows, scalar, wait_until
from sqlalchemy import text

from d2kit.drills import postgres_restart
from reference_impl import db, jobs, tenants
from reference_impl.cluster import LocalCluster
from reference_impl.supervisor import BACKOFF_FIRST, BACKOFF_MAX, Supervisor

pytestmark = pytest.mark.slow
LEASE_SECONDS = 4.0
DRAIN_SECONDS = 10.0


class Up:
    """One ``d2kit up`` process on a private embedded server, and the ``d2kit db`` commands for that server."""

    def __init__(self, pgdata: Path, log_dir: Path, *args: str) -> None:
        self.pgdata, self.log_dir = pgdata, log_dir
        self.env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"} | {"D2KIT_PGDATA": str(pgdata)}
        self.output = open(log_dir.parent / "up.out", "wb")  # noqa: SIM115 -- closed in stop()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "reference_impl.cli", "up", "--lease", str(LEASE_SECONDS), "--log-dir",
             str(log_dir), "--drain-timeout", str(DRAIN_SECONDS), *args],
            env=self.env, stdout=self.output, stderr=subprocess.STDOUT, start_new_session=True)

    def state(self) -> dict:
        try:
            return json.loads((self.log_dir / "up.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {"members": [], "database": {}}

    def members(self) -> dict[str, dict]:
        return {m["name"]: m for m in self.state()["members"]}

    def all_alive(self) -> bool:
        members = self.members()
        return bool(members) and all(m["alive"] for m in members.values())

    def db(self, command: str) -> None:
        done = subprocess.run([sys.executable, "-m", "reference_impl.cli", "db", command], env=self.env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"d2kit db {command}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> int:
        """Ctrl-C, as a terminal sends it; returns the exit status."""
        if self.running():
            os.kill(self.process.pid, signal.SIGINT)
        try:
            return self.process.wait(timeout=DRAIN_SECONDS + 20)
        finally:
            self.output.close()


@pytest.fixture
def private_server():
    """Outside pytest's tmp folders: each pytest session makes those root-only again, and the server (run as the
    pgserver user when we are root) must reach its data directory whenever it is restarted."""
    with postgres_restart.private_server() as url:
        engine = db.make_engine(url)
        db.init_schema(engine)
        yield Path(scalar(engine, "SHOW data_directory")), engine
        engine.dispose()


def pid_gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)  # each member leads its own process group
    except ProcessLookupError:
        return True
    return False


def missing_fire_times(engine, job_id: int, until: datetime, every_seconds: int = 1) -> list:
    """Fire times of a cron firing every ``every_seconds`` from its first one up to ``until`` with no occurrence."""
    return [r[0] for r in rows(engine, (
        "SELECT s FROM generate_series((SELECT min(fire_at) FROM all_occurrences WHERE job_id = :j), :until,"
        " make_interval(secs => :every)) s WHERE NOT EXISTS (SELECT 1 FROM all_occurrences o WHERE o.job_id = :j"
        " AND o.fire_at = s)"), j=job_id, until=until, every=every_seconds)]


def twice_succeeded(engine) -> int:
    return scalar(engine, "SELECT count(*) FROM (SELECT occurrence_id FROM all_attempts WHERE state = 'succeeded'"
                          " GROUP BY 1 HAVING count(*) > 1) x")


def test_up_outlives_a_postgres_restart_and_outage_restarts_a_killed_member_and_stops_on_ctrl_c(
        private_server, tmp_path):
    pgdata, engine = private_server
    up = Up(pgdata, tmp_path / "logs", "--schedulers", "2", "--workers", "2", "--long-workers", "0")
    try:
        wait_until(lambda: up.all_alive() and scalar(
            engine, "SELECT count(*) FROM processes WHERE heartbeat_at IS NOT NULL") == 4,
            timeout=60, what="4 members up and registered")
        pids = {name: m["pid"] for name, m in up.members().items()}
        with engine.begin() as conn:
            tenants.ensure_tenant(conn, "acme")
            ticker = jobs.submit(conn, "acme", jobs.JobSpec(name="tick", handler="noop", cron="* * * * * *"))[0]
            db_now = conn.execute(text("SELECT now()")).scalar_one()
            one_shots = [jobs.submit(conn, "acme", jobs.JobSpec(
                name=f"once-{i}", handler="noop", run_at=db_now + timedelta(seconds=i)))[0]["id"]
                for i in range(4, 30, 2)]  # due before, during and after the outage below

        up.db("restart")
        time.sleep(3)
        assert up.running() and up.all_alive()
        assert {name: m["pid"] for name, m in up.members().items()} == pids, "members ride out a restart themselves"

        up.db("stop")
        time.sleep(10)
        outage = up.state()["database"]
        assert up.running() and up.all_alive(), "a database outage stops nothing"
        assert outage["reachable"] is False and outage["unreachable_for_s"] >= 5, outage
        up.db("start")
        wait_until(lambda: up.state()["database"].get("reachable"), timeout=30, what="up to see the database")

        killed_at = time.monotonic()
        os.kill(pids["worker-short-1"], signal.SIGKILL)
        back = wait_until(lambda: (m := up.members()["worker-short-1"])["alive"] and m["restarts"] == 1 and m,
                          timeout=30, what="the killed worker restarted")
        assert time.monotonic() - killed_at <= BACKOFF_MAX
        assert back["pid"] != pids["worker-short-1"] and back["last_exit"] == -signal.SIGKILL
        assert [m["restarts"] for name, m in up.members().items() if name != "worker-short-1"] == [0, 0, 0]

        wait_until(lambda: scalar(engine, "SELECT count(*) FROM all_occurrences WHERE job_id = ANY(:ids)"
                                          " AND state = 'succeeded'", ids=one_shots) == len(one_shots),
                   timeout=60, what="every one-shot, those due during the outage included, to succeed")
        until = scalar(engine, "SELECT now() - interval '3 seconds'")
        wait_until(lambda: scalar(engine, "SELECT count(*) FROM all_occurrences WHERE job_id = :j AND fire_at <= :u"
                                          " AND state <> 'succeeded'", j=ticker["id"], u=until) == 0,
                   timeout=60, what="every per-second fire time up to now to succeed")
        assert missing_fire_times(engine, ticker["id"], until) == []
        assert twice_succeeded(engine) == 0
    finally:
        status = up.stop()
    assert status == 0, (tmp_path / "up.out").read_text()[-2000:]
    assert all(pid_gone(m["pid"]) for m in up.members().values()), "Ctrl-C leaves nothing running"
    undrained = [r[0] for r in rows(engine, "SELECT id FROM processes WHERE stopped_at IS NULL")]
    assert undrained == [], "each member drained; not: " + "".join(
        f"\n--- {name}.log ---\n" + (tmp_path / "logs" / f"{name}.log").read_text()[-3000:] for name in undrained
    ) + "\n--- up.out ---\n" + (tmp_path / "up.out").read_text()[-500:]


def test_a_member_that_keeps_dying_backs_off_and_no_restart_leaves_it_dead(database_url, tmp_path):
    with LocalCluster(database_url, tmp_path / "logs") as cluster:
        supervised = Supervisor(cluster)
        unsupervised = Supervisor(cluster, restart=False)
        supervised.add(lambda: cluster.start_worker("kept"))
        unsupervised.add(lambda: cluster.start_worker("left"))
        cluster.kill("left")
        gaps = []
        for _ in range(2):
            cluster.kill("kept")
            killed_at = time.monotonic()
            while not cluster.members["kept"].alive:
                assert time.monotonic() - killed_at < BACKOFF_MAX + 5, "never restarted"
                supervised.tick()
                unsupervised.tick()
                time.sleep(0.02)
            gaps.append(time.monotonic() - killed_at)
        unsupervised.tick()
        kept, left = supervised.members()[0], unsupervised.members()[0]
    assert kept["restarts"] == 2 and kept["last_exit"] == -signal.SIGKILL
    assert BACKOFF_FIRST <= gaps[0] < 2 * BACKOFF_FIRST <= gaps[1], gaps  # the second crash in a row waits longer
    assert left["restarts"] == 0 and not left["alive"] and left["restart_in_s"] is None


# -- the soak: minutes of random faults against one `d2kit up` ----------------------------------------------
SOAK_SECONDS = float(os.environ.get("D2KIT_SOAK_SECONDS", "0"))


@pytest.mark.skipif(not SOAK_SECONDS, reason="the soak runs with `make soak` (D2KIT_SOAK_SECONDS=180)")
def test_soak_random_faults_against_one_d2kit_up(private_server, tmp_path):
    pgdata, engine = private_server
    rng = random.Random(int(os.environ.get("D2KIT_SOAK_SEED", "19")))
    up = Up(pgdata, tmp_path / "logs", "--schedulers", "3", "--workers", "3", "--long-workers", "1",
            "--archive-after-seconds", "30")
    faults: dict[str, int] = {}
    try:
        wait_until(up.all_alive, timeout=60, what="every member up")
        with engine.begin() as conn:
            tenants.ensure_tenant(conn, "acme")
            every = {jobs.submit(conn, "acme", jobs.JobSpec(name=f"tick-{i}", handler="noop",
                                                           cron="* * * * * *"))[0]["id"]: 1 for i in range(10)}
            every |= {jobs.submit(conn, "acme", jobs.JobSpec(
                name=f"slow-{policy}", handler="sleep", payload={"seconds": 3}, cron="* * * * * */2",
                overlap_policy=policy))[0]["id"]: 2 for policy in ("skip", "buffer_one")}
            db_now = conn.execute(text("SELECT now()")).scalar_one()
            one_shots = [jobs.submit(conn, "acme", jobs.JobSpec(
                name=f"once-{i}", handler="fail_n", payload={"n": 1}, max_attempts=25,
                retry_base_seconds=0.2, run_at=db_now + timedelta(seconds=i * SOAK_SECONDS / 300)))[0]["id"]
                for i in range(300)]

        deadline = time.monotonic() + SOAK_SECONDS
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(2, 6))
            fault = rng.choice(["kill", "kill", "pause", "terminate sessions", "postgres restart", "postgres down"])
            faults[fault] = faults.get(fault, 0) + 1
            members = [m for m in up.members().values() if m["alive"]]
            # up.json may be a quarter of a second old: a member it lists may have just died
            if fault == "kill" and members:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(rng.choice(members)["pid"], signal.SIGKILL)
            elif fault == "pause" and members:
                victim = rng.choice(members)["pid"]
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(victim, signal.SIGSTOP)
                    time.sleep(rng.uniform(1, 2 * LEASE_SECONDS))
                    os.killpg(victim, signal.SIGCONT)
            elif fault == "terminate sessions":
                with engine.begin() as conn:
                    conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                                      " WHERE application_name = 'd2kit' AND pid <> pg_backend_pid()"))
            elif fault == "postgres restart":
                up.db("restart")
            elif fault == "postgres down":
                up.db("stop")
                time.sleep(rng.uniform(3, 10))
                up.db("start")
            assert up.running(), f"d2kit up exited after a {fault}"

        wait_until(up.all_alive, timeout=2 * BACKOFF_MAX + 10, what="every member alive after the faults")
        wait_until(lambda: scalar(engine, "SELECT count(*) FROM all_occurrences WHERE job_id = ANY(:ids)"
                                          " AND finished_at IS NOT NULL", ids=one_shots) == len(one_shots),
                   timeout=120, what="every one-shot finished")
        until = scalar(engine, "SELECT now() - interval '5 seconds'")
        wait_until(lambda: scalar(engine, "SELECT count(*) FROM occurrences WHERE fire_at <= :u AND state IN"
                                          " ('ready', 'running')", u=until - timedelta(seconds=3 * LEASE_SECONDS))
                   == 0, timeout=120, what="nothing older than a few leases left unfinished")
        missing = {job: missing_fire_times(engine, job, until, seconds) for job, seconds in every.items()}
        measured = dict(rows(engine, "SELECT state, count(*) FROM all_occurrences GROUP BY 1"))
        attempts = dict(rows(engine, "SELECT state, count(*) FROM all_attempts GROUP BY 1"))
        report = {"seconds": SOAK_SECONDS, "faults": faults, "occurrences": measured, "attempts": attempts,
                  "fence_rejections": scalar(engine, "SELECT count(*) FROM fence_rejections"),
                  "restarts": {name: m["restarts"] for name, m in up.members().items()},
                  "one_shots": dict(rows(engine, "SELECT state, count(*) FROM all_occurrences"
                                                 " WHERE job_id = ANY(:ids) GROUP BY 1", ids=one_shots)),
                  "missing_fire_times": sum(map(len, missing.values())), "succeeded_twice": twice_succeeded(engine),
                  "finished_at": datetime.now(UTC).isoformat()}
        print("\nsoak:", json.dumps(report, default=str, indent=2))
        assert up.running() and up.all_alive()
        assert report["missing_fire_times"] == 0, missing
        assert report["succeeded_twice"] == 0
        assert report["one_shots"] == {"succeeded": len(one_shots)}
    finally:
        status = up.stop()
    assert status == 0
    assert all(pid_gone(m["pid"]) for m in up.members().values())
