"""The /types routes and the concurrency key, as the contract states them: every route, status and 422."""

from __future__ import annotations

import pytest
from openapi_schema_validator import OAS31Validator

from queuelog.core.clock import utcnow
from tests.support.database import JOB_TYPES
from tests.support.factories import assert_problem, pointers, when

DEFAULTS = {
    "paused": False,
    "concurrency_limit": None,
    "rate_limit": None,
    "key_concurrency_limit": None,
    "unique_scope": "producer",
    "push": None,
}


def validator(client, name):
    """A JSON Schema validator for a component schema of the served OpenAPI document."""
    document = client.get("/openapi.json").get_json()
    return OAS31Validator({"$ref": f"#/components/schemas/{name}", "components": document["components"]})


# --- GET /types, GET /types/{type} ------------------------------------------------------------------


def test_the_list_shows_every_configured_type_in_its_order_with_no_limits(client, admin):
    response = client.get("/types", headers=admin)
    assert response.status_code == 200
    types = response.get_json()["types"]
    assert [item["type"] for item in types] == JOB_TYPES
    for item in types:
        assert item == {"type": item["type"], **DEFAULTS, "pending": 0, "running": 0}


def test_a_type_counts_its_pending_and_running_jobs(client, admin, make_job):
    for status in ("pending", "pending", "running", "completed", "failed"):
        make_job(type="report", status=status)
    make_job(type="email", status="pending")
    response = client.get("/types/report", headers=admin)
    assert response.status_code == 200
    assert response.get_json() == {"type": "report", **DEFAULTS, "pending": 2, "running": 1}


def test_an_unknown_type_is_a_404_problem(client, admin):
    assert_problem(client.get("/types/parcel", headers=admin), 404)
    assert_problem(client.get("/types/parcel/history", headers=admin), 404)
    assert_problem(client.patch("/types/parcel", json={"paused": True}, headers=admin), 404)


@pytest.mark.parametrize(
    "method, path, body",
    [
        ("GET", "/types", None),
        ("GET", "/types/email", None),
        ("PATCH", "/types/email", {"paused": True}),
        ("GET", "/types/email/history", None),
    ],
)
def test_only_admin_keys_may_use_the_type_routes(client, producer, worker, method, path, body):
    for headers in (producer, worker):
        assert_problem(client.open(path, method=method, json=body, headers=headers), 403)
    response = client.open(path, method=method, json=body)
    assert_problem(response, 401)
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_answers_match_the_documented_schemas(client, admin):
    client.patch("/types/email", json={"rate_limit": {"jobs": 5, "per_seconds": 60}}, headers=admin)
    for item in client.get("/types", headers=admin).get_json()["types"]:
        validator(client, "JobType").validate(item)
    for change in client.get("/types/email/history", headers=admin).get_json()["history"]:
        validator(client, "TypeChange").validate(change)


# --- PATCH /types/{type} --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"paused": True},
        {"concurrency_limit": 3},
        {"rate_limit": {"jobs": 20, "per_seconds": 2}},
        {"key_concurrency_limit": 1},
        {
            "paused": True,
            "concurrency_limit": 1,
            "rate_limit": {"jobs": 1, "per_seconds": 86400},
            "key_concurrency_limit": 1_000_000,
        },
        {"unique_scope": "type"},
    ],
)
def test_a_patch_answers_the_type_with_the_fields_it_set(client, admin, body):
    response = client.patch("/types/email", json=body, headers=admin)
    assert response.status_code == 200, response.get_json()
    assert response.get_json() == {"type": "email", **DEFAULTS, **body, "pending": 0, "running": 0}
    assert client.get("/types/email", headers=admin).get_json() == response.get_json()


def test_fields_left_out_keep_their_value_and_null_clears_a_limit(client, admin):
    client.patch("/types/email", json={"concurrency_limit": 3, "key_concurrency_limit": 2}, headers=admin)
    response = client.patch("/types/email", json={"concurrency_limit": None}, headers=admin)
    assert response.get_json()["concurrency_limit"] is None
    assert response.get_json()["key_concurrency_limit"] == 2


