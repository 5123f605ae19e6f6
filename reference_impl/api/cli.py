"""``d2kit api``: serve the HTTP API with uvicorn."""

from __future__ import annotations

import typer
from rich.console import Console

from reference_impl import db


def serve(
    host: str = typer.Option("127.0.0.1", help="Interface to listen on."),
    port: int = typer.Option(8000, min=1, max=65535, help="TCP port."),
    log_level: str = typer.Option("info", help="uvicorn log level: critical, error, warning, info, debug."),
) -> None:
    """Serve the HTTP API until Ctrl-C/SIGTERM (OpenAPI at /openapi.json, interactive docs at /docs)."""
    import uvicorn

    from reference_impl.api.app import create_app

    url = db.database_url()
    engine = db.make_engine(url)
    try:
        db.init_schema(engine)  # idempotent: the API may be the first thing started against a new database
    finally:
        engine.dispose()
    Console(stderr=True).print(f"D2 Kit API on [bold]http://{host}:{port}[/] (docs: /docs) -- "
                               f"database {db.redact(url)}")
    uvicorn.run(create_app(url), host=host, port=port, log_level=log_level)


def register(app: typer.Typer) -> None:
    app.command("api")(serve)
