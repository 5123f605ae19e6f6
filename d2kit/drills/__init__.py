"""Failure drills: every follow-up question of the round as a runnable experiment that proves nothing was lost.

Each drill starts its own local cluster (real PostgreSQL, real scheduler and worker processes), injects a real
fault, runs a workload, then checks invariants on the history recorded in the database. The registry below
is the list ``d2kit drill list`` prints; modules are imported only when a drill runs, so ``d2kit`` starts fast.

A drill module starts with the follow-up question (first docstring paragraph) and the answer in three
sentences (second paragraph), and defines ``FOLLOW_UP`` (its number among the prompt's hidden follow-ups, or
None for a failure the prompt itself names), ``run(drill)`` and
optionally ``NEGATIVE_CONTROL`` (what ``--negative-control`` switches off to show an invariant can fail) and
``private_server()`` (a context manager yielding the server URL to use instead of the shared one). A drill that
cannot inject its fault on this machine calls ``drill.not_run(why)``: no verdict, never a pass (harness.py).
Whether the drills catch real bugs is measured by mutation testing (mutants.py, ``d2kit drill mutants``).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from types import ModuleType

DRILLS = {  # name -> module, in the order of the follow-ups
    "worker-partition": "worker_partition",
    "replica-double-fire": "replica_double_fire",
    "catch-up-storm": "catch_up_storm",
    "noisy-tenant": "noisy_tenant",
    "proof-of-execution": "proof_of_execution",
    "postgres-limits": "postgres_limits",
    "clock-skew": "clock_skew",
    "scheduler-crash": "scheduler_crash",
    "scheduler-paused": "scheduler_paused",
    "hung-handler": "hung_handler",
    "postgres-restart": "postgres_restart",
}


def load(name: str) -> ModuleType:
    if name not in DRILLS:
        raise KeyError(f"unknown drill '{name}'; known: {', '.join(DRILLS)}")
    return importlib.import_module(f"{__name__}.{DRILLS[name]}")


def question(module: ModuleType) -> str:
    return _paragraphs(module)[0]


def answer(module: ModuleType) -> str:
    return _paragraphs(module)[1]


def _paragraphs(module: ModuleType) -> list[str]:
    return [" ".join(p.split()) for p in (module.__doc__ or "").strip().split("\n\n")]


def source(module: ModuleType) -> str:
    """Where the question comes from: one of the prompt's seven hidden follow-ups, or beyond them (the prompt's
    own "workers die, the scheduler itself can die", and the database under them)."""
    return f"Follow-up {module.FOLLOW_UP}" if module.FOLLOW_UP else "Beyond the seven follow-ups"


def negative_control(module: ModuleType) -> str | None:
    return getattr(module, "NEGATIVE_CONTROL", None)


@contextlib.contextmanager
def server_for(module: ModuleType) -> Iterator[str]:
    """The PostgreSQL server a drill runs on: its own private one if it needs to restart it, else the shared one."""
    private = getattr(module, "private_server", None)
    if private is not None:
        with private() as url:
            yield url
    else:
        from reference_impl import db

        yield db.database_url()
