"""``d2kit``: the one console script. Each command group lives with the component it drives."""

from __future__ import annotations

import json

import typer
from rich.console import Console

from reference_impl import db

app = typer.Typer(
    help="D2 Kit: design a fault-tolerant distributed job scheduler -- reference implementation, "
    "failure drills, load tests, rubric and practice timer.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
console = Console()

db_app = typer.Typer(help="The PostgreSQL in use (DATABASE_URL, or the embedded server).", no_args_is_help=True)
app.add_typer(db_app, name="db")


@db_app.command("url")
def db_url() -> None:
    """Print the database URL in use (starts the embedded server if DATABASE_URL is unset)."""
    print(db.database_url())


@db_app.command("init")
def db_init() -> None:
    """Apply the schema (idempotent)."""
    engine = db.make_engine()
    db.init_schema(engine)
    console.print(f"schema applied to {db.redact(db.database_url())}")


@db_app.command("stop")
def db_stop(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Stop the embedded PostgreSQL server (no-op with DATABASE_URL)."""
    from reference_impl import embedded_pg

    stopped = embedded_pg.stop()
    if as_json:
        print(json.dumps({"stopped": stopped}))
    else:
        console.print("embedded PostgreSQL stopped" if stopped else "embedded PostgreSQL was not running")


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":
    app()
