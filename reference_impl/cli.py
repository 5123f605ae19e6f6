"""The scheduler's own commands: database, tenants, jobs, status, the processes, a local cluster, the API.

``d2kit.cli`` puts them at the top of the ``d2kit`` console script next to the kit's tools; run alone
(``python -m reference_impl.cli``) they are all a scheduler or worker process needs.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import typer
from rich.console import Console

from reference_impl import cleaner, db, policies, states
from reference_impl.api.cli import register as register_api
from reference_impl.lease import HEARTBEAT_SECONDS
from reference_impl.processes import SHUTDOWN_GRACE_SECONDS
from reference_impl.supervisor import BACKOFF_FIRST, BACKOFF_MAX

app = typer.Typer(
    help="The reference scheduler: database, tenants, jobs, status, scheduler and worker processes, the API.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
console = Console()

db_app = typer.Typer(
    help="The PostgreSQL in use: DATABASE_URL when set, else the embedded server, whose data directory is "
         "D2KIT_PGDATA (default .pgdata/ in the project). start/stop/restart act on the embedded server only; "
         "restart one of your own (--pgdata), not one that other processes share.",
    no_args_is_help=True)
app.add_typer(db_app, name="db")
register_api(app)


@db_app.callback()
def db_options(pgdata: Path = typer.Option(None, envvar="D2KIT_PGDATA", file_okay=False,
                                           help="The embedded server's data directory (default: .pgdata/).")) -> None:
    import os

    if pgdata is not None:  # every command -- and every process started from here -- then uses this directory
        os.environ["D2KIT_PGDATA"] = str(pgdata)


@db_app.command("url")
def db_url(as_json: bool = typer.Option(False, "--json", help="Also the schema version, machine-readable.")) -> None:
    """Print the database URL in use (starts the embedded server if DATABASE_URL is unset)."""
    url = db.database_url()
    if not as_json:
        print(url)
        return
    engine = db.make_engine(url)
    with engine.begin() as conn:
        version = db.schema_version(conn)
    engine.dispose()
    _print_json({"url": db.redact(url), "schema_version": version, "latest_schema_version": db.migrations()[-1][0]})


@db_app.command("upgrade")
@db_app.command("init")
def db_upgrade(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Bring the database to the current schema: a new one gets schema.sql, an existing one its pending
    migrations (reference_impl/sql/migrations/). Safe to run any number of times."""
    engine = db.make_engine()
    applied = db.init_schema(engine)
    with engine.begin() as conn:
        version = db.schema_version(conn)
    engine.dispose()
    if as_json:
        _print_json({"applied": applied, "schema_version": version})
        return
    where = db.redact(db.database_url())
    done = ", ".join(applied) if applied else "nothing pending"
    console.print(f"{where}: schema version {version} ({done})")


def _embedded_state(as_json: bool, done: str) -> None:
    from reference_impl import embedded_pg

    state = embedded_pg.status()
    if as_json:
        _print_json({"done": done, **state})
    else:
        console.print(f"{done}: {state['version']}, data directory {state['data_directory']}, "
                      f"{'running' if state['running'] else 'not running'}")


