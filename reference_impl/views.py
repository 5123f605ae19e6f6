"""Terminal views (rich): status tables, a job's execution history, and the live cluster summary."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.live import Live
from rich.table import Table
from sqlalchemy import Engine

from reference_impl import status
from reference_impl.cluster import LocalCluster


def status_tables(summary: dict[str, Any]) -> list[Table]:
    occ = Table(title=f"Occurrences (schema version {summary['schema_version']})", show_lines=False)
    for col in ("due now", "scheduled ahead", *summary["occurrences"], "fence rejections"):
        occ.add_column(col, justify="right")
    occ.add_row(str(summary["due_now"]), str(summary["scheduled_ahead"]),
                *(str(v) for v in summary["occurrences"].values()),
                str(sum(summary["fence_rejections"].values())))
    procs = Table(title="Processes (skew is shown, never used: leases use the database clock)")
    for col in ("id", "kind", "pool", "pid", "heartbeat age s", "skew ms", "stopped"):
        procs.add_column(col)
    for p in summary["processes"]:
        procs.add_row(p["id"], p["kind"], p["pool"] or "", str(p["pid"]), str(p["heartbeat_age_s"]),
                      str(p["skew_ms"]), "yes" if p["stopped"] else "")
    tables = [occ, procs]
    if summary["skipped_by_reason"]:
        skipped = Table(title="Skipped occurrences by reason")
        skipped.add_column("reason")
        skipped.add_column("count", justify="right")
        for reason, count in sorted(summary["skipped_by_reason"].items()):
            skipped.add_row(reason, str(count))
        tables.append(skipped)
    return tables


def executions_table(job_id: int, rows: list[dict[str, Any]]) -> Table:
    table = Table(title=f"Job {job_id}: occurrences and attempts (newest first)")
    for col in ("occurrence", "fire at", "state", "reason", "token", "worker", "attempt state", "dispatched",
                "finished", "error"):
        table.add_column(col)
    for occ in rows:
        attempts = occ["attempt_log"] or [{}]
        for i, att in enumerate(attempts):
            first = i == 0
            table.add_row(str(occ["id"]) if first else "", str(occ["fire_at"]) if first else "",
                          occ["state"] if first else "", (occ["reason"] or "") if first else "",
                          str(att.get("token", "")), att.get("worker_id", ""), att.get("state", ""),
                          str(att.get("dispatched_at", "")), str(att.get("finished_at") or ""),
                          (att.get("error") or "")[:60])
    return table


def run_cluster_live(engine: Engine, url: str, schedulers: int, workers: int, long_workers: int,
                     lease: float | None, api: bool) -> None:
    log_dir = Path(tempfile.mkdtemp(prefix="d2kit-up-"))
    api_process = None
    with LocalCluster(url, log_dir) as cluster:
        for i in range(1, schedulers + 1):
            cluster.start_scheduler(f"scheduler-{i}")
        for i in range(1, workers + 1):
            cluster.start_worker(f"worker-short-{i}", pool="short", lease=lease)
        for i in range(1, long_workers + 1):
            cluster.start_worker(f"worker-long-{i}", pool="long", lease=lease)
        if api:  # its access log goes to the cluster's log folder, not over the live view
            with open(log_dir / "api.log", "ab") as api_log:
                api_process = subprocess.Popen([sys.executable, "-m", "reference_impl.cli", "api"],
                                               stdout=api_log, stderr=subprocess.STDOUT)
        try:
            with Live(refresh_per_second=2) as live:
                while True:
                    with engine.begin() as conn:
                        summary = status.summary(conn)
                    alive = sum(cluster.alive().values())
                    header = Table.grid()
                    header.add_row(f"{alive}/{len(cluster.members)} processes alive -- logs in {log_dir} -- "
                                   "Ctrl-C to stop")
                    live.update(Group(header, *status_tables(summary)))
                    time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            if api_process is not None:
                api_process.terminate()
