"""A worker picks up a job, starts running it, and then its network partitions from the scheduler for ten
minutes. The job is still running. What does the scheduler do?

The scheduler cannot tell a dead worker from a partitioned one, so it waits only for the attempt's lease,
measured on the database's clock, to run out; then it declares the attempt lost and dispatches the job again
with a higher fencing token. For a while two copies of the job really do run, which is why every write the
job makes and its completion carry the token and are checked by the storage, refusing any token lower than
one it has already seen. So the job runs at least once but takes effect once: the stale copy's late write and
late completion are refused, and each refusal is recorded.

How the drill does it: worker A reaches PostgreSQL only through a TCP proxy the drill controls. A claims a
``ledger_write`` job whose first attempt stalls longer than the partition; the drill cuts A's proxy, the lease
expires by the database clock, a scheduler replica reaps it, worker B (direct connection) runs the job again
with a higher token and writes the ledger. The proxy heals; A's handler wakes up, writes late and completes
late. ``ledger_write`` ignores ``ctx.cancelled`` on purpose -- it stands for a paused process that cannot
know -- so that part proves the storage-side fence. The worker's side runs beside it: a cooperative ``sleep``
job on worker A, whose handler stops when ``ctx.cancelled`` is set. Worker A reports, with its late
completions, when it stopped trusting each lease and when each handler returned (``lease_distrust``, on the
database clock as upper bounds from its monotonic clock): it must have stopped trusting every lease by its own
clock before the database's expiry, and the cooperative handler must have stopped before the retry began. The
variant the fence cannot catch runs beside them: a ``charge`` job (a non-idempotent effect) whose stalled first
attempt charges BEFORE its retry does; the higher token passes any fence, and only the write path's
deduplication on the occurrence's idempotency key keeps it to one charge.
"""

from __future__ import annotations

import time

from sqlalchemy import text

from d2kit.drills import invariants
from d2kit.drills.harness import Drill
from d2kit.drills.proxy import TcpProxy
from reference_impl import jobs, tenants

FOLLOW_UP = 1
NEGATIVE_CONTROL = ("the workers run with fencing disabled on both sides: the ledger accepts any token "
                    "(D2KIT_UNSAFE_DISABLE_FENCING=1), so the stale copy's late write is accepted too and the drill "
                    "must report two accepted effects; and the lease watchdog is off (D2KIT_UNSAFE_DISABLE_WATCHDOG=1),"
                    " so worker A trusts its leases until the database says they are lost, and its cooperative "
                    "handler runs on beside the retry")
STALE_JOBS = ("ledger", "charge", "cooperative")  # worker A's first attempts, all cut off by the partition
# A worker sends its report of distrust and then its completion, one round trip apart: once the report is in, a
# refusal that is not recorded within this is a broken fence, not a slow one (no waiting for a timeout).
COMPLETION_GRACE_SECONDS = 3.0


