"""``make load``: Locust drives the real HTTP API while a cluster of schedulers and workers runs.

Two scenarios, one after the other, each on a fresh rig (scratch database, real processes) plus ``d2kit api`` on
127.0.0.1 and a free port:

* **api**  (load/locustfile.py)    -- tenants submit one-shot jobs due now or within 10 s and read occurrences;
* **cron** (load/cron_scenario.py) -- tenants create 833 per-second cron jobs (the design's 50,000/min peak), so
  the load lands on the scheduler side, then keep reading.

Locust runs headless, bounded by ``--run-time`` and by a hard request cap, and writes its CSV and HTML under
load/results/. What the system did is then read back from the database: executions/s, fire lag, and lost
occurrences (every one-shot job must have succeeded; every cron job must have one occurrence per second between
its first and last fire, each finished).
"""

from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import text

from d2kit.bench import harness
from d2kit.bench.harness import ClusterShape, Progress
from d2kit.bench.results import RESULTS_DIR
from reference_impl import jobs, materializer, tenants

LOAD_DIR = RESULTS_DIR.parent
LOAD_TENANTS = 5
CRON_JOBS = 833  # x one fire per second = the design's peak
API_START_TIMEOUT_SECONDS = 30.0
DRAIN_TIMEOUT_SECONDS = 120.0

ONE_SHOT_LOST_SQL = text(
    "SELECT count(*) FROM jobs j WHERE j.schedule_kind = 'once' AND j.run_at <= :until"
    " AND NOT EXISTS (SELECT 1 FROM all_occurrences o WHERE o.job_id = j.id AND o.state = 'succeeded')")
# Per cron job (one fire per second): every second from its first fire to the end of the run must have an
# occurrence, and every occurrence must be finished. Fires the scheduler had not materialised yet are counted
# as missing too -- _measure waits for it to catch up first, bounded. The record is read whole (all_occurrences),
# wherever the archiver has put it; only the queue can hold an unfinished one.
CRON_LOST_SQL = text(
    "SELECT coalesce(sum(expected - have), 0) + (SELECT count(*) FROM occurrences"
    "   WHERE state NOT IN ('succeeded', 'dead', 'skipped', 'cancelled'))"
    " FROM (SELECT o.job_id, floor(extract(epoch FROM CAST(:until AS timestamptz) - min(o.fire_at)))::bigint + 1"
    "              AS expected, count(*) FILTER (WHERE o.fire_at <= :until) AS have"
    "       FROM all_occurrences o JOIN jobs j ON j.id = o.job_id WHERE j.schedule_kind = 'cron' GROUP BY o.job_id) x")
CRON_BEHIND_SQL = text(
    "SELECT count(*) FROM jobs WHERE schedule_kind = 'cron' AND materialized_through < :until")
