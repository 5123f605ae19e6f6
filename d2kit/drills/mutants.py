"""Mutation testing: each guarantee the README makes, broken on purpose, and the drill or test that must notice.

A drill is worth what it catches. Each mutation below is one realistic bug -- a fence that forgets the token, a
reaper that reaps early, a materialiser that reads its own clock -- written as exact edits of the SQL or Python
core. ``d2kit drill mutants`` (``make mutants``) applies each one alone to a scratch copy of the repository, runs
the drill (quick mode) or test named to catch it against that copy, and records whether it did: a drill catches a
mutation only when the named invariant fails, not when it merely crashes. The results are merged into
``docs/drills/mutants.json`` (a run of some mutations replaces their rows) and the drills page renders it.

Each edit's ``find`` must occur exactly once in the current source (tests/test_mutants.py checks it), so a
refactor cannot silently turn a mutation into a no-op; every guarantee in the README has at least one mutation.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from d2kit import paths

RESULTS = paths.ROOT / "docs" / "drills" / "mutants.json"
TIMEOUT_SECONDS = 420  # one drill in quick mode, or one test, on a loaded 2-core machine
COPY_IGNORES = shutil.ignore_patterns(".git", ".venv*", "node_modules", ".pgdata", "site", "reports", "__pycache__",
                                      ".pytest_cache", "*.egg-info")
OPERATIONS, SCHEMA = "reference_impl/sql/operations.sql", "reference_impl/sql/schema.sql"
REAPER_NOW = "current_setting('d2.reaper_now')::timestamptz"  # the reaper's process clock, in one mutation

# The README's "What the design guarantees", each starting with the bold words that start it there.
AT_LEAST_ONCE = "At-least-once execution"
NO_DOUBLE = "No double materialisation"
KEPT_RECORD = "A bounded queue, a kept record"
ONE_CLOCK = "Leases by one clock"
FENCING = "Fencing on both paths"
NOTHING_DROPPED = "Nothing silently dropped"
DEDUP = "Not promised: exactly-once side effects (once only where the write path deduplicates)"
GUARANTEES = (AT_LEAST_ONCE, NO_DOUBLE, KEPT_RECORD, ONE_CLOCK, FENCING, NOTHING_DROPPED, DEDUP)
ISOLATION = "Tenant isolation (follow-up 4)"  # a promise of the design doc, not in the README's list


@dataclass(frozen=True)
class Edit:
    path: str     # relative to the repository root
    find: str     # occurs exactly once in the current source
    replace: str


@dataclass(frozen=True)
class Mutation:
    name: str
    guarantee: str
    bug: str
    edits: tuple[Edit, ...]
    drill: str | None = None      # the drill (quick mode) that must catch it...
    invariant: str | None = None  # ...by failing the invariant whose name starts so
    test: str | None = None       # or the pytest node id that must fail

    @property
    def catcher(self) -> str:
        return f"drill {self.drill}: {self.invariant}" if self.drill else f"test {self.test}"


MUTATIONS = (
    Mutation("completion-ignores-token", FENCING,
             "completion accepts any token: the check that the attempt is running and current is gone",
             (Edit(OPERATIONS, "AND f.state = 'running' AND f.current_token = f.token        -- the fence",
                   "-- the fence, removed"),),
             drill="worker-partition", invariant="the stale completion was refused and recorded"),
    Mutation("ledger-ignores-token", FENCING, "the job's write path accepts a lower token than the last it accepted",
             (Edit(OPERATIONS, "WHERE l.fence_token <= excluded.fence_token", "WHERE true"),),
             drill="worker-partition", invariant="the stale copy's late ledger write was refused"),
    Mutation("unique-key-removed", NO_DOUBLE, "UNIQUE (job_id, fire_at) is gone (and ON CONFLICT with it)",
             (Edit(SCHEMA, "    UNIQUE (job_id, fire_at),\n", ""),
              Edit(OPERATIONS, "ON CONFLICT (job_id, fire_at) DO NOTHING\n        RETURNING job_id, fire_at",
                   "ON CONFLICT DO NOTHING\n        RETURNING job_id, fire_at"),
              Edit(OPERATIONS, "ON CONFLICT (job_id, fire_at) DO NOTHING\n    RETURNING * INTO v_row",
                   "ON CONFLICT DO NOTHING\n    RETURNING * INTO v_row")),
             drill="replica-double-fire", invariant="the unique key refused every fire time"),
    Mutation("materialiser-without-row-lock", NO_DOUBLE,
             "the materialiser reads its due jobs without FOR UPDATE SKIP LOCKED, so replicas plan the same jobs",
             (Edit("reference_impl/materializer.py", 'DUE_JOBS_SQL = text(DUE_JOBS + " FOR UPDATE SKIP LOCKED")',
                   "DUE_JOBS_SQL = text(DUE_JOBS)"),),
             drill="replica-double-fire", invariant="the replicas themselves never offered a written fire time"),
    Mutation("reaper-reads-process-clock", ONE_CLOCK,
             "the reaper compares lease expiries with the scheduler process's wall clock instead of now()",
             (Edit("reference_impl/reaper.py", "from sqlalchemy import Connection, text",
                   "from datetime import UTC, datetime\n\nfrom sqlalchemy import Connection, text"),
              Edit("reference_impl/reaper.py", '    return conn.execute(text("SELECT d2_reap(:n)")',
                   '    conn.execute(text("SELECT set_config(\'d2.reaper_now\', :t, true)"), '
                   '{"t": datetime.now(UTC).isoformat()})\n    return conn.execute(text("SELECT d2_reap(:n)")'),
              Edit(OPERATIONS, "a.lease_expires_at < now()\n             ORDER BY",
                   f"a.lease_expires_at < {REAPER_NOW}\n             ORDER BY"),
              Edit(OPERATIONS, "a.lease_expires_at < now()\n            RETURNING",
                   f"a.lease_expires_at < {REAPER_NOW}\n            RETURNING")),
             drill="clock-skew", invariant="no lease was judged by a skewed clock"),
    Mutation("materialiser-reads-process-clock", ONE_CLOCK,
             "the materialiser plans fire times by the scheduler process's wall clock instead of the database's",
             (Edit("reference_impl/materializer.py", "from datetime import datetime, timedelta",
                   "from datetime import UTC, datetime, timedelta"),
              Edit("reference_impl/materializer.py", "now = jobs[0].db_now  #", "now = datetime.now(UTC)  #")),
             drill="clock-skew", invariant="no occurrence was materialised more than"),
    Mutation("claimed-ahead-starts-at-once", ONE_CLOCK,
             "the worker starts a row it claimed ahead at once, before its fire time, instead of waiting for it",
             (Edit("reference_impl/worker.py",
                   "if (wait := held.seconds_until_ready()) > 0 and held.ctx.cancelled.wait(wait):", "if False:"),),
             drill="clock-skew", invariant="no attempt was dispatched more than"),
    Mutation("watchdog-never-distrusts", ONE_CLOCK,
             "the worker's watchdog loop sees an untrustworthy lease and does nothing (no self-fencing)",
             (Edit("reference_impl/worker.py", 'held.distrust("monotonic_clock")', "pass"),),
             drill="worker-partition", invariant="the partitioned worker stopped trusting each lease"),
    Mutation("retries-disabled", AT_LEAST_ONCE,
             "the materialiser writes every occurrence with max_attempts 1: a lost attempt is never retried",
             (Edit(OPERATIONS, "fire_at, max_attempts, reason, CASE WHEN reason IS NOT NULL THEN now() END",
                   "fire_at, 1, reason, CASE WHEN reason IS NOT NULL THEN now() END"),),
             drill="worker-partition", invariant="the occurrence was re-dispatched with a higher fencing token"),
    Mutation("at-most-once-retried", AT_LEAST_ONCE,
             "delivery is ignored: an at_most_once job is accepted with 3 attempts and retried after a lost one",
             (Edit("reference_impl/jobs.py", 'if info.data.get("delivery") == "at_most_once":', "if False:"),
              Edit(SCHEMA, ",\n    CONSTRAINT at_most_once_is_one_attempt CHECK (delivery = 'at_least_once' OR "
                           "max_attempts = 1)", ""),
              Edit(OPERATIONS, "WHEN o.attempts < o.max_attempts AND j.delivery = 'at_least_once' THEN 'ready'",
                   "WHEN o.attempts < o.max_attempts THEN 'ready'")),
             test="tests/test_execution_path.py::test_an_at_most_once_job_whose_worker_is_killed_is_dead_with_the_"
                  "reason_not_run_again"),
    Mutation("misfire-policy-ignored", NOTHING_DROPPED, "every missed fire time runs, whatever the job's policy",
             (Edit("reference_impl/policies.py",
                   "if fire.skip_reason is not None or not (fire.at < missed_before) or fire.at in keep:",
                   "if True:"),),
             drill="catch-up-storm", invariant="misfire policy skip"),
    Mutation("skipped-without-reason", NOTHING_DROPPED, "a skipped fire time is recorded without its reason",
             (Edit(OPERATIONS, "fire_at, max_attempts, reason, CASE WHEN reason IS NOT NULL THEN now() END",
                   "fire_at, max_attempts, NULL, CASE WHEN reason IS NOT NULL THEN now() END"),),
             test="tests/test_policies.py::test_skip_runs_nothing_missed_and_records_every_miss"),
    Mutation("tenant-cap-ignored", ISOLATION,
             "the claim ignores each tenant's max_running, so one tenant's flood takes every slot",
             (Edit(OPERATIONS, "WHERE cd.k <= cd.room", "WHERE true"),
              Edit(OPERATIONS, "            WHERE r.max_running > r.n\n", "")),
             drill="noisy-tenant", invariant="per-tenant concurrency caps held"),
    Mutation("charge-dedup-removed", DEDUP,
             "the charge's write path no longer deduplicates on the idempotency key: the token alone",
             (Edit(OPERATIONS, "ELSIF EXISTS (SELECT 1 FROM charges WHERE idempotency_key = p_key AND outcome = "
                               "'applied')", "ELSIF false"),),
             drill="worker-partition", invariant="the charge was applied once"),
    Mutation("archive-loses-history", KEPT_RECORD,
             "the archiver deletes finished executions from the queue without writing them to the history",
             (Edit(OPERATIONS, "     WHERE o.id = ANY (v_ids);\n    -- A one-shot job",
                   "     WHERE o.id = ANY (v_ids) AND false;\n    -- A one-shot job"),),
             test="tests/test_retention.py::test_the_archiver_moves_finished_executions_with_their_attempts_and_"
                  "readers_see_no_difference"),
)
BY_NAME = {m.name: m for m in MUTATIONS}


def apply(root: Path, mutation: Mutation) -> None:
    """Apply the mutation's edits to the copy at ``root``; an edit whose text is not there exactly once raises."""
    for edit in mutation.edits:
        path = root / edit.path
        source = path.read_text(encoding="utf-8")
        if source.count(edit.find) != 1:
            raise ValueError(f"{mutation.name}: {edit.path} has {source.count(edit.find)} copies of {edit.find!r}")
        path.write_text(source.replace(edit.find, edit.replace), encoding="utf-8")