def run(drill: Drill) -> None:
    lease = 4.0 if drill.quick else 6.0
    partition = 9.0 if drill.quick else 20.0
    stall = partition + 4.0   # worker A's first attempt wakes up well after the network is back
    retry_work = 1.0
    drill.scale("partition", f"10 minutes scaled to {partition:g} s")
    drill.scale("lease", f"30 s scaled to {lease:g} s (heartbeat every {lease / 3:.1f} s)")
    drill.scale("job", f"first attempt stalls {stall:g} s, the retry works {retry_work:g} s")
    env = {"D2KIT_UNSAFE_DISABLE_FENCING": "1", "D2KIT_UNSAFE_DISABLE_WATCHDOG": "1"} if drill.negative_control else {}
    if drill.negative_control:
        drill.notes.append("**FENCING AND THE LEASE WATCHDOG DISABLED in the workers (negative control).**")

    with TcpProxy(drill.url) as proxy:
        with drill.phase("worker A (through the proxy) claims a ledger_write, a charge and a cooperative job"):
            drill.cluster.start_scheduler("scheduler-1")
            drill.cluster.start_worker("worker-A", concurrency=3, lease=lease, url=proxy.url_for(drill.url), env=env)
            with drill.engine.begin() as conn:
                tenants.ensure_tenant(conn, "acme")
                now = conn.execute(text("SELECT now()")).scalar_one()
                job, _ = jobs.submit(conn, "acme", jobs.JobSpec(
                    name="charge-invoice-42", handler="ledger_write", run_at=now, pool="short", max_attempts=3,
                    retry_base_seconds=0, payload={"seconds": retry_work, "first_attempt_seconds": stall}))
                charge, _ = jobs.submit(conn, "acme", jobs.JobSpec(
                    name="charge-customer-7", handler="charge", run_at=now, pool="short", max_attempts=3,
                    retry_base_seconds=0, payload={"amount": 5, "first_attempt_seconds": stall}))
                cooperative, _ = jobs.submit(conn, "acme", jobs.JobSpec(
                    name="report-cooperative", handler="sleep", run_at=now, pool="short", max_attempts=3,
                    retry_base_seconds=0, payload={"seconds": retry_work, "first_attempt_seconds": stall}))
            job_ids = dict(zip(STALE_JOBS, (job["id"], charge["id"], cooperative["id"]), strict=True))

            def claimed_by_a() -> dict[int, int] | None:
                claimed = dict(drill.rows("SELECT o.job_id, a.token FROM attempts a JOIN occurrences o"
                                          " ON o.id = a.occurrence_id WHERE a.worker_id = 'worker-A'"))
                return claimed if len(claimed) == len(job_ids) else None
            claimed = drill.wait_for("worker A to claim the three jobs", claimed_by_a, timeout=30)
            stale_tokens = {kind: claimed[job_id] for kind, job_id in job_ids.items()}
            token_a = stale_tokens["ledger"]
            occurrence = drill.scalar("SELECT occurrence_id FROM attempts WHERE token = :t", t=token_a)
            drill.wait_for("worker A's first attempt to charge (before the cut: the stale attempt writes first)",
                           lambda: drill.scalar("SELECT count(*) FROM charges"), timeout=30)
            drill.focus = [occurrence]
            drill.wait_for("worker A's first heartbeat on the attempt (its lease is alive)", lambda: drill.scalar(
                "SELECT heartbeat_at IS NOT NULL FROM attempts WHERE token = :t", t=token_a), timeout=lease)

        with drill.phase("network cut: lease expires, worker B re-runs the job"):
            with drill.fault("network cut: worker A ↮ PostgreSQL") as cut:
                proxy.cut()
                drill.cluster.start_worker("worker-B", concurrency=3, lease=lease, env=env)
                # Finished, not "succeeded": an occurrence that is dead instead fails a named invariant below.
                drill.wait_for("the occurrence to finish (the retry on worker B succeeds)", lambda: drill.scalar(
                    "SELECT finished_at IS NOT NULL FROM occurrences WHERE id = :o", o=occurrence),
                    timeout=partition + 20)
                time.sleep(max(0.0, partition - (drill.now() - cut.start).total_seconds()))
                proxy.heal()
            healed_at = cut.end = drill.now()

        with drill.phase("network healed: worker A's stale copies write and complete late"):
            tokens = list(stale_tokens.values())
            drill.wait_for("worker A's late completions to be sent (its reports of distrust precede them)",
                           lambda: drill.scalar("SELECT count(*) = :n FROM lease_distrust WHERE token = ANY(:t)",
                                                n=len(tokens), t=tokens), timeout=stall + 20)
            drill.poll(lambda: drill.scalar(
                "SELECT count(DISTINCT token) = :n FROM fence_rejections WHERE token = ANY(:t) AND path = 'complete'",
                n=len(tokens), t=tokens), timeout=COMPLETION_GRACE_SECONDS)
        drill.metrics["proxy"] = vars(proxy.stats)

    with drill.engine.begin() as conn:
        _check(drill, conn, occurrence, token_a, healed_at, stale_tokens)
        _check_charge(drill, conn, charge["id"])
        _check_worker_side(drill, conn, stale_tokens, healed_at)


