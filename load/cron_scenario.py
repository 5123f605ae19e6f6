"""Cron scenario: recurring jobs whose fires add up to the design's peak, to load the scheduler side.

Users create per-second cron jobs (``* * * * * *``, seconds last) until D2_LOAD_CRON_JOBS exist -- 833 of them
fire 833 times a second, the design's 50,000 executions/minute -- then keep reading their occurrences.
"""

from __future__ import annotations

import os
import random
import threading

from common import headers, next_key
from locust import HttpUser, between, task

TARGET = int(os.environ.get("D2_LOAD_CRON_JOBS", "833"))
_created = 0
_lock = threading.Lock()


def _claim_one() -> bool:
    """Reserve one of the TARGET schedules for this user to create."""
    global _created
    with _lock:
        if _created >= TARGET:
            return False
        _created += 1
        return True


class CronTenant(HttpUser):
    wait_time = between(0.01, 0.05)

    def on_start(self) -> None:
        self.key = next_key()
        self.job_ids: list[int] = []

    @task
    def create_or_read(self) -> None:
        if _claim_one():
            body = {"name": "load-cron", "handler": "noop", "cron": "* * * * * *"}
            response = self.client.post("/v1/jobs", json=body, headers=headers(self.key), name="POST /v1/jobs (cron)")
            if response.status_code == 201:
                self.job_ids.append(response.json()["id"])
        elif self.job_ids:
            self.client.get(f"/v1/jobs/{random.choice(self.job_ids)}/occurrences?limit=5", headers=headers(self.key),
                            name="GET /v1/jobs/{id}/occurrences")
