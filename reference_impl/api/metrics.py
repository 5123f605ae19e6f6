"""GET /metrics: the scheduler's state in Prometheus text format, computed from the database at scrape time.

Every number is a query over the rows that ARE the system's history (status.summary, plus the fire-lag
histogram below), so any replica of the API reports the same values and nothing is lost on restart.
The ``*_total`` series are counters because an execution, once recorded, stays in all_occurrences (queue or
history) until retention drops its day -- which shows up as a counter reset, once a day. Each scrape scans
the whole record: fine for this kit, and the first thing to move to incremental counters at 10x.
Rendered by hand: the format is a few lines of text, and prometheus_client's registry model (process-local
counters) does not fit numbers that live in the database.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

from reference_impl import status

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Seconds from the scheduled fire time to the first dispatch. Catch-up after an outage lands in the hours.
FIRE_LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 7200.0, 21600.0)

# First attempts only: a retry's delay is the backoff the job asked for, not lag.
FIRE_LAG_SQL = text("""
WITH first_dispatch AS (
    SELECT extract(epoch FROM a.dispatched_at - o.fire_at)::float8 AS lag
      FROM all_attempts a JOIN all_occurrences o ON o.id = a.occurrence_id
     WHERE a.attempt = 1
)
SELECT (SELECT count(*) FROM first_dispatch) AS count,
       (SELECT coalesce(sum(lag), 0) FROM first_dispatch) AS sum,
       ARRAY(SELECT count(f.lag)
               FROM unnest(CAST(:bounds AS float8[])) WITH ORDINALITY AS b (le, i)
               LEFT JOIN first_dispatch f ON f.lag <= b.le
              GROUP BY b.i ORDER BY b.i) AS cumulative
""")


def render(conn: Connection) -> str:
    summary = status.summary(conn)
    occurrences, attempts = summary["occurrences"], summary["attempts"]
    lag = conn.execute(FIRE_LAG_SQL, {"bounds": list(FIRE_LAG_BUCKETS)}).one()
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[dict[str, str], float]]) -> None:
        lines.extend((f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"))
        lines.extend(f"{name}{_labels(labels)} {_number(value)}" for labels, value in samples)

    metric("d2_occurrences", "gauge", "Occurrences by state right now (every fire time has a row, skipped too).",
           [({"state": state}, n) for state, n in occurrences.items()])
    metric("d2_occurrences_due", "gauge", "Ready occurrences whose time has come, not yet claimed by a worker.",
           [({}, summary["due_now"])])
    metric("d2_occurrences_running", "gauge", "Dispatched and not completed: an attempt holds a lease.",
           [({}, occurrences["running"])])
    metric("d2_attempts_dispatched_total", "counter", "Dispatches: attempts handed to a worker, retries included.",
           [({}, sum(attempts.values()))])
    metric("d2_occurrences_completed_total", "counter", "Occurrences whose handler succeeded.",
           [({}, occurrences["succeeded"])])
    metric("d2_attempts_lost_total", "counter", "Attempts whose lease expired (worker dead, paused or cut off).",
           [({}, attempts.get("lost", 0))])
    metric("d2_attempts_timed_out_total", "counter", "Attempts that ran past their max runtime (hung or too slow).",
           [({}, attempts.get("timed_out", 0))])
    metric("d2_occurrences_dead_total", "counter", "Occurrences that used up their attempts.",
           [({}, occurrences["dead"])])
    metric("d2_occurrences_skipped_total", "counter", "Occurrences recorded but not run, by reason.",
           [({"reason": reason}, n) for reason, n in sorted(summary["skipped_by_reason"].items())])
    metric("d2_attempts_total", "counter", "Attempts by state.",
           [({"state": state}, n) for state, n in sorted(attempts.items())])
    metric("d2_fence_rejections_total", "counter", "Writes refused because their fencing token was stale.",
           [({"path": path}, n) for path, n in sorted(summary["fence_rejections"].items())])
    lines.extend(("# HELP d2_fire_lag_seconds From scheduled fire time to first dispatch (database clock).",
                  "# TYPE d2_fire_lag_seconds histogram"))
    for bound, cumulative in zip(FIRE_LAG_BUCKETS, lag.cumulative, strict=True):
        lines.append(f"d2_fire_lag_seconds_bucket{_labels({'le': _number(bound)})} {cumulative}")
    lines += [f'd2_fire_lag_seconds_bucket{{le="+Inf"}} {lag.count}',
              f"d2_fire_lag_seconds_sum {_number(lag.sum)}", f"d2_fire_lag_seconds_count {lag.count}"]
    live = [p for p in summary["processes"] if not p["stopped"]]
    metric("d2_process_clock_skew_seconds", "gauge",
           "Process wall clock minus database clock at its last heartbeat (shown, never used).",
           [({"process": p["id"], "kind": p["kind"]}, round(p["skew_ms"] / 1000, 4))
            for p in live if p["skew_ms"] is not None])
    metric("d2_process_heartbeat_age_seconds", "gauge", "Seconds since each running process last heartbeated.",
           [({"process": p["id"], "kind": p["kind"]}, p["heartbeat_age_s"])
            for p in live if p["heartbeat_age_s"] is not None])
    return "\n".join(lines) + "\n"


def _labels(labels: dict[str, Any]) -> str:
    if not labels:
        return ""
    escaped = (str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") for v in labels.values())
    return "{" + ",".join(f'{k}="{v}"' for k, v in zip(labels, escaped, strict=True)) + "}"


def _number(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)
