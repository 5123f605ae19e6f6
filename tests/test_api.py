"""The HTTP API against a real PostgreSQL: auth, tenant isolation, bad input (field named, nothing written),
idempotency, the effect of every call on the database, metrics, health -- and one run over real HTTP
through ``d2kit api``."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from reference_impl import tenants
from reference_impl.api.app import create_app

CRON_JOB = {"name": "report", "handler": "noop", "cron": "*/5 * * * *"}
PER_JOB_CALLS = [("GET", ""), ("GET", "/occurrences"), ("POST", "/pause"), ("POST", "/resume"),
                 ("POST", "/trigger"), ("DELETE", "")]
V1_CALLS = [("POST", "/v1/jobs"), ("GET", "/v1/jobs"), *(((m, f"/v1/jobs/1{suffix}") for m, suffix in PER_JOB_CALLS))]


def one(engine, sql: str, **params):
    with engine.begin() as conn:
        return conn.execute(text(sql), params).one()


def written_rows(engine) -> tuple[int, int, int]:
    return tuple(one(engine, "SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM occurrences),"
                             " (SELECT count(*) FROM attempts)"))


@pytest.fixture
def keys(engine) -> dict[str, str]:
    with engine.begin() as conn:
        return {tenant: tenants.create_tenant(conn, tenant) for tenant in ("acme", "other")}


@pytest.fixture
def client(database_url, keys):
    with TestClient(create_app(database_url)) as test_client:
        yield test_client


def as_tenant(key: str) -> dict[str, str]:
    return {"X-API-Key": key}


def create(client, key: str, body: dict | None = None, **headers) -> httpx.Response:
    return client.post("/v1/jobs", json=body or CRON_JOB, headers={**as_tenant(key), **headers})


# -- auth ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("method", "path"), V1_CALLS)
def test_every_v1_call_requires_a_valid_key(client, keys, engine, method, path):
    create(client, keys["acme"])
    before = written_rows(engine)
    for headers, message in [({}, "missing API key"), ({"X-API-Key": "d2k_wrong"}, "invalid API key"),
                             ({"Authorization": "Bearer d2k_wrong"}, "invalid API key"),
                             ({"Authorization": f"Basic {keys['acme']}"}, "missing API key"),
                             ({"X-API-Key": keys["acme"], "Authorization": f"Bearer {keys['other']}"},
                              "different keys")]:
        response = client.request(method, path, json=CRON_JOB, headers=headers)
        assert response.status_code == 401, (headers, response.text)
        assert message in response.json()["detail"]
        assert response.headers["WWW-Authenticate"] == "Bearer"
    assert written_rows(engine) == before


def test_bearer_and_header_keys_both_work(client, keys):
    job = create(client, keys["acme"]).json()
    for headers in (as_tenant(keys["acme"]), {"Authorization": f"Bearer {keys['acme']}"}):
        assert client.get(f"/v1/jobs/{job['id']}", headers=headers).status_code == 200


# -- tenant isolation ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("method", "suffix"), PER_JOB_CALLS)
def test_another_tenants_job_is_a_404_like_a_missing_one(client, keys, engine, method, suffix):
    job = create(client, keys["acme"]).json()
    before = written_rows(engine)
    theirs = client.request(method, f"/v1/jobs/{job['id']}{suffix}", headers=as_tenant(keys["other"]))
    missing = client.request(method, f"/v1/jobs/{job['id'] + 1000}{suffix}", headers=as_tenant(keys["other"]))
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json()["detail"] == f"job {job['id']} not found"  # same sentence as for an id that does not exist
    assert written_rows(engine) == before
    paused, deleted_at = one(engine, "SELECT paused, deleted_at FROM jobs WHERE id = :id", id=job["id"])
    assert (paused, deleted_at) == (False, None)



def test_the_job_list_is_the_tenants_own_filtered_and_paged_newest_first(client, keys):
    acme = as_tenant(keys["acme"])
    ids = [create(client, keys["acme"], {**CRON_JOB, "name": f"r{i % 2}"}).json()["id"] for i in range(5)]
    one_shot = create(client, keys["acme"], {"name": "once", "handler": "noop", "run_at": "2030-01-01T00:00:00Z"})
    create(client, keys["other"], {**CRON_JOB, "name": "r0"})
    client.post(f"/v1/jobs/{ids[1]}/pause", headers=acme)
    client.delete(f"/v1/jobs/{ids[2]}", headers=acme)

    def listed(**params) -> list[int]:
        answer = client.get("/v1/jobs", params=params, headers=acme)
        assert answer.status_code == 200, answer.text
        return [job["id"] for job in answer.json()["jobs"]]

    assert listed() == [one_shot.json()["id"], ids[4], ids[3], ids[1], ids[0]]  # no deleted, nothing of other's
    assert listed(name="r0") == [ids[4], ids[0]]
    assert listed(paused="true") == [ids[1]]
    assert listed(deleted="true") == [ids[2]]
    assert listed(schedule_kind="once") == [one_shot.json()["id"]]
    assert listed(schedule_kind="cron", paused="false") == [ids[4], ids[3], ids[0]]
    pages, before = [], None
    while True:
        page = client.get("/v1/jobs", params={"limit": 2, **({"before": before} if before else {})},
                          headers=acme).json()
        pages.append([job["id"] for job in page["jobs"]])
        before = page["next_before"]
        if before is None:
            break
    assert pages == [[one_shot.json()["id"], ids[4]], [ids[3], ids[1]], [ids[0]]]
    assert client.get("/v1/jobs", headers=as_tenant(keys["other"])).json()["jobs"][0]["tenant_id"] == "other"

def test_same_idempotency_key_for_two_tenants_is_two_jobs(client, keys):
    mine = create(client, keys["acme"], **{"Idempotency-Key": "k1"}).json()
    theirs = create(client, keys["other"], **{"Idempotency-Key": "k1"}).json()
    assert mine["id"] != theirs["id"] and theirs["tenant_id"] == "other"


# -- bad input ----------------------------------------------------------------------------------------
NOW = datetime.now(UTC)
BAD_INPUTS = [
    ({**CRON_JOB, "cron": "61 * * * *"}, "body.cron", "not a valid cron"),
    ({**CRON_JOB, "cron": "* * *"}, "body.cron", "expected 5 fields"),
    ({**CRON_JOB, "cron": "0 0 30 2 *"}, "body.cron", "never fires"),
    ({**CRON_JOB, "timezone": "Mars/Olympus_Mons"}, "body.timezone", "unknown IANA time zone"),
    ({**CRON_JOB, "timezone": "America"}, "body.timezone", "unknown IANA time zone"),  # a directory, not a zone
    ({**CRON_JOB, "handler": "rm_rf"}, "body.handler", "unknown handler"),
    ({**CRON_JOB, "payload": {"blob": "x" * 70_000}}, "body.payload", "the limit is 65536"),
    ({**CRON_JOB, "handler": "sleep", "payload": {"seconds": "ten"}}, "body.payload", "payload.seconds"),
    ({**CRON_JOB, "run_at": NOW.isoformat()}, "body.cron", "exactly one of run_at"),
    ({"name": "x", "handler": "noop"}, "body.cron", "exactly one of run_at"),
    ({"name": "x", "handler": "noop", "run_at": (NOW + timedelta(days=365 * 20)).isoformat()}, "body.run_at",
     "more than 10 years"),
    ({"name": "x", "handler": "noop", "run_at": "2030-01-01T09:00:00"}, "body.run_at", "needs a UTC offset"),
    ({**CRON_JOB, "misfire_policy": "sometimes"}, "body.misfire_policy", "'skip', 'run_once' or 'run_all'"),
    ({**CRON_JOB, "max_attempts": 0}, "body.max_attempts", "greater than or equal to 1"),
    ({**CRON_JOB, "delivery": "exactly_once"}, "body.delivery", "'at_least_once' or 'at_most_once'"),
    ({**CRON_JOB, "delivery": "at_most_once", "max_attempts": 2}, "body.max_attempts", "attempted once"),
    ({**CRON_JOB, "colour": "blue"}, "body.colour", "Extra inputs are not permitted"),
    ({**CRON_JOB, "name": "nul\x00byte"}, "body.name", "NUL"),
    ({**CRON_JOB, "payload": {"deep": [{"key\x00": 1}]}}, "body.payload.deep.0.key\x00", "NUL"),
    ([CRON_JOB], "body", "valid dictionary"),
]


@pytest.mark.parametrize(("body", "field", "message"), BAD_INPUTS, ids=[f[1] for f in BAD_INPUTS])
def test_bad_input_is_a_422_naming_the_field_and_writes_nothing(client, keys, engine, body, field, message):
    before = written_rows(engine)
    response = client.post("/v1/jobs", json=body, headers=as_tenant(keys["acme"]))
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    assert any(e["field"] == field and message in e["msg"] for e in errors), errors
    assert all(e["loc"] == e["field"].split(".") for e in errors)  # FastAPI's documented shape is kept
    assert "Traceback" not in response.text
    assert written_rows(engine) == before


@pytest.mark.parametrize(("raw", "message"), [(b'{"name": ', "invalid JSON at character 9"),
                                              (b'{"name": "x", "handler": "noop", "cron": "* * * * *",'
                                               b' "payload": {"x": NaN}}', "finite number")])
def test_unparseable_or_unstorable_json_is_a_422(client, keys, engine, raw, message):
    response = client.post("/v1/jobs", content=raw, headers={**as_tenant(keys["acme"]),
                                                             "Content-Type": "application/json"})
    assert response.status_code == 422 and message in response.json()["detail"][0]["msg"]
    assert written_rows(engine) == (0, 0, 0)


def test_oversized_request_body_is_a_413_before_parsing(client, keys, engine):
    body = {**CRON_JOB, "payload": {"blob": "x" * 200_000}}
    response = client.post("/v1/jobs", json=body, headers=as_tenant(keys["acme"]))
    assert response.status_code == 413
    assert "the limit is 131072" in response.json()["detail"]
    assert written_rows(engine) == (0, 0, 0)


@pytest.mark.parametrize(("path", "field"), [("/v1/jobs/0", "path.job_id"), ("/v1/jobs/abc", "path.job_id"),
                                             (f"/v1/jobs/{2**63}", "path.job_id"),
                                             ("/v1/jobs/1/occurrences?limit=0", "query.limit"),
                                             ("/v1/jobs/1/occurrences?before=2026-01-01T00:00:00", "query.before"),
                                             ("/v1/jobs?paused=maybe", "query.paused"),
                                             ("/v1/jobs?schedule_kind=daily", "query.schedule_kind"),
                                             ("/v1/jobs?name=a%00b", "query.name"),
                                             ("/v1/jobs?before=0", "query.before")])
def test_bad_ids_and_query_parameters_are_422_naming_them(client, keys, path, field):
    create(client, keys["acme"])
    response = client.get(path, headers=as_tenant(keys["acme"]))
    assert response.status_code == 422
    assert [e["field"] for e in response.json()["detail"]] == [field]


# -- idempotency --------------------------------------------------------------------------------------
def test_create_with_an_idempotency_key_is_safe_to_retry(client, keys, engine):
    first = create(client, keys["acme"], **{"Idempotency-Key": "report-v1"})
    again = create(client, keys["acme"], **{"Idempotency-Key": "report-v1"})
    in_body = create(client, keys["acme"], {**CRON_JOB, "idempotency_key": "report-v1"})
    assert (first.status_code, again.status_code, in_body.status_code) == (201, 200, 200)
    assert first.json()["id"] == again.json()["id"] == in_body.json()["id"]
    assert first.headers["Location"] == f"/v1/jobs/{first.json()['id']}"
    assert again.headers["Idempotent-Replayed"] == "true"
    assert written_rows(engine)[0] == 1


def test_reusing_an_idempotency_key_for_a_different_job_is_refused(client, keys, engine):
    create(client, keys["acme"], **{"Idempotency-Key": "k"})
    changed = create(client, keys["acme"], {**CRON_JOB, "cron": "0 * * * *"}, **{"Idempotency-Key": "k"})
    conflicting = create(client, keys["acme"], {**CRON_JOB, "idempotency_key": "a"}, **{"Idempotency-Key": "b"})
    assert changed.status_code == conflicting.status_code == 422
    assert changed.json()["detail"][0]["field"] == "body.idempotency_key"
    assert "differs in: cron" in changed.json()["detail"][0]["msg"]
    assert conflicting.json()["detail"][0]["field"] == "header.Idempotency-Key"
    assert written_rows(engine)[0] == 1


# -- the calls take effect ----------------------------------------------------------------------------
def test_pause_resume_trigger_and_delete_change_the_database(client, keys, engine):
    headers = as_tenant(keys["acme"])
    job_id = create(client, keys["acme"]).json()["id"]

    assert client.post(f"/v1/jobs/{job_id}/pause", headers=headers).json()["paused"] is True
    assert one(engine, "SELECT paused FROM jobs WHERE id = :id", id=job_id) == (True,)
    assert client.post(f"/v1/jobs/{job_id}/resume", headers=headers).json()["paused"] is False
    assert one(engine, "SELECT paused FROM jobs WHERE id = :id", id=job_id) == (False,)

    triggered = [client.post(f"/v1/jobs/{job_id}/trigger", headers=headers) for _ in range(2)]
    assert [t.status_code for t in triggered] == [202, 202]
    assert [t.json()["state"] for t in triggered] == ["ready", "ready"]  # overlap 'allow': both run
    running_id, ready_id = (t.json()["occurrence_id"] for t in triggered)
    assert one(engine, "SELECT trigger, state FROM occurrences WHERE id = :id", id=ready_id) == ("manual", "ready")
    with engine.begin() as conn:  # a worker claims the first one (the real claim, not a fake row)
        token = conn.execute(text("SELECT token FROM d2_claim('short', 'w1', 1, 30)")).scalar_one()

    deleted = client.delete(f"/v1/jobs/{job_id}", headers=headers)
    assert deleted.status_code == 200 and deleted.json()["deleted_at"] is not None
    assert one(engine, "SELECT deleted_at IS NOT NULL, next_fire_at FROM jobs WHERE id = :id", id=job_id) == (True,
                                                                                                           None)
    assert one(engine, "SELECT state, reason FROM occurrences WHERE id = :id", id=ready_id) == ("cancelled",
                                                                                                 "job deleted")
    # the running attempt is asked to stop, cooperatively: the worker hears it at its next heartbeat
    assert one(engine, "SELECT o.state, a.cancel_requested FROM occurrences o JOIN attempts a"
                       " ON a.token = o.current_token WHERE o.id = :id", id=running_id) == ("running", True)
    assert one(engine, "SELECT token FROM attempts WHERE occurrence_id = :id", id=running_id) == (token,)

    again = client.delete(f"/v1/jobs/{job_id}", headers=headers)
    assert again.status_code == 200 and again.json()["deleted_at"] == deleted.json()["deleted_at"]
    for action in ("pause", "resume", "trigger"):
        refused = client.post(f"/v1/jobs/{job_id}/{action}", headers=headers)
        assert refused.status_code == 409 and "deleted" in refused.json()["detail"]
    assert written_rows(engine) == (1, 2, 1)


def test_occurrences_page_backwards_with_every_attempt(client, keys, engine):
    headers = as_tenant(keys["acme"])
    job_id = create(client, keys["acme"]).json()["id"]
    occurrence_ids = [client.post(f"/v1/jobs/{job_id}/trigger", headers=headers).json()["occurrence_id"]
                      for _ in range(5)]
    with engine.begin() as conn:
        token = conn.execute(text("SELECT token FROM d2_claim('short', 'w1', 1, 30)")).scalar_one()

    seen, before, pages = [], None, 0
    while True:
        params = {"limit": 2, **({"before": before} if before else {})}
        page = client.get(f"/v1/jobs/{job_id}/occurrences", params=params, headers=headers).json()
        seen += page["occurrences"]
        pages += 1
        before = page["next_before"]
        if before is None:
            break
    assert [o["id"] for o in seen] == occurrence_ids[::-1]  # newest first, each exactly once
    assert pages == 3
    oldest = seen[-1]
    assert oldest["state"] == "running"
    assert [(a["token"], a["worker_id"], a["state"]) for a in oldest["attempt_log"]] == [(token, "w1", "running")]
    assert all(o["attempt_log"] == [] for o in seen[:-1])


# -- metrics and health -------------------------------------------------------------------------------
SAMPLE_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*\})?'
                         r" (-?[0-9.e+-]+|[+-]Inf|NaN)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(body: str) -> dict[tuple[str, frozenset], float]:
    """A strict reader of the text exposition format: every sample belongs to a family declared by # TYPE."""
    kinds: dict[str, str] = {}
    samples: dict[tuple[str, frozenset], float] = {}
    for line in body.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge", "histogram") and name not in kinds
            kinds[name] = kind
            continue
        match = SAMPLE_LINE.match(line)
        assert match, f"not a Prometheus sample: {line!r}"
        name = match[1]
        family = name if name in kinds else re.sub(r"_(bucket|sum|count)$", "", name)
        assert family in kinds, f"{name} has no # TYPE"
        key = (name, frozenset(LABEL.findall(match[2] or "")))
        assert key not in samples, f"duplicate sample {key}"
        samples[key] = float(match[3])
    return samples


