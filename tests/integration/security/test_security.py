"""Attacks on the API, one per finding of the seed audit (V-01 … V-10), each named for it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from sqlalchemy import inspect, select, text

from queuelog import queue
from queuelog.auth.keys import revoke_key
from queuelog.extensions import db
from queuelog.models import ApiKey
from tests.support.api import bearer
from tests.support.factories import assert_problem, count_jobs, event_rows, expire_lease, key_id, pointers

ROUTES = [
    ("POST", "/jobs"),
    ("GET", "/jobs"),
    ("POST", "/jobs/batch"),
    ("GET", "/jobs/1"),
    ("GET", "/jobs/1/events"),
    ("POST", "/jobs/claim"),
    ("POST", "/jobs/1/heartbeat"),
    ("POST", "/jobs/1/complete"),
    ("POST", "/jobs/1/fail"),
    ("POST", "/jobs/1/release"),
    ("POST", "/jobs/1/cancel"),
    ("POST", "/jobs/1/retry"),
]

# (role, method, path) that the role may not use at all.
WRONG_ROLES = [
    ("worker", "POST", "/jobs"),
    ("worker", "GET", "/jobs"),
    ("worker", "POST", "/jobs/batch"),
    ("worker", "POST", "/jobs/1/cancel"),
    ("worker", "POST", "/jobs/1/retry"),
    ("producer", "POST", "/jobs/claim"),
    ("admin", "POST", "/jobs/claim"),
    ("producer", "POST", "/jobs/1/complete"),
    ("admin", "POST", "/jobs/1/complete"),
    ("producer", "POST", "/jobs/1/fail"),
    ("producer", "POST", "/jobs/1/heartbeat"),
    ("producer", "POST", "/jobs/1/release"),
    ("producer", "POST", "/jobs/1/retry"),
]


def _call(client, method: str, path: str, headers: dict | None = None):
    return client.open(path, method=method, json={} if method == "POST" else None, headers=headers or {})


@pytest.fixture
def own_job(make_job, producer):
    """A pending job of producer-a."""
    return make_job(producer_key_id=key_id("producer-a"), producer="producer-a")


# --- V-01: authentication and roles -------------------------------------------------------------


@pytest.mark.parametrize("method, path", ROUTES)
def test_v01_a_request_without_a_key_is_401_with_a_challenge(client, method, path):
    response = _call(client, method, path)
    assert_problem(response, 401)
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer ql_not-a-key-we-issued-0000000000000000000",
        "Bearer",
        "Bearer ",
        "Basic dXNlcjpwYXNz",
        "ql_rawkeywithoutscheme",
        "Bearer not_our_prefix_0000000000000000000000000",
        "Bearer " + "ql_" + "x" * 300,
    ],
)
def test_v01_an_unknown_or_malformed_key_is_401(client, worker, authorization):
    response = client.post("/jobs/claim", headers={"Authorization": authorization})
    assert_problem(response, 401)
    assert "WWW-Authenticate" in response.headers


def test_v01_a_revoked_key_is_refused_on_the_very_next_request(client, producer):
    assert client.get("/jobs", headers=producer).status_code == 200
    assert revoke_key("producer-a")
    response = client.get("/jobs", headers=producer)
    assert_problem(response, 401)
    assert "WWW-Authenticate" in response.headers


@pytest.mark.parametrize("role, method, path", WRONG_ROLES)
def test_v01_a_key_of_the_wrong_role_is_403(client, make_key, make_job, read_job, role, method, path):
    job_id = make_job(status="running" if "claim" not in path else "pending")
    before = read_job(job_id)
    response = _call(client, method, path.replace("/1", f"/{job_id}"), bearer(make_key(role)))
    assert_problem(response, 403)
    assert read_job(job_id) == before


def test_v01_keys_are_random_prefixed_and_long(make_key):
    first, second = make_key("producer"), make_key("producer")
    assert first != second
    for secret in (first, second):
        assert secret.startswith("ql_")
        assert len(secret) - len("ql_") >= 22  # ≥ 22 URL-safe base64 characters: ≥ 128 random bits


def _every_text_value(conn) -> list[str]:
    values = []
    for table in inspect(conn).get_table_names():
        for row in conn.execute(text(f"SELECT * FROM {table}")):
            values.extend(str(value) for value in row if value is not None)
    return values


def test_v01_the_database_holds_only_a_hash_of_a_key(app, client, make_key, database_url):
    secret = make_key("producer", "hashed-producer")
    assert client.get("/jobs", headers=bearer(secret)).status_code == 200
    random_part = secret[len("ql_") :]
    with db.engine.connect() as conn:
        assert not [value for value in _every_text_value(conn) if random_part in value]
        stored = conn.execute(select(ApiKey.__table__).where(ApiKey.__table__.c.name == "hashed-producer")).one()
    assert stored.digest != secret and len(stored.digest) == 64
    assert secret.startswith(stored.prefix) and len(stored.prefix) < 12
    if database_url.startswith("sqlite"):
        db.engine.dispose()  # flush nothing is hidden in a connection; the files are what an attacker reads
        path = Path(database_url.removeprefix("sqlite:///"))
        raw = b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*") if p.is_file())
        assert raw and random_part.encode() not in raw


# --- V-02: job types -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "job_type",
    ["unlisted", "Email", "email ", "em ail", "../../etc/passwd", "", "x" * 101, "émail", "email\n", "-email"],
)
def test_v02_a_type_off_the_allowlist_or_off_the_pattern_is_422(client, producer, job_type):
    assert pointers(client.post("/jobs", json={"type": job_type}, headers=producer)) == {"/type"}
    assert count_jobs() == 0


@pytest.mark.parametrize("config_overrides", [{"JOB_TYPES": ["email", "has space", "semi;colon"]}])
@pytest.mark.parametrize("job_type", ["has space", "semi;colon"])
def test_v02_the_pattern_holds_even_for_a_misconfigured_allowlist(client, producer, config_overrides, job_type):
    assert pointers(client.post("/jobs", json={"type": job_type}, headers=producer)) == {"/type"}


def test_v02_a_producer_limited_by_types_may_not_enqueue_others(client, make_key):
    limited = bearer(make_key("producer", "report-producer", types=["report"]))
    assert_problem(client.post("/jobs", json={"type": "email"}, headers=limited), 403)
    assert client.post("/jobs", json={"type": "report"}, headers=limited).status_code == 201
    assert count_jobs() == 1


def test_v02_a_worker_limited_by_types_may_not_claim_others(client, make_key, own_job, read_job):
    limited = bearer(make_key("worker", "report-worker", types=["report"]))
    assert_problem(client.post("/jobs/claim", json={"types": ["email"]}, headers=limited), 403)
    assert client.post("/jobs/claim", headers=limited).status_code == 204  # the email job is not its to take
    assert read_job(own_job).status == "pending"


# --- V-03: priority ceiling ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "ceiling, asked, code",
    [
        (None, "low", 201),
        (None, "medium", 201),
        (None, "high", 403),
        (None, "critical", 403),
        ("low", "medium", 403),
        ("high", "high", 201),
        ("high", "critical", 403),
        ("critical", "critical", 201),
    ],
)
def test_v03_a_producer_may_not_enqueue_above_its_ceiling(client, make_key, ceiling, asked, code):
    headers = bearer(make_key("producer", max_priority=ceiling))
    response = client.post("/jobs", json={"type": "email", "priority": asked}, headers=headers)
    assert response.status_code == code
    if code == 403:
        assert_problem(response, 403)
    assert count_jobs() == (1 if code == 201 else 0)


def test_v03_the_ceiling_cannot_be_dodged_in_a_batch(client, producer):
    response = client.post(
        "/jobs/batch", json={"jobs": [{"type": "email"}, {"type": "email", "priority": "CRITICAL"}]}, headers=producer
    )
    assert_problem(response, 403)
    assert count_jobs() == 0


# --- V-04: the worker's identity -----------------------------------------------------------------


def test_v04_a_body_worker_id_that_differs_from_the_key_is_422(client, worker, own_job, read_job):
    response = client.post("/jobs/claim", json={"worker_id": "worker-b"}, headers=worker)
    assert pointers(response) == {"/worker_id"}
    assert read_job(own_job).status == "pending"


def test_v04_a_body_worker_id_equal_to_the_key_name_is_accepted(client, worker, own_job):
    response = client.post("/jobs/claim", json={"worker_id": "worker-a"}, headers=worker)
    assert response.status_code == 200 and response.get_json()["worker_id"] == "worker-a"


def test_v04_worker_id_is_always_the_key_name(client, make_key, own_job, read_job):
    response = client.post("/jobs/claim", headers=bearer(make_key("worker", "gpu-box-7")))
    assert response.get_json()["worker_id"] == "gpu-box-7"
    assert read_job(own_job).worker_id == "gpu-box-7"


@pytest.mark.parametrize("path", ["complete", "fail", "heartbeat"])
def test_v04_a_holder_cannot_rename_itself_in_an_action(client, worker, make_job, read_job, path):
    job_id = make_job(status="running")
    response = client.post(
        f"/jobs/{job_id}/{path}", json={"claim_token": "token-a", "worker_id": "worker-b"}, headers=worker
    )
    assert "/worker_id" in pointers(response)
    assert read_job(job_id).worker_id == "worker-a"


# --- V-05: ownership and the claim token ---------------------------------------------------------


@pytest.mark.parametrize("action", ["complete", "fail", "heartbeat", "release"])
def test_v05_another_worker_cannot_act_on_a_held_job(client, other_worker, make_job, read_job, action):
    job_id = make_job(status="running")
    before = read_job(job_id)
    response = client.post(f"/jobs/{job_id}/{action}", json={"claim_token": "token-a"}, headers=other_worker)
    assert_problem(response, 409)
    assert read_job(job_id) == before


@pytest.mark.parametrize("action", ["complete", "fail", "heartbeat", "release"])
def test_v05_the_holder_with_a_wrong_token_is_409(client, worker, make_job, read_job, action):
    job_id = make_job(status="running")
    before = read_job(job_id)
    assert_problem(client.post(f"/jobs/{job_id}/{action}", json={"claim_token": "guess"}, headers=worker), 409)
    assert read_job(job_id) == before


@pytest.mark.parametrize("reclaimer", ["worker", "other_worker"])
def test_v05_a_stale_token_after_reap_and_reclaim_can_never_finish_the_new_attempt(
    request, client, worker, enqueue, claim, read_job, reclaimer
):
    job_id = enqueue()["id"]
    stale = claim()["claim_token"]
    expire_lease(job_id)
    assert queue.reap().requeued == [job_id]
    fresh = claim(headers=request.getfixturevalue(reclaimer))
    assert fresh["id"] == job_id and fresh["claim_token"] != stale
    for action, body in [
        ("complete", {"result": {"forged": True}}),
        ("fail", {"error": "x", "retryable": False}),
        ("heartbeat", {}),
        ("release", {}),
    ]:
        response = client.post(f"/jobs/{job_id}/{action}", json=dict(body, claim_token=stale), headers=worker)
        assert_problem(response, 409)
    row = read_job(job_id)
    assert (row.status, row.claim_token, row.result) == ("running", fresh["claim_token"], None)
    done = client.post(
        f"/jobs/{job_id}/complete",
        json={"claim_token": fresh["claim_token"]},
        headers=request.getfixturevalue(reclaimer),
    )
    assert done.status_code == 200


# --- V-06: the atomic claim (the big runs are in test_claim.py) ------------------------------------


def test_v06_racing_claimers_never_share_a_job(app, client, producer, make_key):
    secrets = [make_key("worker", f"racer-{n}") for n in range(6)]

    def race(secret, start, codes):
        own = app.test_client()
        start.wait(timeout=10)
        codes.append(own.post("/jobs/claim", headers=bearer(secret)).status_code)

    for _ in range(8):
        job_id = client.post("/jobs", json={"type": "noop"}, headers=producer).get_json()["id"]
        start, codes = threading.Barrier(len(secrets)), []
        threads = [threading.Thread(target=race, args=(s, start, codes)) for s in secrets]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert sorted(codes) == [200] + [204] * (len(secrets) - 1)
        assert [e.event for e in event_rows(job_id)].count("claimed") == 1


# --- V-07: sizes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("config_overrides", [{"MAX_PAYLOAD_BYTES": 1000}])
def test_v07_a_payload_over_the_limit_is_422(client, producer, config_overrides):
    response = client.post("/jobs", json={"type": "email", "payload": {"blob": "A" * 1000}}, headers=producer)
    assert pointers(response) == {"/payload"}
    assert count_jobs() == 0


@pytest.mark.parametrize(
    "who, path",
    [("producer", "/jobs"), ("producer", "/jobs/batch"), ("worker", "/jobs/1/complete"), ("worker", "/jobs/1/fail")],
)
def test_v07_a_body_over_one_mebibyte_is_413(request, client, who, path):
    body = b'{"type": "email", "payload": {"blob": "' + b"A" * (1024 * 1024) + b'"}}'
    response = client.post(path, data=body, content_type="application/json", headers=request.getfixturevalue(who))
    problem = assert_problem(response, 413)
    assert "1048576" in problem["detail"]
    assert count_jobs() == 0


def test_v07_long_type_and_idempotency_key_are_422(client, producer):
    assert pointers(client.post("/jobs", json={"type": "e" * 101}, headers=producer)) == {"/type"}
    assert pointers(client.post("/jobs", json={"type": "email", "idempotency_key": "k" * 201}, headers=producer)) == {
        "/idempotency_key"
    }
    response = client.post("/jobs", json={"type": "email"}, headers=dict(producer, **{"Idempotency-Key": "k" * 201}))
    assert pointers(response) == {"/headers/Idempotency-Key"}


@pytest.mark.parametrize("config_overrides", [{"MAX_ERROR_CHARS": 200}])
def test_v07_a_long_error_is_trimmed_before_it_is_stored(client, worker, make_job, read_job, config_overrides):
    job_id = make_job(status="running")
    client.post(f"/jobs/{job_id}/fail", json={"claim_token": "token-a", "error": "E" * 50_000}, headers=worker)
    stored = read_job(job_id).error
    assert len(stored) <= 200 and stored.startswith("EEEE") and "truncated" in stored
    assert event_rows(job_id)[-1].error == stored


# --- V-08: injection -----------------------------------------------------------------------------

HOSTILE = [
    "'; DROP TABLE jobs;--",
    '" OR 1=1 --',
    "Robert'); DROP TABLE api_keys;--",
    "%_\\%",
    "' UNION SELECT digest FROM x --",
    "Zoë 🚀 日本語 مرحبا \u202e",
    "<script>alert(1)</script>",
    "{{7*7}} ${7*7}",
    "line\nbreak\ttab \u2028",
]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_v08_hostile_strings_are_stored_and_returned_verbatim(
    client, producer, worker, admin, claim, read_job, hostile
):
    job = client.post(
        "/jobs", json={"type": "email", "payload": {"s": hostile, hostile: [hostile]}}, headers=producer
    ).get_json()
    assert job["payload"] == {"s": hostile, hostile: [hostile]}
    token = claim()["claim_token"]
    client.post(f"/jobs/{job['id']}/fail", json={"claim_token": token, "error": hostile}, headers=worker)
    token = claim()["claim_token"]
    done = client.post(
        f"/jobs/{job['id']}/complete", json={"claim_token": token, "result": {"r": hostile}}, headers=worker
    ).get_json()
    assert done["result"] == {"r": hostile}
    seen = client.get(f"/jobs/{job['id']}", headers=admin).get_json()
    assert (seen["payload"]["s"], seen["error"], seen["result"]["r"]) == (hostile, hostile, hostile)
    assert read_job(job["id"]).error == hostile
    listed = client.get("/jobs", query_string={"type": hostile}, headers=admin)
    assert listed.status_code == 200 and listed.get_json()["jobs"] == []
    assert count_jobs() == 1


def test_v08_a_hostile_idempotency_key_is_just_a_key(client, producer):
    key = '\';DROP/**/TABLE/**/jobs;--"OR"1"="1'
    first = client.post("/jobs", json={"type": "email", "idempotency_key": key}, headers=producer)
    again = client.post("/jobs", json={"type": "email", "idempotency_key": key}, headers=producer)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.get_json()["idempotency_key"] == key
    assert count_jobs() == 1
    with db.engine.connect() as conn:
        assert {"jobs", "api_keys", "job_events"} <= set(inspect(conn).get_table_names())


# --- V-09: producers see only their own ----------------------------------------------------------


@pytest.mark.parametrize("method, suffix", [("GET", ""), ("GET", "/events"), ("POST", "/cancel")])
def test_v09_another_producers_job_is_404_exactly_like_a_missing_one(
    client, other_producer, own_job, read_job, method, suffix
):
    theirs = _call(client, method, f"/jobs/{own_job}{suffix}", other_producer)
    missing = _call(client, method, f"/jobs/999999{suffix}", other_producer)
    problem, absent = assert_problem(theirs, 404), assert_problem(missing, 404)
    assert problem["title"] == absent["title"]
    assert problem["detail"] == absent["detail"].replace("999999", str(own_job))
    assert read_job(own_job).status == "pending"


def test_v09_a_worker_not_holding_a_job_cannot_read_it(client, other_worker, make_job):
    job_id = make_job(status="running")  # held by worker-a
    assert_problem(client.get(f"/jobs/{job_id}", headers=other_worker), 404)
    assert_problem(client.get(f"/jobs/{job_id}/events", headers=other_worker), 404)


def test_v09_anothers_idempotency_key_neither_collides_nor_reveals_anything(client, producer, other_producer):
    mine = client.post(
        "/jobs", json={"type": "email", "payload": {"secret": 1}, "idempotency_key": "invoice-7"}, headers=producer
    )
    # A different request under the same key: for the owner a 422, for anyone else a fresh job.
    probe = client.post("/jobs", json={"type": "report", "idempotency_key": "invoice-7"}, headers=other_producer)
    assert probe.status_code == 201
    assert probe.get_json()["id"] != mine.get_json()["id"]
    assert probe.get_json()["payload"] == {}
    assert count_jobs() == 2


def test_v09_a_producer_lists_only_its_own_jobs(client, producer, other_producer, own_job):
    assert client.get("/jobs", headers=other_producer).get_json()["jobs"] == []
    assert [job["id"] for job in client.get("/jobs", headers=producer).get_json()["jobs"]] == [own_job]


# --- V-10: worker error text ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, secret, kept",
    [
        ("connect failed: password=hunter2 host=db", "hunter2", "connect failed"),
        ("login with PASSWORD: 'correct horse'", "correct horse", "login with"),
        ("fetch postgres://app:s3cr3t-pw@db.internal:5432/q refused", "s3cr3t-pw", "db.internal"),
        ("GET https://bob:hunter22@api.example.com/v1 → 500", "hunter22", "api.example.com"),
        (
            "upstream said 401 to Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.abc.def",
            "eyJhbGciOiJIUzI1NiJ9",
            "upstream said 401",
        ),
        ("config api_key=AKIAIOSFODNN7EXAMPLE loaded", "AKIAIOSFODNN7EXAMPLE", "loaded"),
    ],
)
def test_v10_error_text_is_scrubbed_before_it_is_stored(client, worker, admin, make_job, read_job, raw, secret, kept):
    job_id = make_job(status="running")
    client.post(f"/jobs/{job_id}/fail", json={"claim_token": "token-a", "error": raw}, headers=worker)
    stored = read_job(job_id).error
    assert secret not in stored and kept in stored
    assert secret not in (event_rows(job_id)[-1].error or "")
    assert secret not in client.get(f"/jobs/{job_id}", headers=admin).get_data(as_text=True)


def test_v10_our_own_api_keys_are_scrubbed_from_errors(client, worker, make_key, make_job, read_job):
    leaked = make_key("admin", "leaked-admin")
    job_id = make_job(status="running")
    client.post(
        f"/jobs/{job_id}/fail",
        json={"claim_token": "token-a", "error": f"retrying with {leaked} failed"},
        headers=worker,
    )
    stored = read_job(job_id).error
    assert leaked[3:] not in stored and stored.startswith("retrying with")


def test_v10_producers_never_see_error_text(client, producer, worker, admin, enqueue, claim):
    job_id = enqueue()["id"]
    token = claim()["claim_token"]
    client.post(f"/jobs/{job_id}/fail", json={"claim_token": token, "error": "stack: internal detail"}, headers=worker)
    assert client.get(f"/jobs/{job_id}", headers=producer).get_json()["error"] is None
    assert [job["error"] for job in client.get("/jobs", headers=producer).get_json()["jobs"]] == [None]
    events = client.get(f"/jobs/{job_id}/events", headers=producer).get_json()["events"]
    assert [e["error"] for e in events] == [None, None, None]
    assert "internal detail" not in client.get(f"/jobs/{job_id}/events", headers=producer).get_data(as_text=True)


def test_v10_admins_and_the_holding_worker_do_see_error_text(client, worker, admin, enqueue, claim):
    job_id = enqueue()["id"]
    token = claim()["claim_token"]
    client.post(f"/jobs/{job_id}/fail", json={"claim_token": token, "error": "first try broke"}, headers=worker)
    assert client.get(f"/jobs/{job_id}", headers=admin).get_json()["error"] == "first try broke"
    assert [e["error"] for e in client.get(f"/jobs/{job_id}/events", headers=admin).get_json()["events"]][
        -1
    ] == "first try broke"
    held = claim()  # the new holder sees why the last attempt failed
    assert held["error"] == "first try broke"
    assert client.get(f"/jobs/{job_id}", headers=worker).get_json()["error"] == "first try broke"
    final = client.post(
        f"/jobs/{job_id}/fail",
        json={"claim_token": held["claim_token"], "error": "gave up", "retryable": False},
        headers=worker,
    )
    assert final.get_json()["error"] == "gave up"