def _check(drill: Drill, conn, occurrence: int, token_a: int, healed_at, stale_tokens: dict[str, int]) -> None:
    attempts = [dict(r) for r in conn.execute(text(
        "SELECT token, worker_id, state, dispatched_at, lease_expires_at, heartbeat_at, finished_at FROM attempts"
        " WHERE occurrence_id = :o ORDER BY token"), {"o": occurrence}).mappings()]
    stale = next(a for a in attempts if a["token"] == token_a)
    retries = [a for a in attempts if a["token"] != token_a]
    winner = next((a for a in retries if a["state"] == "succeeded"), None)
    effects = conn.execute(text(
        "SELECT token, accepted, at FROM ledger_effects ORDER BY id")).mappings().all()
    rejections = invariants.fence_rejections(conn)
    stale_paths = sorted({r["path"] for r in rejections if r["token"] == token_a})
    state = conn.execute(text("SELECT state FROM occurrences WHERE id = :o"), {"o": occurrence}).scalar_one()

    drill.check("the partitioned attempt was declared lost by the database clock, after its lease expired",
                stale["state"] == "lost" and stale["finished_at"] >= stale["lease_expires_at"],
                {"token": token_a, "state": stale["state"], "lease_expired_at": str(stale["lease_expires_at"]),
                 "declared_lost_at": str(stale["finished_at"]),
                 "last_heartbeat": str(stale["heartbeat_at"])})
    drill.check("the occurrence was re-dispatched with a higher fencing token, to another worker, after the expiry",
                winner is not None and winner["token"] > token_a and winner["worker_id"] != stale["worker_id"]
                and winner["dispatched_at"] > stale["lease_expires_at"],
                {"stale_token": token_a, "retry_token": winner and winner["token"],
                 "retry_worker": winner and winner["worker_id"]})
    accepted = [e["token"] for e in effects if e["accepted"]]
    drill.check("exactly one accepted ledger effect for the job's key", len(accepted) == 1,
                {"accepted_tokens": accepted, "refused_tokens": [e["token"] for e in effects if not e["accepted"]],
                 "ledger_now_holds_token": conn.execute(text("SELECT fence_token FROM ledger")).scalar()})
    drill.check("the stale copy's late ledger write was refused (fence_rejections, path ledger_write)",
                "ledger_write" in stale_paths, {"rejection_paths_for_stale_token": stale_paths})
    refused = {kind: [r["detail"] for r in rejections if r["token"] == token and r["path"] == "complete"]
               for kind, token in stale_tokens.items()}
    drill.check("the stale completion was refused and recorded (fence_rejections, path complete), for each of "
                "worker A's partitioned attempts", all(refused.values()), refused)
    drill.check("the occurrence succeeded exactly once, by the higher token",
                state == "succeeded" and [a["token"] for a in attempts if a["state"] == "succeeded"]
                == [winner and winner["token"]], {"occurrence_state": state,
                                                  "attempts": [(a["token"], a["worker_id"], a["state"])
                                                               for a in attempts]})
    stale_write = next((e for e in effects if e["token"] == token_a), None)
    retry_write = next((e for e in effects if winner and e["token"] == winner["token"]), None)
    drill.check("the fault was real: the stale write reached PostgreSQL after the heal and after the retry's write",
                stale_write is not None and retry_write is not None and stale_write["at"] > healed_at
                and stale_write["at"] > retry_write["at"],
                {"stale_write_at": stale_write and str(stale_write["at"]), "healed_at": str(healed_at),
                 "retry_write_at": retry_write and str(retry_write["at"])})
    drill.add(invariants.attempts_accounted(conn))
    drill.metrics.update({
        "stale token / retry token": f"{token_a} / {winner and winner['token']}",
        "lease expired after the cut (s)": round(
            (stale["lease_expires_at"] - drill.faults[0].start).total_seconds(), 2),
        "re-dispatched after the lease expired (s)": winner and round(
            (winner["dispatched_at"] - stale["lease_expires_at"]).total_seconds(), 2),
    })
    drill.notes.append(
        "What the fence does not do: it refuses a write only when a *higher* token has already written that key. "
        "A stale copy that writes first is accepted -- harmless for this ledger's overwrite, a second effect for a "
        "charge, which is why the charge job's write path also deduplicates on the occurrence's idempotency key "
        "(its invariants above). A handler should also stop when `ctx.cancelled` is set, as the cooperative one "
        "does: worker A's watchdog set it once the lease could no longer be trusted by its own monotonic clock.")