def test_metrics_are_prometheus_text_and_match_the_database(client, keys, engine):
    headers = as_tenant(keys["acme"])
    job = {name: create(client, keys["acme"], {**CRON_JOB, "name": name, "max_attempts": 1}).json()["id"]
           for name in ("lost", "done", "running", "due")}
    trigger = lambda name: client.post(f"/v1/jobs/{job[name]}/trigger", headers=headers)  # noqa: E731

    def sql(statement: str):
        with engine.begin() as conn:
            return conn.execute(text(statement)).all()

    trigger("lost")
    sql("SELECT * FROM d2_claim('short', 'w1', 1, -1)")  # a lease that has already expired
    assert sql("SELECT d2_reap(10)") == [(1,)]
    trigger("done")
    (token,), = sql("SELECT token FROM d2_claim('short', 'w1', 1, 30)")
    sql(f"SELECT * FROM d2_complete(ARRAY[{token}]::bigint[], ARRAY[true], ARRAY[NULL]::text[],"
        " ARRAY[now()])")
    trigger("running")
    sql("SELECT * FROM d2_claim('short', 'w1', 1, 30)")
    trigger("due")

    response = client.get("/metrics")  # no API key: operators scrape it
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = parse_prometheus(response.text)
    value = lambda name, **labels: samples[(name, frozenset(labels.items()))]  # noqa: E731

    assert value("d2_occurrences_due") == 1
    assert value("d2_occurrences_running") == 1
    assert value("d2_attempts_dispatched_total") == 3
    assert value("d2_occurrences_completed_total") == 1
    assert value("d2_attempts_lost_total") == 1
    assert value("d2_occurrences_dead_total") == 1
    for state, count in sql("SELECT state, count(*) FROM occurrences GROUP BY state"):
        assert value("d2_occurrences", state=state) == count
    buckets = sorted((float(dict(labels)["le"]), v) for (name, labels), v in samples.items()
                     if name == "d2_fire_lag_seconds_bucket")
    counts = [v for _, v in buckets]
    assert counts == sorted(counts) and buckets[-1] == (float("inf"), 3)  # cumulative, one per first dispatch
    assert value("d2_fire_lag_seconds_count") == 3
    (lag_sum,), = sql("SELECT sum(extract(epoch FROM a.dispatched_at - o.fire_at)) FROM attempts a"
                      " JOIN occurrences o ON o.id = a.occurrence_id")
    assert value("d2_fire_lag_seconds_sum") == pytest.approx(float(lag_sum))


