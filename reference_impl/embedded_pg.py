"""Embedded PostgreSQL (PyPI ``pgserver``, which bundles PostgreSQL 16) for when DATABASE_URL is unset.

The data directory lives under the project (``.pgdata/``, git-ignored) unless ``D2KIT_PGDATA`` names another
(``d2kit db --pgdata DIR ...`` sets it): restart a server of your own, never one that others' tests share. The server
listens on a Unix socket only. Run as root, pgserver creates and uses a dedicated ``pgserver`` system user.
The server is left running between commands (``cleanup_mode=None``) so a cluster's processes, the API and
the tests share it; ``d2kit db stop`` stops it.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
import warnings
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SERVER_SETTINGS = {
    # Enough connections for 3 schedulers, a dozen workers, the API, a proxy and the tests.
    "max_connections": "300",
}


def data_dir() -> Path:
    return Path(os.environ.get("D2KIT_PGDATA", PROJECT_ROOT / ".pgdata")).resolve()


def _pgserver():
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (CI, root shells); pgserver then uses /tmp.
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        import pgserver  # imported lazily: it is only needed when DATABASE_URL is unset
        import pgserver.utils

        return pgserver


def _server(pgdata: Path | None = None, cleanup_mode: str | None = None):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")  # get_server reads the runtime dir too
        return _pgserver().get_server(pgdata or data_dir(), cleanup_mode=cleanup_mode)


def start_private(pgdata: Path) -> str:
    """A server of its own in ``pgdata`` -- the postgres-restart drill restarts it, never the shared one.
    Stopped by ``stop(pgdata)``, or when this process exits. Returns its URL."""
    return _server(pgdata, cleanup_mode="stop").get_uri()


def ensure_running() -> str:
    """Start the embedded server if needed (initialising it on first use); return its URL."""
    server = _server()
    auto_conf = data_dir() / "postgresql.auto.conf"
    wanted = "".join(f"{k} = '{v}'\n" for k, v in SERVER_SETTINGS.items())
    if wanted not in _read(auto_conf):
        for key, value in SERVER_SETTINGS.items():
            server.psql(f"ALTER SYSTEM SET {key} = '{value}';")
        restart()
        server = _server()
    return server.get_uri()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _pg_ctl(*args: str, pgdata: Path | None = None) -> None:
    from pgserver import _commands

    user = "pgserver" if os.geteuid() == 0 else None
    _commands.pg_ctl(["-w", *args], pgdata=pgdata or data_dir(), user=user, timeout=60)


def restart(pgdata: Path | None = None) -> None:
    """Restart the server in place (fast shutdown): clients see their connections cut, then reconnect."""
    _pg_ctl("-m", "fast", "restart", pgdata=pgdata)


def status(pgdata: Path | None = None) -> dict[str, Any]:
    """What ``d2kit db status`` shows, read from the data directory without starting anything."""
    pgserver = _pgserver()
    folder = pgdata or data_dir()
    info = pgserver.utils.PostmasterInfo.read_from_pgdata(folder) if (folder / "postmaster.pid").exists() else None
    running = info is not None and info.is_running() and info.status == "ready"
    return {"server": "embedded", "data_directory": str(folder),
            "initialised": (folder / "PG_VERSION").exists(), "running": running,
            "pid": info.pid if running else None, "url": info.get_uri() if running else None,
            "version": pgserver._commands.postgres(["--version"]).strip()}


def outage(seconds: float, pgdata: Path | None = None) -> None:
    """Stop the server (fast shutdown), stay down ``seconds``, then start it with the options it ran with: a
    restart as long as a failover. Clients see their connections cut, then refused, then accepted again."""
    folder = pgdata or data_dir()
    options = shlex.split((folder / "postmaster.opts").read_text())[3:]  # without the binary and its -D pair
    _pg_ctl("-m", "fast", "stop", pgdata=folder)
    time.sleep(seconds)
    _pg_ctl("-o", shlex.join(options), "-l", str(folder / "outage.log"), "start", pgdata=folder)


def stop(pgdata: Path | None = None) -> bool:
    """Stop the server if it runs; return whether it was running."""
    if not ((pgdata or data_dir()) / "postmaster.pid").exists():
        return False
    try:
        _pg_ctl("-m", "fast", "stop", pgdata=pgdata)
    except subprocess.CalledProcessError:
        return False
    return True
