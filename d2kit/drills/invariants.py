"""History checks shared by the drills: each reads what PostgreSQL recorded, never a log line.

Every function takes a connection to the drill's database and returns an ``Invariant``: a name a candidate can
read aloud, whether it holds, and what was observed (counts and a few offending rows, so a failure explains
itself). Drill-specific checks live in their drill; the ones here are used by several.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from reference_impl import schedule, states

SAMPLE = 5  # offending rows quoted in ``observed``


@dataclass
class Invariant:
    name: str
    holds: bool
    observed: Any

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "holds": bool(self.holds), "observed": self.observed}


def _rows(conn: Connection, sql: str, **params) -> list[dict[str, Any]]:
    return [dict(r) for r in conn.execute(text(sql), params).mappings()]


def every_occurrence_terminal(conn: Connection) -> Invariant:
    """Nothing left waiting, ready or running: every occurrence ended, and every non-success says why."""
    row = conn.execute(text(
        "SELECT count(*) AS total,"
        " count(*) FILTER (WHERE state = ANY(:open)) AS open,"
        " count(*) FILTER (WHERE state = ANY(:unsuccessful) AND reason IS NULL) AS no_reason,"
        " (array_agg(id ORDER BY id) FILTER (WHERE state = ANY(:open)))[1:5] AS open_sample"
        " FROM occurrences"), {"open": list(states.OCCURRENCE_OPEN),
                              "unsuccessful": [s for s in states.OCCURRENCE_TERMINAL if s != "succeeded"]}
    ).mappings().one()
    by_state = dict(conn.execute(text("SELECT state, count(*) FROM occurrences GROUP BY 1 ORDER BY 1")).all())
    return Invariant("every occurrence is terminal (succeeded, dead, skipped or cancelled), each non-success "
                     "with a reason", row["open"] == 0 and row["no_reason"] == 0 and row["total"] > 0,
                     {"occurrences": row["total"], "by_state": by_state, "not_terminal": row["open"],
                      "without_reason": row["no_reason"], "not_terminal_sample": row["open_sample"] or []})


def dispatched_not_completed(conn: Connection) -> Invariant:
    """Once a drill settles, no attempt is still open: everything dispatched was completed or declared lost."""
    row = conn.execute(text(
        "SELECT (SELECT count(*) FROM occurrences WHERE state = 'running') AS occurrences_running,"
        " (SELECT count(*) FROM attempts WHERE state = 'running') AS attempts_running")).mappings().one()
    return Invariant("dispatched but not completed is zero once settled",
                     row["occurrences_running"] == 0 and row["attempts_running"] == 0, dict(row))


def no_double_success(conn: Connection) -> Invariant:
    offenders = _rows(conn, "SELECT occurrence_id, count(*) AS succeeded FROM attempts WHERE state = 'succeeded'"
                            " GROUP BY occurrence_id HAVING count(*) > 1 ORDER BY occurrence_id LIMIT :n", n=SAMPLE)
    total = conn.execute(text("SELECT count(*) FROM (SELECT 1 FROM attempts WHERE state = 'succeeded'"
                              " GROUP BY occurrence_id HAVING count(*) > 1) x")).scalar_one()
    return Invariant("no occurrence has two succeeded attempts", total == 0,
                     {"occurrences_succeeded_twice": total, "sample": offenders})


def attempts_accounted(conn: Connection) -> Invariant:
    """Every dispatch is a recorded attempt, and an occurrence's attempts add up to its outcome:
    succeeded = earlier attempts lost or failed + exactly one success by the current token;
    dead = max_attempts attempts, none succeeded; skipped = never dispatched."""
    per_occurrence = (
        "SELECT o.id, o.state, o.attempts, o.max_attempts, o.current_token, count(a.token) AS recorded,"
        " count(a.token) FILTER (WHERE a.state = 'succeeded') AS succeeded,"
        " count(a.token) FILTER (WHERE a.state IN ('lost', 'failed', 'timed_out')) AS lost_or_failed,"
        " count(a.token) FILTER (WHERE a.state = 'running') AS running,"
        " max(a.token) FILTER (WHERE a.state = 'succeeded') AS succeeded_token"
        " FROM occurrences o LEFT JOIN attempts a ON a.occurrence_id = o.id GROUP BY o.id")
    broken_when = (
        "attempts <> recorded"
        " OR (state = 'succeeded' AND (succeeded <> 1 OR lost_or_failed <> recorded - 1"
        "     OR succeeded_token <> current_token))"
        " OR (state = 'dead' AND (succeeded <> 0 OR recorded <> max_attempts OR lost_or_failed <> recorded))"
        " OR (state = 'skipped' AND recorded <> 0)"
        " OR (state IN ('ready', 'waiting') AND (succeeded <> 0 OR running <> 0))")
    broken = _rows(conn, f"SELECT * FROM ({per_occurrence}) x WHERE {broken_when} ORDER BY id LIMIT :n", n=SAMPLE)
    broken_count = conn.execute(text(f"SELECT count(*) FROM ({per_occurrence}) x WHERE {broken_when}")).scalar_one()
    histogram = dict(conn.execute(text(
        f"SELECT recorded, count(*) FROM ({per_occurrence}) x WHERE state <> 'skipped' GROUP BY 1 ORDER BY 1")).all())
    by_state = dict(conn.execute(text("SELECT state, count(*) FROM attempts GROUP BY 1 ORDER BY 1")).all())
    return Invariant("attempts per occurrence are accounted for (lost/failed retries + one success, or "
                     "max_attempts for dead)", broken_count == 0,
                     {"occurrences_by_attempt_count": {str(k): v for k, v in histogram.items()},
                      "attempts_by_state": by_state, "unaccounted": broken_count, "sample": broken})


def one_occurrence_per_fire_time(conn: Connection, start: datetime, end: datetime) -> Invariant:
    """Against the schedule itself: each job has exactly the fire times its schedule gives in (start, end] --
    none missing, none extra, none twice."""
    jobs = conn.execute(text(
        "SELECT id, schedule_kind, run_at, cron, timezone, dst_gap, dst_overlap FROM jobs ORDER BY id")).all()
    actual: dict[int, list[datetime]] = {}
    for job_id, fire_at in conn.execute(text(
            "SELECT job_id, fire_at FROM occurrences WHERE trigger = 'schedule' AND fire_at > :s AND fire_at <= :e"),
            {"s": start, "e": end}):
        actual.setdefault(job_id, []).append(fire_at)
    expected_total = missing = extra = duplicated = 0
    sample: list[dict[str, Any]] = []
    for job in jobs:
        sched = schedule.Schedule(kind=job.schedule_kind, run_at=job.run_at, cron=job.cron, timezone=job.timezone,
                                  dst_gap=job.dst_gap, dst_overlap=job.dst_overlap)
        expected = {f.at for f in schedule.fire_times(sched, start, end, limit=10_000_000)}
        got = actual.get(job.id, [])
        expected_total += len(expected)
        job_missing, job_extra = expected - set(got), set(got) - expected
        job_duplicated = len(got) - len(set(got))
        missing, extra, duplicated = missing + len(job_missing), extra + len(job_extra), duplicated + job_duplicated
        if (job_missing or job_extra or job_duplicated) and len(sample) < SAMPLE:
            sample.append({"job": job.id, "missing": sorted(map(str, job_missing))[:3],
                           "extra": sorted(map(str, job_extra))[:3], "duplicated": job_duplicated})
    return Invariant("every job has exactly one occurrence per scheduled fire time (none missing, none doubled)",
                     missing == 0 and extra == 0 and duplicated == 0 and expected_total > 0,
                     {"jobs": len(jobs), "fire_times_expected": expected_total, "missing": missing, "extra": extra,
                      "duplicated": duplicated, "window": [str(start), str(end)], "sample": sample})


def caps_held(conn: Connection) -> Invariant:
    """At every instant, each tenant's running attempts per pool stayed within its max_running.

    Rebuilt from attempt intervals [dispatched_at, finished_at): a sweep over start (+1) and end (-1) events,
    ends first at equal times. An attempt still open counts until the end of time."""
    peaks = _rows(conn, """
        WITH events AS (
            SELECT o.tenant_id, o.pool, a.dispatched_at AS at, 1 AS delta
            FROM attempts a JOIN occurrences o ON o.id = a.occurrence_id
            UNION ALL
            SELECT o.tenant_id, o.pool, coalesce(a.finished_at, 'infinity'), -1
            FROM attempts a JOIN occurrences o ON o.id = a.occurrence_id
        ), running AS (
            SELECT tenant_id, pool, at,
                   sum(delta) OVER (PARTITION BY tenant_id, pool ORDER BY at, delta ROWS UNBOUNDED PRECEDING) AS n
            FROM events
        )
        SELECT r.tenant_id, r.pool, max(r.n) AS peak_running, t.max_running AS cap,
               (array_agg(r.at ORDER BY r.n DESC, r.at))[1] AS peak_at
        FROM running r JOIN tenants t ON t.id = r.tenant_id
        GROUP BY r.tenant_id, r.pool, t.max_running ORDER BY r.tenant_id, r.pool""")
    for peak in peaks:
        peak["peak_at"] = str(peak["peak_at"])
    return Invariant("per-tenant concurrency caps held at every instant (rebuilt from attempt intervals)",
                     bool(peaks) and all(p["peak_running"] <= p["cap"] for p in peaks), {"peaks": peaks})


def admission_rate_held(conn: Connection, pool: str, rate: float, tolerance: float = 0.10) -> Invariant:
    """No sliding 1-second window (database clock) saw more dispatches than rate * (1 + tolerance) plus the
    bucket's burst (a tenth of a second's worth, as d2_claim allows)."""
    burst = max(1.0, rate * 0.1)
    allowed = rate * (1 + tolerance) + burst
    row = conn.execute(text("""
        SELECT max(n) AS peak, (array_agg(at ORDER BY n DESC, at))[1] AS peak_at, count(*) AS dispatches,
               extract(epoch FROM max(at) - min(at)) AS span_s
        FROM (SELECT a.dispatched_at AS at,
                     count(*) OVER (ORDER BY a.dispatched_at
                                    RANGE BETWEEN CURRENT ROW AND interval '999999 microseconds' FOLLOWING) AS n
              FROM attempts a JOIN occurrences o ON o.id = a.occurrence_id WHERE o.pool = :pool) w"""),
        {"pool": pool}).mappings().one()
    span = float(row["span_s"] or 0)
    return Invariant(f"admission rate held: no 1-second window above {rate:g}/s +{tolerance:.0%} + burst "
                     f"{burst:g} (pool {pool})", row["dispatches"] > 0 and row["peak"] <= allowed,
                     {"peak_dispatches_in_1s": row["peak"], "allowed": round(allowed, 1), "stated_rate": rate,
                      "peak_window_start": str(row["peak_at"]), "dispatches": row["dispatches"],
                      "mean_rate_per_s": round(row["dispatches"] / span, 1) if span else None})


def fence_rejections(conn: Connection) -> list[dict[str, Any]]:
    rows = _rows(conn, "SELECT token, path, occurrence_id, detail, rejected_at FROM fence_rejections ORDER BY id")
    for row in rows:
        row["rejected_at"] = str(row["rejected_at"])
    return rows


def dispatch_lateness(conn: Connection, tenant_id: str | None = None) -> dict[str, Any]:
    """How long after its fire time each occurrence's FIRST attempt was dispatched (database clock), seconds."""
    row = conn.execute(text("""
        SELECT count(*) AS n, percentile_cont(0.5) WITHIN GROUP (ORDER BY wait) AS p50,
               percentile_cont(0.99) WITHIN GROUP (ORDER BY wait) AS p99, max(wait) AS p100
        FROM (SELECT extract(epoch FROM min(a.dispatched_at) - o.fire_at) AS wait
              FROM occurrences o JOIN attempts a ON a.occurrence_id = o.id
              WHERE CAST(:tenant AS text) IS NULL OR o.tenant_id = :tenant
              GROUP BY o.id, o.fire_at) w"""), {"tenant": tenant_id}).mappings().one()
    return {k: (round(float(v), 3) if v is not None and k != "n" else v) for k, v in row.items()}
