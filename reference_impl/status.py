"""Answers to "how do you know it ran?": what is due, dispatched-but-not-completed, done, skipped, dead.

Finished executions move from the queue tables to the history partitions after an hour (cleaner.py), so
everything here that counts or lists finished work reads all_occurrences / all_attempts (schema.sql), which
see each execution once, wherever it is."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from reference_impl import db, states


def summary(conn: Connection) -> dict[str, Any]:
    occ = dict(conn.execute(text("SELECT state, count(*) FROM all_occurrences GROUP BY state")).all())
    due = conn.execute(text(
        "SELECT count(*) FILTER (WHERE ready_at <= now()), count(*) FILTER (WHERE ready_at > now())"
        " FROM occurrences WHERE state = 'ready'")).one()
    attempts = dict(conn.execute(text("SELECT state, count(*) FROM all_attempts GROUP BY state")).all())
    rejections = dict(conn.execute(text("SELECT path, count(*) FROM fence_rejections GROUP BY path")).all())
    skipped = dict(conn.execute(text(
        "SELECT split_part(reason, ' ', 1), count(*) FROM all_occurrences WHERE state = 'skipped' GROUP BY 1")).all())
    unplannable = conn.execute(text("SELECT count(*) FROM jobs WHERE schedule_error IS NOT NULL")).scalar_one()
    procs = conn.execute(text(
        "SELECT id, kind, pool, pid, extract(epoch FROM now() - heartbeat_at) AS heartbeat_age_s,"
        " round(skew_ms::numeric, 1) AS skew_ms, stopped_at IS NOT NULL AS stopped"
        " FROM processes ORDER BY kind, id")).mappings().all()
    return {
        "schema_version": db.schema_version(conn),
        "occurrences": {state: occ.get(state, 0) for state in states.OCCURRENCE_STATES},
        "due_now": due[0],
        "scheduled_ahead": due[1],
        "dispatched_not_completed": occ.get("running", 0),
        "attempts": attempts,
        "fence_rejections": rejections,
        "skipped_by_reason": skipped,
        "jobs_with_schedule_error": unplannable,
        "processes": [{**p, "heartbeat_age_s": _round(p["heartbeat_age_s"]),
                       "skew_ms": float(p["skew_ms"]) if p["skew_ms"] is not None else None} for p in procs],
    }


def _round(value) -> float | None:
    return round(float(value), 2) if value is not None else None


def executions(conn: Connection, job_id: int, limit: int = 200,
               before: datetime | None = None) -> list[dict[str, Any]]:
    """A job's occurrences, newest first, each with every attempt (worker, token, times, outcome).

    ``before`` pages backwards: fire_at is unique per job, so the last fire_at of a page is an exact cursor."""
    occurrences = conn.execute(text(
        "SELECT id, fire_at, trigger, state, attempts, current_token, reason, finished_at FROM all_occurrences"
        " WHERE job_id = :j AND (CAST(:before AS timestamptz) IS NULL OR fire_at < :before)"
        " ORDER BY fire_at DESC LIMIT :n"), {"j": job_id, "n": limit, "before": before}).mappings().all()
    ids = [o["id"] for o in occurrences]
    attempts: dict[int, list[dict[str, Any]]] = {}
    for a in conn.execute(text(
            "SELECT occurrence_id, token, attempt, worker_id, state, dispatched_at, started_at, heartbeat_at,"
            " lease_expires_at, finished_at, error FROM all_attempts WHERE occurrence_id = ANY(:ids)"
            " ORDER BY token"), {"ids": ids}).mappings():
        attempts.setdefault(a["occurrence_id"], []).append(dict(a))
    return [{**o, "attempt_log": attempts.get(o["id"], [])} for o in occurrences]
