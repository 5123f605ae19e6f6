"""Terminal views (rich): status tables, jobs, a job's execution history, and the live cluster summary."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.live import Live
from rich.table import Table

from reference_impl.supervisor import DatabaseWatch, Supervisor


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


def _schedule(job: dict[str, Any]) -> str:
    return f"{job['cron']} ({job['timezone']})" if job["cron"] else f"once at {job['run_at']}"


def jobs_table(jobs: list[dict[str, Any]], next_before: int | None) -> Table:
    more = f" -- older: --before {next_before}" if next_before else ""
    table = Table(title=f"Jobs, newest first{more}")
    for col in ("id", "tenant", "name", "handler", "schedule", "pool", "overlap", "paused", "next fire"):
        table.add_column(col)
    for job in jobs:
        schedule = _schedule(job)
        pool = f"{job['pool']} → {job['routed_pool']} (observed)" if job["routed_pool"] else job["pool"]
        table.add_row(str(job["id"]), job["tenant_id"], job["name"], job["handler"], schedule, pool,
                      job["overlap_policy"], "yes" if job["paused"] else "", str(job["next_fire_at"] or ""))
    return table


def job_table(job: dict[str, Any]) -> Table:
    table = Table(title=f"Job {job['id']}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for field, value in job.items():
        table.add_row(field, "" if value is None else str(value))
    return table


def executions_table(job: dict[str, Any] | None, job_id: int, rows: list[dict[str, Any]]) -> Table:
    # The schedule as stored: a hashed cron field ('H') is shown resolved, the minute this job really fires at.
    schedule = "" if job is None else f", {_schedule(job)}"
    table = Table(title=f"Job {job_id}{schedule}: occurrences and attempts (newest first)")
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


def members_table(members: list[dict[str, Any]]) -> Table:
    table = Table(title="Members (restarted by d2kit up when they exit or are killed)")
    for col in ("name", "kind", "pid", "state", "restarts", "last exit"):
        table.add_column(col)
    for m in members:
        if m["alive"]:
            state = "[green]running[/]"
        elif m["restart_in_s"] is not None:
            state = f"[yellow]restarting in {m['restart_in_s']} s[/]"
        else:
            state = "[red]dead (--no-restart)[/]"
        table.add_row(m["name"], m["kind"], str(m["pid"]), state, str(m["restarts"]) if m["restarts"] else "",
                      "" if m["last_exit"] is None else str(m["last_exit"]))
    return table


def cluster_view(members: list[dict[str, Any]], watch: DatabaseWatch, log_dir: Path) -> Group:
    alive = sum(m["alive"] for m in members)
    header = Table.grid()
    header.add_row(f"{alive}/{len(members)} members alive -- logs in {log_dir} -- Ctrl-C to stop")
    unreachable = watch.unreachable_for()
    if unreachable is not None:
        header.add_row(f"[bold red]database unreachable for {unreachable:.1f} s[/] ({watch.error}); members keep "
                       "retrying" + (" -- the figures below are from before" if watch.summary else ""))
    tables = status_tables(watch.summary) if watch.summary else []
    return Group(header, members_table(members), *tables)


def run_cluster_live(supervisor: Supervisor, watch: DatabaseWatch, stop: threading.Event) -> None:
    """Supervise and show the cluster until ``stop`` is set (Ctrl-C, SIGTERM)."""
    state_file = supervisor.cluster.log_dir / "up.json"
    with Live(refresh_per_second=4) as live:
        while not stop.is_set():
            supervisor.tick()
            supervisor.write_state(state_file, watch)
            live.update(cluster_view(supervisor.members(), watch, supervisor.cluster.log_dir))
            stop.wait(0.25)
