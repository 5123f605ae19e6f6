"""How do you know a job actually ran?

Every occurrence is a row with an explicit terminal state, and every dispatch is an attempt row with its worker,
fencing token, times and outcome, so "dispatched" and "completed" are different, queryable facts and "did it
run?" is a query rather than a log search. The guarantee is at-least-once: a worker that dies mid-job leaves an
attempt whose lease expires, the occurrence is retried with a higher token, and it ends succeeded by exactly one
attempt or dead after max_attempts with the reason. Exactly-once effects need the job's cooperation, which is
why the handler writes under the occurrence's idempotency key with its token, so a retry replaces rather than
repeats the effect.

How the drill does it: thousands of jobs -- most write a ledger row under their idempotency key, a few always
fail -- run on three workers while a seeded chaos loop SIGKILLs a random worker every couple of seconds and
starts a replacement. Once the drill settles, the invariants account for every occurrence and every attempt,
and match each success with exactly one ledger row written by the succeeding token.
"""

from __future__ import annotations

import random
import time
from datetime import timedelta

from sqlalchemy import text

from d2kit.drills import invariants, workload
from d2kit.drills.harness import Drill
from reference_impl.handlers import JobContext

FOLLOW_UP = 5
SEED = 5
WORKERS = 3
LEASE_SECONDS = 3.0
ALWAYS_FAILING = 20


def run(drill: Drill) -> None:
    count = 2_000 if drill.quick else 8_000
    window = 15.0 if drill.quick else 40.0
    drill.scale("executions", f"{count:,} jobs due over {window:g} s, plus {ALWAYS_FAILING} that always fail")
    drill.scale("chaos", f"a random worker SIGKILLed every 1-2.5 s (seed {SEED}) and replaced; "
                         f"lease 30 s scaled to {LEASE_SECONDS:g} s")
    chaos = random.Random(SEED)

    with drill.phase("submit the jobs; start a scheduler and 3 workers"):
        drill.cluster.start_scheduler("scheduler-1")
        live = [f"worker-{i}" for i in range(1, WORKERS + 1)]
        for name in live:
            drill.cluster.start_worker(name, concurrency=16, lease=LEASE_SECONDS)
        first_at = workload.db_now(drill.engine) + timedelta(seconds=count * 0.0015 + 1)
        for seconds, share in ((0.05, 0.5), (0.3, 0.3), (1.0, 0.2)):  # some are always in flight when a kill lands
            workload.submit_one_shots(drill.engine, "acme", int(count * share), first_at, spread_seconds=window,
                                      name=f"ledger-{seconds:g}s", handler="ledger_write", payload={"seconds": seconds},
                                      pool="short", max_attempts=10, retry_base_seconds=0.2)
        workload.submit_one_shots(drill.engine, "acme", ALWAYS_FAILING, first_at, spread_seconds=window,
                                  name="always-fails", handler="fail_n", payload={"n": 100}, pool="short",
                                  max_attempts=3, retry_base_seconds=0.2)
        total = count + ALWAYS_FAILING

    with drill.phase("run under chaos: workers SIGKILLed at random"):
        # The window opens when the jobs are in place: on a loaded machine the submission can run past first_at,
        # and a window fixed to first_at would then close before the kills that make this a test.
        chaos_ends = max(first_at, drill.now()) + timedelta(seconds=window)
        kills = 0
        while drill.now() < chaos_ends:
            time.sleep(chaos.uniform(1.0, 2.5))
            victim = chaos.choice(live)
            drill.cluster.kill(victim)
            drill.fault_instant(f"SIGKILL {victim}")
            kills += 1
            replacement = f"{victim.split('.')[0]}.{kills + 1}"
            live[live.index(victim)] = replacement
            drill.cluster.start_worker(replacement, concurrency=16, lease=LEASE_SECONDS)
        if kills < 3:  # the machine was too slow to reach the chaos window: nothing was tested, so no verdict
            drill.not_run(f"only {kills} SIGKILL(s) landed in the {window:g} s chaos window (3 needed)")

    with drill.phase("settle: leases expire, lost attempts are retried"):
        drill.settle(timeout=90, at_least=total)

    with drill.engine.begin() as conn:
        drill.add(invariants.every_occurrence_terminal(conn), invariants.dispatched_not_completed(conn),
                  invariants.attempts_accounted(conn), invariants.no_double_success(conn))
        jobs_without_one = conn.execute(text(
            "SELECT count(*) FROM jobs j WHERE (SELECT count(*) FROM occurrences o WHERE o.job_id = j.id) <> 1"
        )).scalar_one()
        drill.check("every one-shot job has exactly one occurrence", jobs_without_one == 0,
                    {"jobs": total, "jobs_without_exactly_one_occurrence": jobs_without_one})
        dead = conn.execute(text(
            "SELECT j.handler, count(*), min(o.reason) FROM occurrences o JOIN jobs j ON j.id = o.job_id"
            " WHERE o.state = 'dead' GROUP BY 1")).all()
        drill.check("the dead are exactly the always-failing jobs, each with the reason it died",
                    [(h, n) for h, n, _ in dead] == [("fail_n", ALWAYS_FAILING)],
                    {"dead_by_handler": {h: n for h, n, _ in dead}, "a_reason": dead[0][2] if dead else None})
        stats = conn.execute(text(
            "SELECT count(*) FILTER (WHERE state = 'lost') AS lost,"
            " count(DISTINCT occurrence_id) FILTER (WHERE state = 'lost') AS retried,"
            " max(attempt) AS most_attempts FROM attempts")).mappings().one()
        drill.check("the fault was real: the kills cost in-flight attempts, which were declared lost and retried",
                    stats["lost"] > 0, {"kills": kills, **stats})
        twice = _check_effects(drill, conn)
        drill.metrics.update({"SIGKILLs": kills, "attempts lost to the kills": stats["lost"],
                              "occurrences that needed a retry": stats["retried"],
                              "most attempts for one occurrence": stats["most_attempts"],
                              "keys whose handler wrote twice (killed between write and completion)": twice})
    drill.notes.append(PROMISE.format(kills=kills, lost=stats["lost"], retried=stats["retried"], twice=twice))