def test_health_is_ok_with_the_database_and_503_without_it(client, keys):
    assert client.get("/healthz").json() == {"status": "ok"}
    # A real connection attempt to a server that is not there (no socket in that directory).
    with TestClient(create_app("postgresql://postgres:@/d2?host=/nonexistent-d2kit-socket-dir")) as down:
        for response in (down.get("/healthz"), down.get("/metrics"),
                         down.get("/v1/jobs/1", headers=as_tenant(keys["acme"]))):
            assert response.status_code == 503
            assert response.json()["detail"].startswith("database unavailable")
            assert response.headers["Retry-After"] == "5"


def test_openapi_documents_every_call_with_its_errors(client):
    spec = client.get("/openapi.json").json()
    operations = {(method.upper(), path): op for path, item in spec["paths"].items() for method, op in item.items()}
    assert set(operations) == {("POST", "/v1/jobs"), ("GET", "/v1/jobs"), ("GET", "/v1/jobs/{job_id}"),
                               ("GET", "/v1/jobs/{job_id}/occurrences"), ("POST", "/v1/jobs/{job_id}/pause"),
                               ("POST", "/v1/jobs/{job_id}/resume"), ("DELETE", "/v1/jobs/{job_id}"),
                               ("POST", "/v1/jobs/{job_id}/trigger"), ("GET", "/healthz"), ("GET", "/metrics")}
    for (_, path), op in operations.items():
        assert op["summary"] and op["description"]
        if path.startswith("/v1/"):
            assert {"401", "422"} <= set(op["responses"]) and op["security"]
        if "{job_id}" in path:
            assert "404" in op["responses"]
    assert {"X-API-Key", "Authorization"} <= {s.get("name", "Authorization")
                                              for s in spec["components"]["securitySchemes"].values()}


