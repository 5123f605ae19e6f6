"""Shared fixtures: a real PostgreSQL (embedded unless DATABASE_URL is set), one fresh database per test; the docs
site built once for every test that reads it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reference_impl import db


@pytest.fixture(scope="session")
def server_url() -> str:
    return db.database_url()


@pytest.fixture
def database_url(server_url: str):
    """A fresh database with the schema applied; dropped afterwards."""
    with db.scratch_database(server_url, "d2test") as (url, _):
        yield url


@pytest.fixture
def engine(database_url: str):
    engine = db.make_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> Path:
    """`mkdocs build --strict` of the repository, once per run (about 20 s): no warning, or the test fails."""
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                           cwd=Path(__file__).resolve().parent.parent,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True, text=True)
    assert build.returncode == 0, "mkdocs build --strict failed:\n" + build.stdout + build.stderr
    assert "WARNING" not in build.stderr, build.stderr
    return out