SUBMITTED_SQL = text("SELECT count(*) FROM jobs WHERE created_at >= :since AND created_at < :until")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start_api(url: str, port: int, log_dir: Path) -> subprocess.Popen:
    env = {**os.environ, "DATABASE_URL": url, "PYTHONUNBUFFERED": "1"}
    with open(log_dir / "api.log", "ab") as log_file:
        api = subprocess.Popen([sys.executable, "-m", "reference_impl.cli", "api", "--host", "127.0.0.1", "--port",
                                str(port), "--log-level", "warning"], env=env, stdout=log_file,
                               stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + API_START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return api
        except OSError:
            if api.poll() is not None:
                break
            time.sleep(0.2)
    api.kill()
    raise RuntimeError(f"the API did not start on 127.0.0.1:{port} (log: {log_dir / 'api.log'})")


def _locust_stats(prefix: Path) -> dict[str, Any]:
    """Locust's own aggregated row: requests, failures, latency percentiles (ms)."""
    with open(f"{prefix}_stats.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    total = next(r for r in rows if r["Name"] == "Aggregated")
    by_name = {r["Name"]: int(r["Request Count"]) for r in rows if r["Name"] != "Aggregated"}
    return {"requests": int(total["Request Count"]), "errors": int(total["Failure Count"]),
            "api_latency_ms": {"p50": float(total["50%"]), "p99": float(total["99%"]),
                               "max": float(total["Max Response Time"])},
            "requests_per_second": round(float(total["Requests/s"]), 1), "requests_by_name": by_name}


def scenario(name: str, locustfile: str, seconds: float, users: int, max_requests: int, save: bool,
             progress: Progress, cron_jobs: int = CRON_JOBS) -> dict[str, Any]:
    shape = ClusterShape()
    with harness.rig(shape) as rig:
        with rig.engine.begin() as conn:
            keys = [tenants.create_tenant(conn, f"load-{i}", max_running=10_000) for i in range(LOAD_TENANTS)]
        keys_file = Path(tempfile.mkstemp(prefix="d2load-keys-", suffix=".json")[1])
        keys_file.write_text(json.dumps(keys))
        port = _free_port()
        api = _start_api(rig.url, port, rig.cluster.log_dir)
        prefix = (RESULTS_DIR if save else rig.cluster.log_dir) / name
        try:
            command = [sys.executable, "-m", "locust", "-f", str(LOAD_DIR / locustfile), "--headless",
                       "--host", f"http://127.0.0.1:{port}", "-u", str(users), "-r", str(users),
                       "--run-time", f"{int(seconds)}s", "--stop-timeout", "5", "--only-summary",
                       "--csv", str(prefix), "--html", f"{prefix}.html", "--loglevel", "WARNING"]
            env = {**os.environ, "D2_LOAD_KEYS": str(keys_file), "D2_LOAD_MAX_REQUESTS": str(max_requests),
                   "D2_LOAD_CRON_JOBS": str(cron_jobs)}
            meter = harness.ProcessMeter({**rig.components(), "api": [api.pid]}, rig.engine)
            began = rig.db_now()
            with open(rig.cluster.log_dir / f"locust-{name}.log", "wb") as log_file:
                locust = subprocess.Popen(command, env=env, stdout=log_file, stderr=subprocess.STDOUT)
                meter.components["locust"] = [locust.pid]
                meter.start()
                deadline = time.monotonic() + seconds + 60
                while locust.poll() is None and time.monotonic() < deadline:
                    progress(f"load {name}: Locust running, {int(time.monotonic() - deadline + seconds + 60)}s "
                             f"of {int(seconds)}s")
                    meter.sample()
                    time.sleep(1)
                if locust.poll() is None:
                    locust.kill()
            meter.stop()
            ended = rig.db_now()
            rss = rig.peak_rss() | {"api": harness.peak_rss_mb(api.pid)}
        finally:
            api.terminate()
            api.wait(timeout=15)
            keys_file.unlink(missing_ok=True)
        return _measure(rig, name, prefix, began, ended, meter, rss, progress)


def _measure(rig: harness.Rig, name: str, prefix: Path, began: datetime, ended: datetime,
             meter: harness.ProcessMeter, rss: dict[str, Any], progress: Progress) -> dict[str, Any]:
    deadline = time.monotonic() + DRAIN_TIMEOUT_SECONDS
    while time.monotonic() < deadline:  # the scheduler must first materialise every fire up to the end
        with rig.engine.begin() as conn:
            behind = conn.execute(CRON_BEHIND_SQL, {"until": ended}).scalar_one()
        if not behind:
            break
        progress(f"load {name}: {behind} schedules not materialised up to the end of the run yet")
        time.sleep(1)
    with rig.engine.begin() as conn:
        cron_ids = list(conn.execute(text("SELECT id FROM jobs WHERE schedule_kind = 'cron'")).scalars())
        for job_id in cron_ids:  # stop the schedules; what is already materialised still runs
            jobs.set_paused(conn, job_id, True)
        submitted = conn.execute(SUBMITTED_SQL, {"since": began, "until": ended}).scalar_one()
    progress(f"load {name}: draining")
    time.sleep(materializer.LOOKAHEAD.total_seconds() + 0.5)  # what was materialised ahead must come due first
    drained = rig.wait_drained(DRAIN_TIMEOUT_SECONDS)
    window = (ended - began).total_seconds()
    lag = harness.fire_lag(rig.engine, began, ended)
    done, _, _ = harness.completed(rig.engine, began, ended)
    with rig.engine.begin() as conn:
        lost = conn.execute(CRON_LOST_SQL if cron_ids else ONE_SHOT_LOST_SQL, {"until": ended}).scalar_one()
    stats = _locust_stats(prefix)
    return {"scenario": name, "seconds": round(window, 1), "submissions_per_second": round(submitted / window, 1),
            "jobs_submitted": submitted, "cron_jobs": len(cron_ids),
            "executions_per_second": round(done / window, 1), "fire_lag_ms": lag.as_dict(),
            "lost_occurrences": int(lost), "drained": drained, **stats,
            "cpu_percent": meter.cpu_percent(), "peak_rss_mb": rss,
            "series": harness.series(rig.engine, began, ended)}


def run(seconds: float, users: int, max_requests: int, save: bool,
        progress: Progress) -> dict[str, Any]:
    """Both scenarios; the top-level numbers are the API scenario's, the cron scenario's sit under 'cron'."""
    api = scenario("api", "locustfile.py", seconds, users, max_requests, save, progress)
    cron = scenario("cron", "cron_scenario.py", seconds, users, max_requests, save, progress)
    api.pop("series")
    series = cron.pop("series")  # the chart shows the scenario that runs at the design's peak
    return {**api, "errors": api["errors"] + cron["errors"],
            "lost_occurrences": api["lost_occurrences"] + cron["lost_occurrences"],
            "cron": cron, "machine": harness.machine(), "series": series}
