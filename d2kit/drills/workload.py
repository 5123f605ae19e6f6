"""Workloads the drills submit, through the product's own submission path (jobs.submit, validated by JobSpec)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, text

from reference_impl import jobs, tenants


def db_now(engine: Engine) -> datetime:
    with engine.connect() as conn:
        return conn.execute(text("SELECT now()")).scalar_one()


def submit_one_shots(engine: Engine, tenant_id: str, count: int, first_at: datetime, *, spread_seconds: float = 0.0,
                     name: str = "job", **spec: Any) -> list[int]:
    """``count`` one-shot jobs, the first due at ``first_at`` and the rest spread evenly over ``spread_seconds``
    (0: all due at the same instant). One transaction; returns the job ids."""
    step = spread_seconds / count if count else 0.0
    with engine.begin() as conn:
        tenants.ensure_tenant(conn, tenant_id)
        return [jobs.submit(conn, tenant_id, jobs.JobSpec(
            name=f"{name}-{i}", run_at=first_at + timedelta(seconds=i * step), **spec))[0]["id"]
            for i in range(count)]


def submit_crons(engine: Engine, tenant_id: str, count: int, cron: str, *, name: str = "cron",
                 **spec: Any) -> list[int]:
    """``count`` recurring jobs with the same cron expression; their cursors start at the database's now()."""
    with engine.begin() as conn:
        tenants.ensure_tenant(conn, tenant_id)
        return [jobs.submit(conn, tenant_id, jobs.JobSpec(name=f"{name}-{i}", cron=cron, **spec))[0]["id"]
                for i in range(count)]