# -- real HTTP, through `d2kit api` -------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(database_url, tmp_path):
    port = free_port()
    log = tmp_path / "api.log"
    with open(log, "wb") as log_file:
        server = subprocess.Popen([sys.executable, "-m", "reference_impl.cli", "api", "--port", str(port),
                                   "--log-level", "warning"], env={**os.environ, "DATABASE_URL": database_url},
                                  stdout=log_file, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:  # readiness, not a timed assertion: fail only if it never comes up
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert server.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"d2kit api did not come up: {log.read_text()}"
        time.sleep(0.1)
    yield base, server
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=15)


def test_d2kit_api_serves_over_real_http(served, keys, engine):
    base, server = served
    with httpx.Client(base_url=base, timeout=10) as http:
        assert http.get("/v1/jobs/1").status_code == 401
        created = http.post("/v1/jobs", json=CRON_JOB, headers={"Authorization": f"Bearer {keys['acme']}"})
        assert created.status_code == 201
        fetched = http.get(created.headers["Location"], headers=as_tenant(keys["acme"]))
        assert fetched.json() == created.json()
        assert http.get(created.headers["Location"], headers=as_tenant(keys["other"])).status_code == 404
        assert http.get("/openapi.json").json()["info"]["title"] == "D2 Kit scheduler API"

        def chunks():  # no Content-Length: the limit must hold for a streamed body too
            for _ in range(10):
                yield b"x" * 16_384

        assert http.post("/v1/jobs", content=chunks(), headers=as_tenant(keys["acme"])).status_code == 413
    assert written_rows(engine) == (1, 0, 0)
    server.send_signal(signal.SIGTERM)
    # uvicorn shuts down gracefully, then re-raises the signal so the exit status tells the truth
    assert server.wait(timeout=15) in (0, -signal.SIGTERM)