def run_one(mutation: Mutation, database_url: str) -> dict[str, Any]:
    """Apply one mutation to a scratch copy and run its catcher there; the verdict, with what caught it."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"d2-mutant-{mutation.name}-") as scratch:
        copy = Path(scratch) / "repo"
        shutil.copytree(paths.ROOT, copy, ignore=COPY_IGNORES)
        apply(copy, mutation)
        # The copy's packages come first on the path, so the drill's processes run the mutated code; the database
        # server is this one (the copy must not start an embedded server of its own).
        env = {**os.environ, "PYTHONPATH": str(copy), "DATABASE_URL": database_url}
        if mutation.drill:
            command = [sys.executable, "-m", "d2kit.cli", "drill", "run", mutation.drill, "--quick", "--json"]
        else:
            command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", mutation.test]
        try:
            done = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True,
                                  timeout=TIMEOUT_SECONDS)
            caught, caught_by = _judge(mutation, done)
        except subprocess.TimeoutExpired:
            caught, caught_by = False, [f"timed out after {TIMEOUT_SECONDS} s"]
    return {"mutation": mutation.name, "ran_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "guarantee": mutation.guarantee, "bug": mutation.bug,
            "files": sorted({e.path for e in mutation.edits}), "expected": mutation.catcher, "caught": caught,
            "caught_by": caught_by, "duration_s": round(time.monotonic() - started, 1)}


def _judge(mutation: Mutation, done: subprocess.CompletedProcess) -> tuple[bool, list[str]]:
    if mutation.test:  # pytest exit 1: tests ran and failed (2-5 are errors, interruptions, nothing collected)
        tail = done.stdout.strip().splitlines()[-1:] or [done.stderr.strip()[-200:]]
        return done.returncode == 1, [f"{mutation.test.split('::')[-1]} failed: {tail[0]}"
                                      if done.returncode == 1 else f"pytest exit {done.returncode}: {tail[0]}"]
    try:
        result = json.loads(done.stdout)
    except ValueError:
        return False, [f"no verdict (exit {done.returncode}): {done.stderr.strip()[-300:]}"]
    failed = [i["name"] for i in result["invariants"] if not i["holds"]]
    if result.get("not_run"):
        return False, [f"not run: {result['not_run']}"]
    return any(name.startswith(mutation.invariant) for name in failed), failed


def run_all(mutations: list[Mutation], database_url: str,
            progress: Callable[[Mutation, dict[str, Any] | None], None]) -> list[dict[str, Any]]:
    results = []
    for mutation in mutations:
        progress(mutation, None)
        results.append(run_one(mutation, database_url))
        progress(mutation, results[-1])
    return results


def table(results: list[dict[str, Any]]) -> dict[str, Any]:
    return {"mode": "quick", "caught": sum(r["caught"] for r in results), "total": len(results),
            "mutations": results}


def publish(results: list[dict[str, Any]], path: Path = RESULTS) -> dict[str, Any]:
    """Merge these results into the published table (a run of some mutations replaces only their rows; rows of
    mutations no longer in the set are dropped) and write it. Returns the table written."""
    rows = {r["mutation"]: r for r in (read_published(path) or {"mutations": []})["mutations"]}
    rows.update({r["mutation"]: r for r in results})
    written = table([rows[m.name] for m in MUTATIONS if m.name in rows])
    path.write_text(json.dumps(written, indent=2) + "\n", encoding="utf-8")
    return written


def read_published(path: Path = RESULTS) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
