"""Catch-up, overlap and delivery: the product decisions a scheduler must expose per job, not decide silently.

Misfire (catch-up after downtime) -- follow-up 3
================================================
A fire time is *missed* when it is materialised more than ``MISFIRE_THRESHOLD`` after it was due by the
database clock -- every scheduler replica was down, or the job was paused. Fire times within the threshold
are simply late and run. What happens to missed ones is the job's ``misfire_policy``:

============  =====================================================  =========================================
policy        what runs                                              the same idea elsewhere
============  =====================================================  =========================================
``skip``      nothing missed; the schedule resumes at the next       Quartz ``MISFIRE_INSTRUCTION_DO_NOTHING``;
              future fire time                                        APScheduler ``misfire_grace_time`` ~ 0
``run_once``  the most recent missed fire time, once (default)        Quartz ``FIRE_ONCE_NOW`` (cron "smart"
                                                                      policy); Kubernetes CronJob (runs only
                                                                      the latest missed time); APScheduler
                                                                      ``coalesce=True``
``run_all``   every missed fire time, oldest first, at most           Temporal ``catchup_window`` + backfill;
              ``max_catchup`` of them (the newest)                    Quartz ``IGNORE_MISFIRE_POLICY``
============  =====================================================  =========================================

``catchup_window`` bounds all three: a fire time older than it is never run (Kubernetes
``startingDeadlineSeconds``, Temporal ``catchup_window``). Every missed fire time that does not run is still
written as an occurrence in state ``skipped`` with its reason -- ``misfire:skip``, ``misfire:superseded``
(run_once kept a newer one), ``misfire:over_max_catchup``, ``outside_catchup_window`` -- so "what did we not
run, and why?" is a query, not a guess. A catch-up storm does not become a thundering herd: what does run
is dispatched no faster than the pool's ``admission_rate`` (d2_claim in operations.sql).

Overlap (a cron job whose previous run has not finished) -- enforced in d2_materialise
========================================================================================
================  ==========================================================  ======================  ===============
policy            when an earlier occurrence is still ready/running           Kubernetes              Temporal
================  ==========================================================  ======================  ===============
``allow``         run concurrently (default)                                  ``Allow``               ``ALLOW_ALL``
``skip``          record the new one ``skipped`` (``overlap:skip``)           ``Forbid``              ``SKIP``
``buffer_one``    keep one ``waiting``; further ones ``overlap:buffer_full``  --                      ``BUFFER_ONE``
``buffer_all``    keep all ``waiting``; they run one after another            --                      ``BUFFER_ALL``
``cancel_other``  cancel the running one cooperatively, then run the new one  ``Replace``             ``CANCEL_OTHER``
================  ==========================================================  ======================  ===============

Cancellation rides on the heartbeat: the worker's next heartbeat answers ``cancel`` and the handler is
asked to stop; the attempt finishes ``cancelled``. A buffered occurrence becomes ``ready`` when the
previous one reaches a terminal state (d2_promote_waiting).

Delivery (what a lost attempt means) -- decided in d2_settle
============================================================
=================  ==========================================================================================
delivery           an attempt that did not succeed: lost (worker killed or cut off, lease expired), timed out,
                   or failed
=================  ==========================================================================================
``at_least_once``  retried after backoff until ``max_attempts`` (default): the handler may run twice, so its
                   effects deduplicate on the occurrence's idempotency key (a token refuses only a stale write)
``at_most_once``   never retried: the occurrence is ``dead`` with the reason (``lost attempt; at-most-once job
                   is not retried: ...``). One attempt, so ``max_attempts`` is 1. Google's cron favours
                   skipping a launch over risking a double one, which is harder to recover from (SRE book,
                   chapter 24, "Distributed Periodic Scheduling with Cron")
=================  ==========================================================================================

A failed attempt is not retried either: its handler started, and may have written before it failed; nothing
but the handler knows, so a job that can tell "did nothing" from "did half" retries itself or stays
at_least_once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from reference_impl.schedule import FireTime

MISFIRE_THRESHOLD = timedelta(seconds=60)  # Quartz's misfireThreshold default
MISFIRE_POLICIES = ("skip", "run_once", "run_all")
OVERLAP_POLICIES = ("allow", "skip", "buffer_one", "buffer_all", "cancel_other")
DELIVERY = ("at_least_once", "at_most_once")
MAX_CATCHUP_LIMIT = 1_000  # the most missed fire times a run_all job may ask to run after an outage


@dataclass(frozen=True)
class CatchUp:
    policy: str = "run_once"
    window: timedelta = timedelta(days=1)
    max_catchup: int = 100


def classify(fires: list[FireTime], now: datetime, catch_up: CatchUp,
             newer_missed_follow: bool = False) -> list[FireTime]:
    """Decide, for fire times about to be materialised, which run and which are recorded skipped.

    ``fires`` are ascending; ``now`` is the database clock. ``newer_missed_follow`` says the list was cut
    short and more missed fire times come after it, so none of these is "the most recent". Returns the
    same fire times, each with ``skip_reason`` set when it will not run.
    """
    missed_before = now - MISFIRE_THRESHOLD
    missed = [f for f in fires if f.at < missed_before and f.skip_reason is None]
    runnable_missed = [f for f in missed if f.at >= now - catch_up.window]
    if catch_up.policy == "skip" or newer_missed_follow:
        keep: set[datetime] = set()
    elif catch_up.policy == "run_once":
        keep = {runnable_missed[-1].at} if runnable_missed else set()
    else:  # run_all
        keep = {f.at for f in runnable_missed[-catch_up.max_catchup:]}

    decided: list[FireTime] = []
    for fire in fires:
        if fire.skip_reason is not None or not (fire.at < missed_before) or fire.at in keep:
            decided.append(fire)
        elif fire.at < now - catch_up.window:
            decided.append(FireTime(fire.at, "outside_catchup_window"))
        elif catch_up.policy == "skip":
            decided.append(FireTime(fire.at, "misfire:skip"))
        elif catch_up.policy == "run_once":
            decided.append(FireTime(fire.at, "misfire:superseded"))
        else:
            decided.append(FireTime(fire.at, "misfire:over_max_catchup"))
    return decided