def test_resuming_makes_the_type_active_again(client, admin):
    client.patch("/types/email", json={"paused": True}, headers=admin)
    assert client.patch("/types/email", json={"paused": False}, headers=admin).get_json()["paused"] is False


def test_settings_of_one_type_leave_the_others_alone(client, admin):
    client.patch("/types/email", json={"paused": True, "concurrency_limit": 2}, headers=admin)
    assert client.get("/types/report", headers=admin).get_json() == {
        "type": "report",
        **DEFAULTS,
        "pending": 0,
        "running": 0,
    }


@pytest.mark.parametrize(
    "body, pointer",
    [
        ({"concurrency_limit": 0}, "/concurrency_limit"),
        ({"concurrency_limit": -1}, "/concurrency_limit"),
        ({"concurrency_limit": 1_000_001}, "/concurrency_limit"),
        ({"concurrency_limit": 2.5}, "/concurrency_limit"),
        ({"concurrency_limit": "3"}, "/concurrency_limit"),
        ({"concurrency_limit": True}, "/concurrency_limit"),
        ({"key_concurrency_limit": 0}, "/key_concurrency_limit"),
        ({"key_concurrency_limit": [1]}, "/key_concurrency_limit"),
        ({"rate_limit": {"jobs": 0, "per_seconds": 10}}, "/rate_limit/jobs"),
        ({"rate_limit": {"jobs": 10, "per_seconds": 0}}, "/rate_limit/per_seconds"),
        ({"rate_limit": {"jobs": 10, "per_seconds": 86401}}, "/rate_limit/per_seconds"),
        ({"rate_limit": {"jobs": 10}}, "/rate_limit/per_seconds"),
        ({"rate_limit": {"per_seconds": 10}}, "/rate_limit/jobs"),
        ({"rate_limit": {"jobs": 10, "per_seconds": 10, "burst": 2}}, "/rate_limit/burst"),
        ({"rate_limit": {"jobs": "10", "per_seconds": 10}}, "/rate_limit/jobs"),
        ({"rate_limit": "20/2"}, "/rate_limit"),
        ({"rate_limit": 20}, "/rate_limit"),
        ({"paused": "yes"}, "/paused"),
        ({"paused": 1}, "/paused"),
        ({"paused": None}, "/paused"),
        ({"priority": "high"}, "/priority"),
        ({}, ""),
    ],
)
def test_a_wrong_field_is_a_422_pointing_at_it(client, admin, body, pointer):
    response = client.patch("/types/email", json=body, headers=admin)
    assert pointers(response) == {pointer}


def test_every_wrong_field_is_reported_at_once_and_nothing_changes(client, admin):
    response = client.patch("/types/email", json={"concurrency_limit": 0, "paused": "no", "extra": 1}, headers=admin)
    assert pointers(response) == {"/concurrency_limit", "/paused", "/extra"}
    assert client.get("/types/email", headers=admin).get_json()["paused"] is False
    assert client.get("/types/email/history", headers=admin).get_json() == {"history": []}


@pytest.mark.parametrize(
    "data, content_type, status",
    [("{", "application/json", 400), ('["paused"]', "application/json", 422), ('{"paused": true}', "text/plain", 415)],
)
def test_a_body_that_is_not_a_json_object_is_refused_like_any_other(client, admin, data, content_type, status):
    assert_problem(client.patch("/types/email", data=data, content_type=content_type, headers=admin), status)


# --- GET /types/{type}/history ----------------------------------------------------------------------