def _check_effects(drill: Drill, conn) -> int:
    """The job's own evidence: each succeeded ledger_write occurrence has one ledger row under its idempotency
    key, last written by the token that succeeded. Returns how many keys were written more than once."""
    succeeded = conn.execute(text(
        "SELECT o.job_id, o.fire_at, o.current_token FROM occurrences o JOIN jobs j ON j.id = o.job_id"
        " WHERE o.state = 'succeeded' AND j.handler = 'ledger_write'")).all()
    ledger = dict(conn.execute(text("SELECT key, fence_token FROM ledger")).all())
    mismatched = [key for key, token in (
        (JobContext(0, 0, job_id, fire_at, 1, {}, None).idempotency_key, token)
        for job_id, fire_at, token in succeeded) if ledger.get(key) != token]
    twice = conn.execute(text(
        "SELECT count(*) FROM (SELECT key FROM ledger_effects WHERE accepted GROUP BY key HAVING count(*) > 1) x"
    )).scalar_one()
    drill.check("every succeeded job's effect is in the ledger once, under its idempotency key, written by the "
                "succeeding token", not mismatched and len(ledger) == len(succeeded),
                {"succeeded_ledger_jobs": len(succeeded), "ledger_rows": len(ledger), "mismatched": len(mismatched),
                 "sample": mismatched[:invariants.SAMPLE]})
    return twice


PROMISE = """**What the at-least-once guarantee promises, shown by this run:** every due occurrence reached a \
terminal state recorded with its reason -- succeeded by exactly one attempt (the one holding the current fencing \
token) or dead after max_attempts with the last error -- and once the leases of the killed workers expired nothing \
stayed "dispatched but not completed". Every dispatch is an attempt row (worker, token, times, outcome), so "did it \
run?" is a query.

**What it does not promise:** that the handler ran once -- {kills} kills cost {lost} in-flight attempts, {retried} \
occurrences ran again, and for {twice} of them the handler had already written before its worker died, so its \
write happened twice; only because the write is keyed by the occurrence's idempotency key (and fenced by token) \
is the *result* one row. Nor does it promise that a job ran on time (a retry \
waits for the lease and the backoff), or that a dead job's partial effects were undone."""
