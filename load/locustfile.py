"""API scenario: tenants submit one-shot jobs due now and in the near future, and read their occurrences.

Run by ``make load`` (``d2kit load run``), which starts the cluster and the API on 127.0.0.1 first and passes
the tenants' keys; by hand: ``locust -f load/locustfile.py --host http://127.0.0.1:8000`` with D2_LOAD_KEYS set.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from common import headers, next_key
from locust import HttpUser, between, task


class ApiTenant(HttpUser):
    wait_time = between(0.005, 0.02)

    def on_start(self) -> None:
        self.key = next_key()
        self.job_ids: list[int] = []

    @task(4)
    def submit_one_shot(self) -> None:
        # Half due now, half within the next 10 s: the scheduler materialises both kinds.
        due = datetime.now(UTC) + timedelta(seconds=random.choice((0, random.uniform(0, 10))))
        body = {"name": "load-once", "handler": "noop", "run_at": due.isoformat()}
        with self.client.post("/v1/jobs", json=body, headers=headers(self.key), name="POST /v1/jobs",
                              catch_response=True) as response:
            if response.status_code == 201:
                self.job_ids.append(response.json()["id"])
                response.success()
            else:
                response.failure(f"{response.status_code}: {response.text[:200]}")

    @task(1)
    def read_occurrences(self) -> None:
        if not self.job_ids:
            return
        job_id = random.choice(self.job_ids[-200:])
        self.client.get(f"/v1/jobs/{job_id}/occurrences", headers=headers(self.key),
                        name="GET /v1/jobs/{id}/occurrences")