@db_app.command("start")
def db_start(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Start the embedded server (initialising its data directory on first use); a no-op if it runs."""
    from reference_impl import embedded_pg

    embedded_pg.ensure_running()
    _embedded_state(as_json, "started")


@db_app.command("stop")
def db_stop(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Stop the embedded server (fast shutdown: open sessions are cut); a no-op if it is not running."""
    from reference_impl import embedded_pg

    _embedded_state(as_json, "stopped" if embedded_pg.stop() else "was not running")


@db_app.command("restart")
def db_restart(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Restart the embedded server in place (starts it if stopped). Clients see their sessions cut and
    reconnect by themselves; a `d2kit up` cluster on it keeps running."""
    from reference_impl import embedded_pg

    if embedded_pg.status()["running"]:
        embedded_pg.restart()
    else:
        embedded_pg.ensure_running()
    _embedded_state(as_json, "restarted")


@db_app.command("status")
def db_status(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Which server is in use (DATABASE_URL or embedded), its version, data directory, and whether it runs.
    Starts nothing."""
    import os

    from sqlalchemy import text

    from reference_impl import embedded_pg
    from reference_impl.processes import describe_error

    url = os.environ.get("DATABASE_URL")
    if url:
        state = {"server": "DATABASE_URL", "url": db.redact(url), "running": False, "version": None,
                 "data_directory": None, "error": None}
        engine = db.make_engine(url, pool_size=1)
        try:
            with engine.connect() as conn:
                state["version"] = conn.execute(text("SELECT version()")).scalar_one()
                state["running"] = True
                state["data_directory"] = conn.execute(text(
                    "SELECT setting FROM pg_settings WHERE name = 'data_directory'")).scalar()  # NULL unless allowed
        except Exception as exc:  # unreachable is an answer here, not a failure
            state["error"] = describe_error(exc)
        finally:
            engine.dispose()
    else:
        state = embedded_pg.status()
    if as_json:
        _print_json(state)
        return
    for key, value in state.items():
        console.print(f"[bold]{key.replace('_', ' ')}:[/] {value}")


def _print_json(value) -> None:
    print(json.dumps(value, default=str, indent=2))


def _engine():
    engine = db.make_engine()
    db.init_schema(engine)
    return engine


# -- tenants and jobs ---------------------------------------------------------------------------------
tenant_app = typer.Typer(help="Tenants: API keys, per-pool concurrency caps, fair-share weights.",
                         no_args_is_help=True)
app.add_typer(tenant_app, name="tenant")


@tenant_app.command("create")
def tenant_create(
    tenant_id: str = typer.Argument(..., help="Tenant id, e.g. 'acme'."),
    max_running: int = typer.Option(100, min=1, help="Max concurrently running attempts, per pool."),
    weight: int = typer.Option(1, min=1, help="Share of a contended pool relative to other tenants."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Create a tenant (or rotate its key); prints the API key once."""
    from reference_impl import tenants

    with _engine().begin() as conn:
        key = tenants.create_tenant(conn, tenant_id, max_running, weight)
    if as_json:
        _print_json({"tenant": tenant_id, "api_key": key})
    else:
        console.print(f"tenant [bold]{tenant_id}[/] -- API key (shown once): [bold]{key}[/]")


@app.command()
def submit(
    name: str = typer.Option(..., help="Job name."),
    handler: str = typer.Option("noop", help="Registered handler: noop, sleep, fail_n, ledger_write."),
    cron: str = typer.Option(None, help="Recurring schedule, e.g. '0 9 * * *' (6 fields: seconds last)."),
    run_at: str = typer.Option(None, help="One-shot time, ISO 8601 with offset, or 'now'."),
    timezone: str = typer.Option("UTC", help="IANA time zone for the cron expression."),
    dst_gap: str = typer.Option("shift", help=f"{' | '.join(states.DST_GAP)}: a local time the clocks jump over."),
    dst_overlap: str = typer.Option("first", help=f"{' | '.join(states.DST_OVERLAP)}: a local time that happens "
                                                  "twice."),
    payload: str = typer.Option("{}", help="JSON object given to the handler."),
    tenant: str = typer.Option("default", help="Tenant to submit for (created if missing)."),
    misfire_policy: str = typer.Option("run_once", help=" | ".join(policies.MISFIRE_POLICIES)),
    catchup_window: int = typer.Option(86_400, help="Seconds: a missed fire time older than this never runs."),
    max_catchup: int = typer.Option(100, help="run_all: at most this many missed fire times run."),
    overlap_policy: str = typer.Option("allow", help=" | ".join(policies.OVERLAP_POLICIES)),
    pool: str = typer.Option(None, help="short | long (default from --expected-duration)."),
    expected_duration: float = typer.Option(None, help="Expected run time in seconds (picks the pool)."),
    delivery: str = typer.Option("at_least_once", help=f"{' | '.join(policies.DELIVERY)}: whether a lost "
                                 "attempt is retried, or its occurrence recorded dead (never started twice)."),
    max_attempts: int = typer.Option(None, help="Attempts before an occurrence is dead (default 3; at_most_once: "
                                     "1)."),
    max_runtime: float = typer.Option(None, help="Seconds an attempt may run before it is cancelled and ends "
                                      "timed_out (default: its pool's)."),
    retry_base: float = typer.Option(1.0, help="Seconds: retry backoff base (exponential, full jitter)."),
    idempotency_key: str = typer.Option(None, help="Same key twice returns the same job."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Create a job from the command line (validated exactly like the HTTP API)."""
    from pydantic import ValidationError

    from reference_impl import jobs, tenants

    fields = {"name": name, "handler": handler, "cron": cron, "timezone": timezone, "dst_gap": dst_gap,
              "dst_overlap": dst_overlap, "misfire_policy": misfire_policy, "catchup_window_seconds": catchup_window,
              "max_catchup": max_catchup, "overlap_policy": overlap_policy, "pool": pool,
              "expected_duration_seconds": expected_duration, "delivery": delivery, "max_attempts": max_attempts,
              "retry_base_seconds": retry_base, "max_runtime_seconds": max_runtime,
              "idempotency_key": idempotency_key}
    try:
        fields["payload"] = json.loads(payload)
    except json.JSONDecodeError as exc:
        _fail(f"--payload: not valid JSON ({exc.msg})")
    if run_at == "now":
        from datetime import UTC, datetime

        fields["run_at"] = datetime.now(UTC)
    elif run_at:
        fields["run_at"] = run_at
    try:
        spec = jobs.JobSpec(**{k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        _fail("; ".join(f"{'.'.join(map(str, e['loc'])) or 'job'}: {e['msg']}" for e in exc.errors()))
    if problems := jobs.unstorable_values(spec):
        _fail("; ".join(f"{'.'.join(map(str, loc))}: {message}" for loc, message in problems))
    with _engine().begin() as conn:
        tenants.ensure_tenant(conn, tenant)
        job, created = jobs.submit(conn, tenant, spec)
    if as_json:
        _print_json({"created": created, "job": job})
    else:
        verb = "created" if created else "already existed (idempotency key)"
        console.print(f"job [bold]{job['id']}[/] {verb}; next fire {job['next_fire_at']}")


def _fail(message: str) -> None:
    console.print(f"[red]error:[/] {message}")
    raise typer.Exit(2)


# -- managing jobs: the API's calls, through the same jobs.py -----------------------------------------
jobs_app = typer.Typer(help="List, show, pause, resume, delete and trigger jobs (what the HTTP API does).",
                       no_args_is_help=True)
app.add_typer(jobs_app, name="jobs")
JOB_ID = typer.Argument(..., min=1, help="Job id.")
TENANT = typer.Option(None, help="Only this tenant's jobs, as its API key would see them (default: every tenant).")
AS_JSON = typer.Option(False, "--json", help="Machine-readable output (the API's JSON).")


@jobs_app.command("list")
def jobs_list(
    tenant: str = TENANT,
    name: str = typer.Option(None, help="Only jobs with exactly this name."),
    paused: bool = typer.Option(None, "--paused/--unpaused", help="Only paused, or only unpaused, jobs."),
    deleted: bool = typer.Option(False, "--deleted", help="Deleted jobs instead of live ones."),
    schedule_kind: str = typer.Option(None, "--kind", help=" | ".join(states.SCHEDULE_KINDS)),
    limit: int = typer.Option(50, min=1, max=200, help="Jobs per page."),
    before: int = typer.Option(None, min=1, help="Only jobs older than this id (the previous page's next_before)."),
    as_json: bool = AS_JSON,
) -> None:
    """Jobs, newest first (GET /v1/jobs)."""
    from reference_impl import jobs
    from reference_impl.views import jobs_table

    if schedule_kind not in (None, *states.SCHEDULE_KINDS):
        _fail(f"--kind: '{schedule_kind}' is not one of {', '.join(states.SCHEDULE_KINDS)}")
    with _engine().begin() as conn:
        page, next_before = jobs.list_jobs(conn, tenant, name=name, paused=paused, deleted=deleted,
                                           schedule_kind=schedule_kind, limit=limit, before=before)
    if as_json:
        _print_json({"jobs": page, "next_before": next_before})
    else:
        console.print(jobs_table(page, next_before))


def _on_job(job_id: int, tenant: str | None, as_json: bool, change=None, *, live: bool = False) -> None:
    """Look the job up as the API does (404 -> exit 2 with the same sentence), apply ``change`` in the same
    transaction, and print what it returns -- the job as it is now, by default."""
    from reference_impl import jobs
    from reference_impl.views import job_table

    with _engine().begin() as conn:
        try:
            jobs.owned(conn, tenant, job_id, live=live)
            result = change(conn) if change else None
            result = result or jobs.owned(conn, tenant, job_id)
        except (jobs.JobNotFound, jobs.JobDeleted) as exc:
            _fail(str(exc))
    if as_json:
        _print_json(result)
    elif "occurrence_id" in result:
        reason = f" ({result['reason']})" if result["reason"] else ""
        console.print(f"job {job_id}: manual occurrence [bold]{result['occurrence_id']}[/] is "
                      f"[bold]{result['state']}[/]{reason}")
    else:
        console.print(job_table(result))


@jobs_app.command("show")
def jobs_show(job_id: int = JOB_ID, tenant: str = TENANT, as_json: bool = AS_JSON) -> None:
    """One job as stored, with its cursor and next fire time (GET /v1/jobs/ID); its runs: `executions ID`."""
    _on_job(job_id, tenant, as_json)


@jobs_app.command("pause")
def jobs_pause(job_id: int = JOB_ID, tenant: str = TENANT, as_json: bool = AS_JSON) -> None:
    """Stop materialising; fire times that pass meanwhile are misfires on resume (POST .../pause)."""
    from reference_impl import jobs

    _on_job(job_id, tenant, as_json, lambda conn: jobs.set_paused(conn, job_id, True), live=True)


@jobs_app.command("resume")
def jobs_resume(job_id: int = JOB_ID, tenant: str = TENANT, as_json: bool = AS_JSON) -> None:
    """Materialise again; the misfire policy decides what the pause missed (POST .../resume)."""
    from reference_impl import jobs

    _on_job(job_id, tenant, as_json, lambda conn: jobs.set_paused(conn, job_id, False), live=True)


@jobs_app.command("delete")
def jobs_delete(job_id: int = JOB_ID, tenant: str = TENANT, as_json: bool = AS_JSON) -> None:
    """Nothing fires after this; unfinished runs are cancelled, running ones cooperatively. Twice is a no-op
    (DELETE /v1/jobs/ID)."""
    from reference_impl import jobs

    _on_job(job_id, tenant, as_json, lambda conn: jobs.delete(conn, job_id))


@jobs_app.command("trigger")
def jobs_trigger(job_id: int = JOB_ID, tenant: str = TENANT, as_json: bool = AS_JSON) -> None:
    """Run the job once now; its overlap policy decides what happens while a run is unfinished
    (POST .../trigger)."""
    from reference_impl import jobs

    _on_job(job_id, tenant, as_json, lambda conn: jobs.trigger(conn, job_id), live=True)


# -- observing ----------------------------------------------------------------------------------------
@app.command()
def status(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Due, dispatched-but-not-completed, completed, skipped, dead -- and every process's clock skew."""
    from reference_impl import status as status_mod
    from reference_impl.views import status_tables

    with _engine().begin() as conn:
        summary = status_mod.summary(conn)
    if as_json:
        _print_json(summary)
    else:
        for table in status_tables(summary):
            console.print(table)


@app.command()
def executions(
    job_id: int = typer.Argument(..., help="Job id."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Every occurrence of a job with every attempt: worker, fencing token, times, outcome."""
    from reference_impl import jobs
    from reference_impl import status as status_mod
    from reference_impl.views import executions_table

    with _engine().begin() as conn:
        rows = status_mod.executions(conn, job_id)
        job = jobs.get(conn, None, job_id=job_id)
    if as_json:
        _print_json(rows)
    else:
        console.print(executions_table(job, job_id, rows))


# -- processes ----------------------------------------------------------------------------------------
scheduler_app = typer.Typer(help="A scheduler replica (materialiser + reaper + cleaner).", no_args_is_help=True)
worker_app = typer.Typer(help="A worker process for one pool.", no_args_is_help=True)
app.add_typer(scheduler_app, name="scheduler")
app.add_typer(worker_app, name="worker")


@scheduler_app.command("run")
def scheduler_run(
    process_id: str = typer.Option("scheduler-1", "--id", help="Unique process id."),
    retention_days: float = typer.Option(cleaner.DEFAULT_RETENTION.days, min=0.001,
                                         help="Days of execution history kept; older days are dropped."),
    archive_after_seconds: float = typer.Option(
        cleaner.DEFAULT_ARCHIVE_AFTER.total_seconds(), min=0,
        help="Finished executions stay in the queue tables this long, then move to the history partitions."),
    reap_grace_seconds: float = typer.Option(
        HEARTBEAT_SECONDS, min=0, help="After (re)connecting, reap nothing for this long: at least the workers' "
                                       "heartbeat period, so a database outage alone expires no lease."),
) -> None:
    """Run one scheduler replica until SIGTERM/SIGINT."""
    import threading
    from datetime import timedelta

    from reference_impl import processes
    from reference_impl.scheduler import Scheduler, SchedulerConfig

    try:
        config = SchedulerConfig(process_id, archive_after=timedelta(seconds=archive_after_seconds),
                                 retention=timedelta(days=retention_days), reap_grace_seconds=reap_grace_seconds)
    except ValueError as exc:
        _fail(str(exc))
    processes.configure_logging(process_id)
    scheduler = Scheduler(db.database_url(), config)
    processes.stop_on_signals(scheduler.stop)
    threading.current_thread().name = process_id
    scheduler.run()


@worker_app.command("run")
def worker_run(
    process_id: str = typer.Option("worker-1", "--id", help="Unique process id."),
    pool: str = typer.Option("short", help="Pool to serve."),
    concurrency: int = typer.Option(16, min=1, help="Handler slots (threads)."),
    lease: float = typer.Option(None, min=0.5, help="Lease seconds, database clock (default: the pool's, "
                                                  "30 s short, 120 s long)."),
    heartbeat: float = typer.Option(None, help="Heartbeat period in seconds (default lease/3, at most 10)."),
    poll: float = typer.Option(0.05, help="Idle poll period in seconds."),
    batch: int = typer.Option(64, min=1, help="Max occurrences per claim."),
    ahead: float = typer.Option(None, min=0, help="Claim ahead: also claim what comes due within this many seconds "
                                                  "and start it on time (default two poll periods; 0: only what "
                                                  "is due)."),
    max_abandoned: int = typer.Option(
        None, min=1, help="Abandoned (hung) handler threads still alive at which the worker finishes its other "
                          "handlers and exits with status 75 so its supervisor restarts it (default: a quarter "
                          "of the slots)."),
) -> None:
    """Run one worker process until SIGTERM/SIGINT (exit 0), or until hung handlers make it recycle (exit 75)."""
    from reference_impl import processes
    from reference_impl.worker import Worker, WorkerConfig

    try:
        config = WorkerConfig(process_id, pool, concurrency, lease, heartbeat, poll, batch, ahead,
                              max_abandoned=max_abandoned)
    except ValueError as exc:
        _fail(str(exc))
    processes.configure_logging(process_id)
    worker = Worker(db.database_url(), config)
    processes.stop_on_signals(worker.stop)
    raise typer.Exit(worker.run())


@app.command()
def up(
    schedulers: int = typer.Option(3, min=1, help="Scheduler replicas."),
    workers: int = typer.Option(4, min=0, help="Workers for the 'short' pool."),
    long_workers: int = typer.Option(1, min=0, help="Workers for the 'long' pool."),
    lease: float = typer.Option(None, help="Worker lease seconds (default: each pool's)."),
    archive_after_seconds: float = typer.Option(
        cleaner.DEFAULT_ARCHIVE_AFTER.total_seconds(), min=0,
        help="Schedulers move finished executions to the history partitions after this long."),
    api: bool = typer.Option(False, "--api/--no-api", help="Also serve the HTTP API on 127.0.0.1 (supervised too)."),
    api_port: int = typer.Option(8000, min=1, max=65535, help="The API's port."),
    restart: bool = typer.Option(True, "--restart/--no-restart",
                                 help=f"Restart a member that exits or is killed, with backoff ({BACKOFF_FIRST:g} s "
                                      f"doubling to {BACKOFF_MAX:g} s). --no-restart leaves it dead, for drills."),
    drain_timeout: float = typer.Option(
        2 * SHUTDOWN_GRACE_SECONDS + 5, min=0, help="On Ctrl-C/SIGTERM: seconds members get to drain before they are "
                                                    "killed (default: a worker's whole graceful stop, and 5 s more)."),
    log_dir: Path = typer.Option(None, help="Folder for the members' logs and up.json (the supervisor's state); "
                                            "default: a new temporary folder."),
) -> None:
    """Run a local cluster of real processes and keep it running until Ctrl-C or SIGTERM, with a live summary.

    Members that die are restarted; a database that goes away (restart, outage) is shown in the summary and
    waited out -- it never stops the cluster. Uses the embedded PostgreSQL in D2KIT_PGDATA unless DATABASE_URL
    is set. Exits 0 after stopping every member."""
    import signal
    import tempfile
    import threading

    from reference_impl.cluster import LocalCluster
    from reference_impl.supervisor import DatabaseWatch, Supervisor
    from reference_impl.views import run_cluster_live


    engine = _engine()
    folder = log_dir or Path(tempfile.mkdtemp(prefix="d2kit-up-"))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    scheduler_args = ["--archive-after-seconds", str(archive_after_seconds)]
    cluster = LocalCluster(db.database_url(), folder)
    supervisor = Supervisor(cluster, restart=restart)
    watch = DatabaseWatch(engine)
    try:
        for i in range(1, schedulers + 1):
            supervisor.add(partial(cluster.start_scheduler, f"scheduler-{i}", extra_args=scheduler_args))
        for pool, count in (("short", workers), ("long", long_workers)):
            for i in range(1, count + 1):
                supervisor.add(partial(cluster.start_worker, f"worker-{pool}-{i}", pool=pool, lease=lease))
        if api:
            supervisor.add(partial(cluster.start_api, port=api_port))
        watch.start()
        run_cluster_live(supervisor, watch, stop)
    finally:
        console.print(f"stopping {len(cluster.members)} members (drain up to {drain_timeout:g} s)...")
        killed = cluster.stop(timeout=drain_timeout)
        watch.stop()
    if killed:
        console.print(f"still running after {drain_timeout:g} s, so killed instead of drained: {', '.join(killed)}")
    console.print(f"stopped; logs in {folder}")


if __name__ == "__main__":
    app()
