"""Every API error is RFC 9457 problem+json: type, title, status (= HTTP status), detail; never a traceback."""

from __future__ import annotations

import json

import pytest

from tests.support.factories import assert_problem, count_jobs, pointers

MASS_ASSIGNABLE = [
    "status",
    "retry_count",
    "worker_id",
    "id",
    "claim_token",
    "error",
    "result",
    "producer",
    "stall_count",
    "created_at",
    "claimed_at",
    "lease_expires_at",
]


@pytest.mark.parametrize(
    "body",
    [
        b"{bad json",
        b'{"type": "email",}',
        b"\xff\xfe\x00",
        b"{'type': 'email'}",
        b'{"type": "email", "payload": {"x": NaN}}',
        b"[" * 100_000,
    ],
)
def test_malformed_json_is_400(client, producer, body):
    response = client.post("/jobs", data=body, content_type="application/json", headers=producer)
    problem = assert_problem(response, 400)
    assert "JSON" in problem["detail"] or "nested" in problem["detail"]
    assert count_jobs() == 0


def test_401_is_a_problem(client):
    assert_problem(client.get("/jobs"), 401)


def test_403_is_a_problem(client, worker):
    problem = assert_problem(client.post("/jobs", json={"type": "email"}, headers=worker), 403)
    assert "worker" in problem["detail"]


@pytest.mark.parametrize(
    "path",
    [
        "/nope",
        "/jobs/abc",
        "/jobs/1/nope",
        "/jobs/2147483648",
        "/jobs/99999999999999999999999",
        "/jobs/99999999999999999999999/events",
    ],
)
def test_unknown_paths_are_404_problems(client, admin, path):
    assert_problem(client.get(path, headers=admin), 404)


def test_an_unknown_job_is_a_404_problem(client, admin):
    problem = assert_problem(client.get("/jobs/424242", headers=admin), 404)
    assert "424242" in problem["detail"]


def test_get_jobs_claim_is_405_not_a_job_id(client, worker):
    response = client.get("/jobs/claim", headers=worker)
    assert_problem(response, 405)
    assert "POST" in response.headers["Allow"]


@pytest.mark.parametrize(
    "method, path",
    [
        ("DELETE", "/jobs/1"),
        ("PUT", "/jobs"),
        ("PATCH", "/jobs/1"),
        ("GET", "/jobs/1/complete"),
        ("GET", "/jobs/batch"),
    ],
)
def test_wrong_methods_are_405_problems(client, admin, method, path):
    response = client.open(path, method=method, headers=admin)
    assert_problem(response, 405)
    assert response.headers["Allow"]


def test_409_is_a_problem_naming_the_state(client, worker, make_job):
    job_id = make_job(status="completed")
    problem = assert_problem(client.post(f"/jobs/{job_id}/complete", json={"claim_token": "t"}, headers=worker), 409)
    assert "completed" in problem["detail"]


def test_413_is_a_problem(client, producer):
    response = client.post("/jobs", data=b"x" * (1024 * 1024 + 1), content_type="application/json", headers=producer)
    assert_problem(response, 413)


def test_422_lists_each_wrong_type_with_a_pointer(client, producer):
    response = client.post(
        "/jobs",
        json={"type": 7, "payload": "x", "priority": 3, "max_retries": "many", "idempotency_key": 5, "run_at": False},
        headers=producer,
    )
    problem = assert_problem(response, 422)
    assert {e["pointer"] for e in problem["errors"]} == {
        "/type",
        "/payload",
        "/priority",
        "/max_retries",
        "/idempotency_key",
        "/run_at",
    }
    assert all(isinstance(e["detail"], str) and e["detail"] for e in problem["errors"])


def test_422_for_a_missing_field(client, producer, worker, make_job):
    assert assert_problem(client.post("/jobs", json={}, headers=producer), 422)["errors"] == [
        {"pointer": "/type", "detail": "is required"}
    ]
    job_id = make_job(status="running")
    assert pointers(client.post(f"/jobs/{job_id}/complete", json={}, headers=worker)) == {"/claim_token"}


@pytest.mark.parametrize("field", MASS_ASSIGNABLE)
def test_unknown_fields_are_422_so_nothing_can_be_mass_assigned(client, producer, field):
    response = client.post(
        "/jobs", json={"type": "email", field: "completed" if field == "status" else 1}, headers=producer
    )
    assert assert_problem(response, 422)["errors"] == [{"pointer": f"/{field}", "detail": "unknown field"}]
    assert count_jobs() == 0


@pytest.mark.parametrize(
    "who, action, body",
    [
        ("worker", "claim", {"status": "running"}),
        ("worker", "complete", {"claim_token": "token-a", "status": "failed"}),
        ("worker", "fail", {"claim_token": "token-a", "retry_count": 0}),
        ("worker", "heartbeat", {"claim_token": "token-a", "lease_expires_at": "2099-01-01T00:00:00Z"}),
        ("producer", "cancel", {"status": "completed"}),
        ("admin", "retry", {"max_retries": 99}),
    ],
)
def test_action_bodies_refuse_unknown_fields_and_change_nothing(request, client, make_job, read_job, who, action, body):
    job_id = make_job(
        status="pending" if action in {"claim", "cancel"} else "failed" if action == "retry" else "running"
    )
    before = read_job(job_id)
    path = "/jobs/claim" if action == "claim" else f"/jobs/{job_id}/{action}"
    response = client.post(path, json=body, headers=request.getfixturevalue(who))
    assert {e["detail"] for e in assert_problem(response, 422)["errors"]} == {"unknown field"}
    assert read_job(job_id) == before


@pytest.mark.parametrize("body", [[], ["type", "email"], "email", 42, None])
def test_a_body_that_is_not_an_object_is_422(client, producer, body):
    response = client.post("/jobs", data=json.dumps(body), content_type="application/json", headers=producer)
    assert pointers(response) == {""}


def test_an_unexpected_error_is_a_500_problem_without_internals(app, client):
    def explode():
        raise RuntimeError("connection string postgres://u:pw@db/internal")

    app.add_url_rule("/jobs-test-explode", "explode", explode)
    response = client.get("/jobs-test-explode")
    assert_problem(response, 500)
    assert "postgres://" not in response.get_data(as_text=True)
    assert "RuntimeError" not in response.get_data(as_text=True)


def test_no_error_body_ever_holds_a_traceback(client, producer, worker, admin, make_job):
    # A sweep of odd requests; assert_problem checks each for a traceback.
    job_id = make_job(status="running")
    odd = [
        (client.post("/jobs", data=b"\x00\x01", content_type="application/json", headers=producer), 400),
        (client.post("/jobs", data=b"\x00\x01", headers=producer), 415),
        (
            client.post(
                "/jobs", json={"type": "email", "payload": {"a": "\x00"}, "max_retries": 10**30}, headers=producer
            ),
            422,
        ),
        (client.post("/jobs/claim", json={"types": ["email"], "limit": -1}, headers=worker), 422),
        (client.post(f"/jobs/{job_id}/fail", json={"claim_token": 5}, headers=worker), 422),
        (client.get("/jobs", query_string={"limit": "many", "status": "done"}, headers=admin), 422),
        (client.get("/jobs", query_string={"cursor": "not-ours"}, headers=admin), 422),
        (client.post("/jobs/batch", json={"jobs": [{"type": "email"}, 5]}, headers=producer), 422),
    ]
    for response, status in odd:
        assert_problem(response, status)
