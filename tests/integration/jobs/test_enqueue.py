"""POST /jobs and POST /jobs/batch: validation, defaults, priorities, run_at, idempotency, all-or-nothing."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from queuelog.core.clock import rfc3339, utcnow
from tests.support.api import bearer
from tests.support.factories import assert_problem, count_jobs, key_id, pointers, when

SCHEMA_FIELDS = {
    "id",
    "type",
    "payload",
    "priority",
    "status",
    "retry_count",
    "max_retries",
    "idempotency_key",
    "claimed_at",
    "worker_id",
    "error",
    "created_at",
    "updated_at",
    "run_at",
    "lease_expires_at",
    "completed_at",
    "result",
}


@pytest.fixture
def any_priority(make_key):
    """A producer allowed every priority."""
    return bearer(make_key("producer", "producer-critical", max_priority="critical"))


# --- defaults and the job JSON -------------------------------------------------------------------


def test_enqueue_answers_201_with_the_job_and_its_location(client, producer):
    response = client.post("/jobs", json={"type": "email", "payload": {"to": "a@example.com"}}, headers=producer)
    assert response.status_code == 201
    job = response.get_json()
    assert response.headers["Location"].endswith(f"/jobs/{job['id']}")
    assert client.get(response.headers["Location"], headers=producer).get_json() == job


def test_enqueue_fills_the_documented_defaults(enqueue):
    job = enqueue(type="report")
    assert set(job) >= SCHEMA_FIELDS
    assert job["type"] == "report"
    assert job["status"] == "pending"
    assert job["payload"] == {}
    assert job["priority"] == "low"
    assert job["max_retries"] == 3
    assert job["retry_count"] == 0
    assert job["idempotency_key"] is None
    assert job["worker_id"] is job["claimed_at"] is job["error"] is job["result"] is None
    assert job["run_at"] == job["created_at"]


def test_job_times_are_rfc3339_utc(enqueue):
    job = enqueue()
    for name in ("created_at", "updated_at", "run_at"):
        assert job[name].endswith("Z")
        assert abs(when(job[name]) - utcnow()) < timedelta(seconds=30)


def test_the_stored_row_records_payload_priority_and_producer(enqueue, read_job):
    job = enqueue(type="email", payload={"to": "a@example.com", "n": [1, 2]}, priority="medium", max_retries=5)
    row = read_job(job["id"])
    assert row.priority == 10
    assert row.max_retries == 5
    assert row.producer_key_id == key_id("producer-a")
    assert job["payload"] == {"to": "a@example.com", "n": [1, 2]}


@pytest.mark.parametrize(
    "label, stored",
    [
        ("low", 0),
        ("LOW", 0),
        ("Medium", 10),
        ("medium", 10),
        ("HIGH", 20),
        ("hIgH", 20),
        ("critical", 30),
        ("CRITICAL", 30),
    ],
)
def test_priority_labels_are_case_insensitive(client, any_priority, read_job, label, stored):
    response = client.post("/jobs", json={"type": "email", "priority": label}, headers=any_priority)
    assert response.status_code == 201
    assert response.get_json()["priority"] == label.lower()
    assert read_job(response.get_json()["id"]).priority == stored


@pytest.mark.parametrize("priority", ["urgent", "", 10, 0, ["low"], True])
def test_unknown_priority_is_422(client, producer, priority):
    # Numbers are refused too: the API speaks labels, the integers are a storage detail.
    response = client.post("/jobs", json={"type": "email", "priority": priority}, headers=producer)
    assert pointers(response) == {"/priority"}


def test_max_retries_zero_is_accepted(enqueue):
    assert enqueue(max_retries=0)["max_retries"] == 0


@pytest.mark.parametrize("max_retries", [-1, "3", 1.5, True, 10_000])
def test_bad_max_retries_is_422(client, producer, max_retries):
    response = client.post("/jobs", json={"type": "email", "max_retries": max_retries}, headers=producer)
    assert pointers(response) == {"/max_retries"}


def test_type_is_required(client, producer):
    body = assert_problem(client.post("/jobs", json={"payload": {}}, headers=producer), 422)
    assert body["errors"] == [{"pointer": "/type", "detail": "is required"}]


@pytest.mark.parametrize("payload", [[1, 2], "text", 3, True])
def test_payload_must_be_an_object(client, producer, payload):
    response = client.post("/jobs", json={"type": "email", "payload": payload}, headers=producer)
    assert pointers(response) == {"/payload"}


def test_every_problem_is_reported_at_once(client, producer):
    response = client.post(
        "/jobs", json={"type": 5, "payload": [], "priority": "x", "max_retries": -2, "run_at": "soon"}, headers=producer
    )
    assert pointers(response) == {"/type", "/payload", "/priority", "/max_retries", "/run_at"}
    assert count_jobs() == 0


# --- run_at --------------------------------------------------------------------------------------


def test_run_at_is_stored_in_utc(enqueue):
    job = enqueue(run_at="2030-06-01T14:00:00+02:00")
    assert job["run_at"] == "2030-06-01T12:00:00.000000Z"


def test_run_at_in_the_past_is_accepted_as_due(enqueue):
    past = rfc3339(utcnow() - timedelta(hours=1))
    assert enqueue(run_at=past)["run_at"] == past


@pytest.mark.parametrize(
    "run_at",
    [
        "tomorrow",
        "2030-06-01T14:00:00",
        "2030-06-01",
        "2030-13-01T00:00:00Z",
        1700000000,
        "0001-01-01T00:00:00+01:00",
        "9999-12-31T23:59:59-01:00",
    ],
)
def test_bad_run_at_is_422(client, producer, run_at):
    response = client.post("/jobs", json={"type": "email", "run_at": run_at}, headers=producer)
    assert pointers(response) == {"/run_at"}


# --- payload limit -------------------------------------------------------------------------------


@pytest.mark.parametrize("config_overrides", [{"MAX_PAYLOAD_BYTES": 100}])
def test_payload_at_the_limit_is_accepted_and_one_byte_more_is_not(client, producer, config_overrides):
    # {"s":"…"} is 8 bytes of JSON around the string.
    ok = client.post("/jobs", json={"type": "email", "payload": {"s": "x" * 92}}, headers=producer)
    assert ok.status_code == 201
    too_big = client.post("/jobs", json={"type": "email", "payload": {"s": "x" * 93}}, headers=producer)
    body = assert_problem(too_big, 422)
    assert body["errors"][0]["pointer"] == "/payload"
    assert "100" in body["errors"][0]["detail"]


# --- idempotency ---------------------------------------------------------------------------------


def test_same_idempotency_key_and_request_replays_the_job_with_200(client, producer):
    body = {"type": "email", "payload": {"to": "a"}, "idempotency_key": "order-42"}
    first = client.post("/jobs", json=body, headers=producer)
    again = client.post("/jobs", json=body, headers=producer)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.get_json() == first.get_json()
    assert again.headers["Location"] == first.headers["Location"]
    assert count_jobs() == 1


def test_idempotency_key_from_the_header(client, producer):
    headers = dict(producer, **{"Idempotency-Key": "hdr-1"})
    first = client.post("/jobs", json={"type": "email"}, headers=headers)
    again = client.post("/jobs", json={"type": "email"}, headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.get_json()["idempotency_key"] == "hdr-1"
    assert count_jobs() == 1


def test_header_and_body_key_are_one_key(client, producer):
    first = client.post("/jobs", json={"type": "email", "idempotency_key": "k-1"}, headers=producer)
    again = client.post("/jobs", json={"type": "email"}, headers=dict(producer, **{"Idempotency-Key": "k-1"}))
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.get_json()["id"] == first.get_json()["id"]


def test_header_and_body_keys_that_differ_are_422(client, producer):
    response = client.post(
        "/jobs", json={"type": "email", "idempotency_key": "a"}, headers=dict(producer, **{"Idempotency-Key": "b"})
    )
    assert pointers(response) == {"/idempotency_key"}
    assert count_jobs() == 0


@pytest.mark.parametrize(
    "change",
    [
        {"payload": {"to": "b"}},
        {"type": "report"},
        {"priority": "medium"},
        {"max_retries": 1},
        {"run_at": "2030-01-01T00:00:00Z"},
    ],
)
def test_same_idempotency_key_with_a_different_request_is_422(client, producer, change):
    body = {"type": "email", "payload": {"to": "a"}, "idempotency_key": "order-42"}
    assert client.post("/jobs", json=body, headers=producer).status_code == 201
    assert pointers(client.post("/jobs", json=dict(body, **change), headers=producer)) == {"/idempotency_key"}
    assert count_jobs() == 1


def test_replay_returns_the_job_as_it_is_now(client, producer, worker, claim):
    body = {"type": "email", "idempotency_key": "once"}
    job = client.post("/jobs", json=body, headers=producer).get_json()
    token = claim()["claim_token"]
    client.post(f"/jobs/{job['id']}/complete", json={"claim_token": token}, headers=worker)
    again = client.post("/jobs", json=body, headers=producer)
    assert again.status_code == 200
    assert again.get_json()["status"] == "completed"


def test_idempotency_keys_are_scoped_per_producer_key(client, producer, other_producer):
    a = client.post("/jobs", json={"type": "email", "idempotency_key": "shared"}, headers=producer)
    b = client.post("/jobs", json={"type": "report", "idempotency_key": "shared"}, headers=other_producer)
    assert (a.status_code, b.status_code) == (201, 201)
    assert a.get_json()["id"] != b.get_json()["id"]
    assert count_jobs() == 2


@pytest.mark.parametrize("key", ["", "x" * 201, "tab\there", "del\x7f", "ünïcode"])
def test_bad_idempotency_key_is_422(client, producer, key):
    response = client.post("/jobs", json={"type": "email", "idempotency_key": key}, headers=producer)
    assert pointers(response) == {"/idempotency_key"}


def test_concurrent_requests_with_one_key_create_exactly_one_job(app, producer):
    body = {"type": "email", "payload": {"n": 1}, "idempotency_key": "race"}
    start = threading.Barrier(8)
    statuses, ids = [], []

    def post():
        client = app.test_client()
        start.wait(timeout=10)
        response = client.post("/jobs", json=body, headers=producer)
        statuses.append(response.status_code)
        ids.append(response.get_json()["id"])

    threads = [threading.Thread(target=post) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(statuses) == [200] * 7 + [201]
    assert len(set(ids)) == 1
    assert count_jobs() == 1


# --- batch ---------------------------------------------------------------------------------------


def test_batch_enqueue_creates_every_job(client, producer):
    response = client.post(
        "/jobs/batch",
        json={
            "jobs": [
                {"type": "email", "payload": {"n": 1}},
                {"type": "report", "priority": "medium"},
                {"type": "noop"},
            ]
        },
        headers=producer,
    )
    assert response.status_code == 201
    jobs = response.get_json()["jobs"]
    assert [job["type"] for job in jobs] == ["email", "report", "noop"]
    assert all(job["created"] and job["status"] == "pending" for job in jobs)
    assert count_jobs() == 3


@pytest.mark.parametrize(
    "bad_item, pointer",
    [
        ({"type": "not-allowed"}, "/jobs/1/type"),
        ({"type": "email", "priority": "urgent"}, "/jobs/1/priority"),
        ({"type": "email", "status": "completed"}, "/jobs/1/status"),
        ("email", "/jobs/1"),
    ],
)
def test_batch_with_a_bad_item_is_422_and_creates_nothing(client, producer, bad_item, pointer):
    response = client.post(
        "/jobs/batch", json={"jobs": [{"type": "email"}, bad_item, {"type": "noop"}]}, headers=producer
    )
    assert pointer in pointers(response)
    assert count_jobs() == 0


def test_batch_of_one_points_into_the_list(client, producer):
    response = client.post("/jobs/batch", json={"jobs": [{"type": "not-allowed"}]}, headers=producer)
    assert pointers(response) == {"/jobs/0/type"}


@pytest.mark.parametrize("jobs", [[], None, "email", [{"type": "email"}] * 501])
def test_batch_needs_a_list_of_1_to_500_jobs(client, producer, jobs):
    response = client.post("/jobs/batch", json={"jobs": jobs}, headers=producer)
    assert pointers(response) == {"/jobs"}
    assert count_jobs() == 0


def test_batch_item_above_the_ceiling_is_403_and_creates_nothing(client, producer):
    response = client.post(
        "/jobs/batch", json={"jobs": [{"type": "email"}, {"type": "email", "priority": "high"}]}, headers=producer
    )
    assert_problem(response, 403)
    assert count_jobs() == 0


def test_batch_replay_with_idempotency_keys_answers_200_without_new_rows(client, producer):
    body = {"jobs": [{"type": "email", "idempotency_key": "b-1"}, {"type": "email", "idempotency_key": "b-2"}]}
    first = client.post("/jobs/batch", json=body, headers=producer)
    again = client.post("/jobs/batch", json=body, headers=producer)
    assert (first.status_code, again.status_code) == (201, 200)
    assert [job["created"] for job in again.get_json()["jobs"]] == [False, False]
    assert [job["id"] for job in again.get_json()["jobs"]] == [job["id"] for job in first.get_json()["jobs"]]
    assert count_jobs() == 2


def test_batch_conflicting_idempotency_key_rolls_back_the_whole_batch(client, producer):
    assert client.post("/jobs", json={"type": "email", "idempotency_key": "taken"}, headers=producer).status_code == 201
    response = client.post(
        "/jobs/batch",
        json={
            "jobs": [
                {"type": "email", "idempotency_key": "fresh"},
                {"type": "report", "idempotency_key": "taken"},
            ]
        },
        headers=producer,
    )
    assert pointers(response) == {"/jobs/1/idempotency_key"}
    assert count_jobs() == 1


def test_one_key_for_two_different_jobs_in_a_batch_is_422(client, producer):
    response = client.post(
        "/jobs/batch",
        json={
            "jobs": [
                {"type": "email", "idempotency_key": "twice"},
                {"type": "report", "idempotency_key": "twice"},
            ]
        },
        headers=producer,
    )
    assert pointers(response) == {"/jobs/1/idempotency_key"}
    assert count_jobs() == 0


def test_admin_may_enqueue_at_any_priority(client, admin):
    response = client.post("/jobs", json={"type": "email", "priority": "critical"}, headers=admin)
    assert response.status_code == 201
    assert response.get_json()["priority"] == "critical"
