"""What both Locust scenarios share: the tenants' API keys and the hard cap on requests.

Configured by ``d2kit load run`` (d2kit/bench/loadtest.py) through the environment:
  D2_LOAD_KEYS          path of a JSON list of tenant API keys (created for the run)
  D2_LOAD_MAX_REQUESTS  stop the whole run after this many requests, whatever --run-time says
  D2_LOAD_CRON_JOBS     cron scenario: how many per-second schedules to create (833 -> 833 fires/s)
Locust only ever talks to the --host it is given; loadtest.py gives it 127.0.0.1.
"""

from __future__ import annotations

import itertools
import json
import os
import threading

import gevent
from locust import events

_keys = json.loads(open(os.environ["D2_LOAD_KEYS"]).read()) if os.environ.get("D2_LOAD_KEYS") else ["missing-key"]
_next_key = itertools.cycle(_keys)
_lock = threading.Lock()
MAX_REQUESTS = int(os.environ.get("D2_LOAD_MAX_REQUESTS", "100000"))
_sent = 0


def next_key() -> str:
    """Users take the tenants' keys in turn, so every tenant submits."""
    with _lock:
        return next(_next_key)


def headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


_environment = None


@events.init.add_listener
def _remember_environment(environment, **_) -> None:
    global _environment
    _environment = environment


@events.request.add_listener
def _cap_requests(**_) -> None:
    global _sent
    _sent += 1
    if _sent == MAX_REQUESTS and _environment is not None and _environment.runner is not None:
        gevent.spawn(_environment.runner.quit)  # not from inside the request's own greenlet