def _check_charge(drill: Drill, conn, job_id: int) -> None:
    charges = [dict(r) for r in conn.execute(text(
        "SELECT c.token, c.outcome, c.amount, a.worker_id FROM charges c LEFT JOIN attempts a ON a.token = c.token"
        " ORDER BY c.id")).mappings()]
    state = conn.execute(text("SELECT state FROM occurrences WHERE job_id = :j"), {"j": job_id}).scalar_one()
    first_wrote_first = len(charges) >= 2 and charges[0]["token"] < charges[1]["token"]
    drill.check("the charge's stale first attempt charged before its retry did (the order no fence can catch)",
                first_wrote_first, {"charges": [(c["token"], c["worker_id"], c["outcome"]) for c in charges]})
    applied = sum(c["amount"] for c in charges if c["outcome"] == "applied")
    drill.check("the charge was applied once: the retry's higher token passed the fence, the idempotency-key "
                "dedup refused it as a duplicate", state == "succeeded" and applied == charges[0]["amount"],
                {"occurrence_state": state, "applied_amount": applied,
                 "outcomes": [c["outcome"] for c in charges]})


def _check_worker_side(drill: Drill, conn, stale_tokens: dict[str, int], healed_at) -> None:
    """What the partitioned worker did, from its own report (lease_distrust) against the database's record."""
    reports = {r["token"]: r for r in conn.execute(text(
        "SELECT d.token, d.source, d.distrusted_by, d.handler_stopped_by, a.lease_expires_at, a.occurrence_id"
        " FROM lease_distrust d JOIN attempts a ON a.token = d.token WHERE d.token = ANY(:t)"),
        {"t": list(stale_tokens.values())}).mappings()}

    by_job = {kind: reports.get(token) for kind, token in stale_tokens.items()}
    drill.check("the partitioned worker stopped trusting each lease by its own monotonic clock, before the "
                "database's expiry", all(r and r["source"] == "monotonic_clock"
                                         and r["distrusted_by"] < r["lease_expires_at"] for r in by_job.values()),
                {kind: r and {"source": r["source"], "distrusted_by": str(r["distrusted_by"]),
                              "database_expiry": str(r["lease_expires_at"]),
                              "seconds_before_expiry": round(
                                  (r["lease_expires_at"] - r["distrusted_by"]).total_seconds(), 3)}
                 for kind, r in by_job.items()} | {"healed_at": str(healed_at)})
    cooperative = by_job["cooperative"]
    retry = conn.execute(text(
        "SELECT min(dispatched_at) FROM attempts WHERE occurrence_id = :o AND token > :t"),
        {"o": cooperative and cooperative["occurrence_id"], "t": stale_tokens["cooperative"]}).scalar()
    stopped = cooperative and cooperative["handler_stopped_by"]
    drill.check("the cooperative handler stopped when its lease was distrusted, before the retry was dispatched "
                "(the two copies never ran at once)", bool(stopped and retry and stopped < retry),
                {"handler_stopped_by": str(stopped), "retry_dispatched_at": str(retry),
                 "stopped_s_after_distrust": stopped and round(
                     (stopped - cooperative["distrusted_by"]).total_seconds(), 3)})
