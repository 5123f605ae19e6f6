"""Small helpers shared by tests: bounded waiting on the database, one-row queries."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import text


def wait_until(condition: Callable[[], Any], timeout: float = 60.0, every: float = 0.2, what: str = "") -> Any:
    """Poll until ``condition()`` is truthy; fail the test (not hang) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(every)


def scalar(engine, sql: str, **params) -> Any:
    with engine.begin() as conn:
        return conn.execute(text(sql), params).scalar()


def rows(engine, sql: str, **params) -> list:
    with engine.begin() as conn:
        return conn.execute(text(sql), params).all()