def test_every_change_is_in_the_history_newest_first_with_who_when_old_and_new(client, admin):
    before = utcnow()
    client.patch("/types/email", json={"paused": True}, headers=admin)
    client.patch(
        "/types/email", json={"concurrency_limit": 3, "rate_limit": {"jobs": 20, "per_seconds": 2}}, headers=admin
    )
    client.patch("/types/email", json={"paused": False, "rate_limit": None}, headers=admin)
    response = client.get("/types/email/history", headers=admin)
    assert response.status_code == 200
    history = response.get_json()["history"]
    assert [entry["changes"] for entry in history] == [
        {"paused": {"old": True, "new": False}, "rate_limit": {"old": {"jobs": 20, "per_seconds": 2}, "new": None}},
        {
            "concurrency_limit": {"old": None, "new": 3},
            "rate_limit": {"old": None, "new": {"jobs": 20, "per_seconds": 2}},
        },
        {"paused": {"old": False, "new": True}},
    ]
    assert {entry["actor"] for entry in history} == {"key:admin-a"}
    times = [when(entry["at"]) for entry in history]
    assert times == sorted(times, reverse=True) and before <= times[-1] <= utcnow()


def test_a_patch_that_changes_nothing_writes_no_history(client, admin):
    client.patch("/types/email", json={"concurrency_limit": 3}, headers=admin)
    response = client.patch("/types/email", json={"concurrency_limit": 3, "paused": False}, headers=admin)
    assert response.status_code == 200
    assert len(client.get("/types/email/history", headers=admin).get_json()["history"]) == 1


def test_the_history_of_one_type_holds_only_its_own_changes(client, admin):
    client.patch("/types/email", json={"paused": True}, headers=admin)
    assert client.get("/types/report/history", headers=admin).get_json() == {"history": []}


# --- the concurrency key on jobs ------------------------------------------------------------------


def test_a_job_carries_its_concurrency_key_and_null_without_one(client, producer, enqueue):
    keyed = enqueue(concurrency_key="tenant-42")
    assert keyed["concurrency_key"] == "tenant-42"
    assert enqueue()["concurrency_key"] is None
    assert client.get(f"/jobs/{keyed['id']}", headers=producer).get_json()["concurrency_key"] == "tenant-42"


def test_a_batch_item_carries_its_own_concurrency_key(client, producer):
    response = client.post(
        "/jobs/batch",
        json={
            "jobs": [
                {"type": "email", "concurrency_key": "a"},
                {"type": "email"},
                {"type": "email", "concurrency_key": "b"},
            ]
        },
        headers=producer,
    )
    assert response.status_code == 201
    assert [job["concurrency_key"] for job in response.get_json()["jobs"]] == ["a", None, "b"]


def test_a_claimed_job_shows_its_concurrency_key(enqueue, claim):
    enqueue(concurrency_key="tenant 7")
    assert claim()["concurrency_key"] == "tenant 7"


@pytest.mark.parametrize("key", ["", "x" * 201, "tab\there", "caf\u00e9", "line\n", 42, ["a"], {"a": 1}])
def test_a_concurrency_key_that_is_not_1_to_200_printable_ascii_is_a_422(client, producer, key):
    response = client.post("/jobs", json={"type": "email", "concurrency_key": key}, headers=producer)
    assert pointers(response) == {"/concurrency_key"}
    batch = client.post(
        "/jobs/batch", json={"jobs": [{"type": "email"}, {"type": "email", "concurrency_key": key}]}, headers=producer
    )
    assert pointers(batch) == {"/jobs/1/concurrency_key"}


def test_the_longest_and_the_shortest_keys_are_taken(enqueue):
    assert enqueue(concurrency_key="~" * 200)["concurrency_key"] == "~" * 200
    assert enqueue(concurrency_key=" ")["concurrency_key"] == " "


def test_an_idempotent_replay_must_repeat_the_same_concurrency_key(client, producer):
    body = {"type": "email", "idempotency_key": "k-1", "concurrency_key": "tenant-1"}
    first = client.post("/jobs", json=body, headers=producer)
    assert client.post("/jobs", json=body, headers=producer).status_code == 200
    other = client.post("/jobs", json={**body, "concurrency_key": "tenant-2"}, headers=producer)
    assert pointers(other) == {"/idempotency_key"}
    assert first.status_code == 201
