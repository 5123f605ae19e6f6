"""Shared fixtures: a real PostgreSQL (embedded unless DATABASE_URL is set), one fresh database per test."""

from __future__ import annotations

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
