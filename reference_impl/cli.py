"""The scheduler's own commands: database, tenants, jobs, status, the processes, a local cluster, the API.

``d2kit.cli`` puts them at the top of the ``d2kit`` console script next to the kit's tools; run alone
(``python -m reference_impl.cli``) they are all a scheduler or worker process needs.
"""

from __future__ import annotations

import json

import typer
from rich.console import Console

from reference_impl import cleaner, db, policies
from reference_impl.api.cli import register as register_api
from reference_impl.lease import HEARTBEAT_SECONDS

app = typer.Typer(
    help="The reference scheduler: database, tenants, jobs, status, scheduler and worker processes, the API.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
console = Console()

db_app = typer.Typer(help="The PostgreSQL in use (DATABASE_URL, or the embedded server).", no_args_is_help=True)
app.add_typer(db_app, name="db")
register_api(app)


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


@db_app.command("stop")
def db_stop(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Stop the embedded PostgreSQL server (no-op with DATABASE_URL)."""
    from reference_impl import embedded_pg

    stopped = embedded_pg.stop()
    if as_json:
        print(json.dumps({"stopped": stopped}))
    else:
        console.print("embedded PostgreSQL stopped" if stopped else "embedded PostgreSQL was not running")


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
    payload: str = typer.Option("{}", help="JSON object given to the handler."),
    tenant: str = typer.Option("default", help="Tenant to submit for (created if missing)."),
    misfire_policy: str = typer.Option("run_once", help=" | ".join(policies.MISFIRE_POLICIES)),
    overlap_policy: str = typer.Option("allow", help=" | ".join(policies.OVERLAP_POLICIES)),
    pool: str = typer.Option(None, help="short | long (default from --expected-duration)."),
    expected_duration: float = typer.Option(None, help="Expected run time in seconds (picks the pool)."),
    max_attempts: int = typer.Option(3, help="Attempts before an occurrence is dead."),
    idempotency_key: str = typer.Option(None, help="Same key twice returns the same job."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Create a job from the command line (validated exactly like the HTTP API)."""
    from pydantic import ValidationError

    from reference_impl import jobs, tenants

    fields = {"name": name, "handler": handler, "cron": cron, "timezone": timezone,
              "misfire_policy": misfire_policy, "overlap_policy": overlap_policy, "pool": pool,
              "expected_duration_seconds": expected_duration, "max_attempts": max_attempts,
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
    from reference_impl import status as status_mod
    from reference_impl.views import executions_table

    with _engine().begin() as conn:
        rows = status_mod.executions(conn, job_id)
    if as_json:
        _print_json(rows)
    else:
        console.print(executions_table(job_id, rows))


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
) -> None:
    """Run one worker process until SIGTERM/SIGINT."""
    from reference_impl import processes
    from reference_impl.worker import Worker, WorkerConfig

    try:
        config = WorkerConfig(process_id, pool, concurrency, lease, heartbeat, poll, batch)
    except ValueError as exc:
        _fail(str(exc))
    processes.configure_logging(process_id)
    worker = Worker(db.database_url(), config)
    processes.stop_on_signals(worker.stop)
    worker.run()


@app.command()
def up(
    schedulers: int = typer.Option(3, min=1, help="Scheduler replicas."),
    workers: int = typer.Option(4, min=0, help="Workers for the 'short' pool."),
    long_workers: int = typer.Option(1, min=0, help="Workers for the 'long' pool."),
    lease: float = typer.Option(None, help="Worker lease seconds (default: each pool's)."),
    api: bool = typer.Option(False, "--api/--no-api", help="Also serve the HTTP API on 127.0.0.1:8000."),
) -> None:
    """Run a local cluster of real processes until Ctrl-C, with a live summary."""
    from reference_impl.views import run_cluster_live

    engine = _engine()
    run_cluster_live(engine, db.database_url(), schedulers, workers, long_workers, lease, api)


if __name__ == "__main__":
    app()
