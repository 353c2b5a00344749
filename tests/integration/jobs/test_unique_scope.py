"""Whose dedupe windows (issue 33, written as the attacks it reported): a producer's unique_for windows are its
own by default; an admin may share a type's windows among every producer (unique_scope "type"), and then a
hit on a job the caller may not see answers only {"deduplicated": true}. No path lets a job depend on, or
read, a job its producer may not see.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from openapi_schema_validator import OAS31Validator

from queuelog.core.clock import rfc3339, utcnow
from tests.support.factories import assert_problem, count_jobs, event_rows

INVOICE = {
    "type": "email",
    "payload": {"card": "4242 4242 4242 4242"},
    "unique_for": 3600,
    "unique_key": "invoice-42",
    "idempotency_key": "a-secret-idempotency-key",
    "concurrency_key": "tenant-a",
}
HIDDEN = {"deduplicated": True}


@pytest.fixture
def shared(client, admin):
    """share(job_type="email"): one dedupe window per key for every producer of the type (PATCH /types)."""

    def _share(job_type: str = "email") -> None:
        response = client.patch(f"/types/{job_type}", json={"unique_scope": "type"}, headers=admin)
        assert response.status_code == 200, response.get_json()

    return _share


@pytest.fixture
def invoice(client, producer):
    """Producer A's job holding its own invoice-42 window: its answer's JSON."""
    response = client.post("/jobs", json=INVOICE, headers=producer)
    assert response.status_code == 201, response.get_json()
    return response.get_json()


@pytest.fixture
def shared_invoice(shared, client, producer):
    """Producer A's job holding the invoice-42 window that every producer of its type shares."""
    shared()
    response = client.post("/jobs", json=INVOICE, headers=producer)
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def _post(client, headers, **body):
    return client.post("/jobs", json={"type": "email", **body}, headers=headers)


def _batch(client, headers, *items):
    return client.post("/jobs/batch", json={"jobs": list(items)}, headers=headers)


def _text(response) -> str:
    return response.get_data(as_text=True)


# --- the default: each producer key has its own windows ------------------------------------------------


def test_v33_another_producers_enqueue_with_the_same_unique_key_is_its_own_job(client, invoice, other_producer):
    response = _post(client, other_producer, payload={"n": 1}, unique_for=3600, unique_key="invoice-42")

    assert response.status_code == 201
    job = response.get_json()
    assert job["id"] != invoice["id"] and job["producer"] == "producer-b" and job["payload"] == {"n": 1}
    assert response.headers["Location"] == f"/jobs/{job['id']}"
    assert "4242" not in _text(response) and "deduplicated" not in job
    assert count_jobs() == 2


def test_a_producers_repeat_within_its_window_answers_its_own_earlier_job(client, invoice, other_producer):
    first = _post(client, other_producer, unique_for=3600, unique_key="invoice-42").get_json()
    again = _post(client, other_producer, unique_for=3600, unique_key="invoice-42")

    assert again.status_code == 200
    assert (again.get_json()["id"], again.get_json()["deduplicated"]) == (first["id"], True)
    assert again.headers["Location"] == f"/jobs/{first['id']}"


def test_v33_another_producers_batch_item_with_the_same_unique_key_is_its_own_job(client, invoice, other_producer):
    response = _batch(client, other_producer, {"type": "email", "unique_for": 3600, "unique_key": "invoice-42"})

    assert response.status_code == 201
    [item] = response.get_json()["jobs"]
    assert item["id"] != invoice["id"] and item["created"] is True and item["producer"] == "producer-b"
    assert "4242" not in _text(response)


def test_v33_a_window_scheduled_a_year_ahead_swallows_no_other_producers_enqueue(client, producer, other_producer):
    far = rfc3339(utcnow() + timedelta(days=365))
    assert _post(client, producer, run_at=far, unique_for=604_800, unique_key="nightly").status_code == 201

    response = _post(client, other_producer, unique_for=604_800, unique_key="nightly")

    assert response.status_code == 201 and response.get_json()["producer"] == "producer-b"


def test_v33_guessing_another_producers_payload_answers_as_a_fresh_enqueue_would(client, producer, other_producer):
    _post(client, producer, payload={"patient": "Jane Doe", "test": "hiv"}, unique_for=3600)

    guess = _post(client, other_producer, payload={"patient": "Jane Doe", "test": "hiv"}, unique_for=3600)
    miss = _post(client, other_producer, payload={"patient": "John Roe", "test": "hiv"}, unique_for=3600)

    assert (guess.status_code, miss.status_code) == (201, 201)
    assert "deduplicated" not in guess.get_json()


def test_an_admins_windows_are_its_own_too(client, invoice, admin):
    response = _post(client, admin, unique_for=3600, unique_key="invoice-42")

    assert response.status_code == 201 and response.get_json()["id"] != invoice["id"]


# --- the setting: GET, PATCH, history --------------------------------------------------------------


def test_every_type_keeps_windows_per_producer_until_an_admin_shares_them(client, admin):
    assert {item["unique_scope"] for item in client.get("/types", headers=admin).get_json()["types"]} == {"producer"}
    assert client.get("/types/email", headers=admin).get_json()["unique_scope"] == "producer"


def test_sharing_a_types_windows_is_shown_and_recorded_in_its_history(client, admin):
    response = client.patch("/types/email", json={"unique_scope": "type"}, headers=admin)

    assert response.status_code == 200 and response.get_json()["unique_scope"] == "type"
    assert client.get("/types/email", headers=admin).get_json()["unique_scope"] == "type"
    assert client.get("/types/report", headers=admin).get_json()["unique_scope"] == "producer"
    [change] = client.get("/types/email/history", headers=admin).get_json()["history"]
    assert (change["actor"], change["changes"]) == ("key:admin-a", {"unique_scope": {"old": "producer", "new": "type"}})


@pytest.mark.parametrize("value", ["global", "Type", "", None, 1, True, ["type"], {"scope": "type"}])
def test_a_bad_unique_scope_is_422_pointing_at_it_and_changes_nothing(client, admin, value):
    response = client.patch("/types/email", json={"unique_scope": value}, headers=admin)

    problem = assert_problem(response, 422)
    assert [error["pointer"] for error in problem["errors"]] == ["/unique_scope"]
    assert client.get("/types/email", headers=admin).get_json()["unique_scope"] == "producer"
    assert client.get("/types/email/history", headers=admin).get_json()["history"] == []


def test_a_producer_may_not_share_a_types_windows(client, producer):
    assert_problem(client.patch("/types/email", json={"unique_scope": "type"}, headers=producer), 403)


# --- a shared window (unique_scope "type") ----------------------------------------------------------


def test_v33_in_a_shared_window_another_producers_hit_answers_only_that_it_was_deduplicated(
    client, shared_invoice, other_producer
):
    response = _post(client, other_producer, payload={"n": 1}, unique_for=3600, unique_key="invoice-42")

    assert response.status_code == 200
    assert response.get_json() == HIDDEN
    assert "Location" not in response.headers and "Link" not in response.headers
    assert count_jobs() == 1


def test_in_a_shared_window_the_holders_own_repeat_answers_its_job(client, shared, producer):
    shared()
    first = _post(client, producer, unique_for=3600, unique_key="k").get_json()
    again = _post(client, producer, unique_for=3600, unique_key="k")

    assert again.status_code == 200 and again.get_json()["id"] == first["id"]
    assert again.get_json()["deduplicated"] is True and again.headers["Location"] == f"/jobs/{first['id']}"


def test_in_a_shared_window_an_admins_hit_answers_the_job_it_may_see(client, shared_invoice, admin):
    response = _post(client, admin, unique_for=3600, unique_key="invoice-42")

    assert response.status_code == 200 and response.get_json()["id"] == shared_invoice["id"]
    assert response.headers["Location"] == f"/jobs/{shared_invoice['id']}"


def test_a_shared_window_is_per_type(client, shared, invoice, other_producer):
    shared("report")
    response = _post(client, other_producer, unique_for=3600, unique_key="invoice-42")

    assert response.status_code == 201


def test_v33_in_a_shared_window_a_batch_item_hitting_a_hidden_job_answers_only_that(
    client, shared_invoice, other_producer
):
    response = _batch(
        client,
        other_producer,
        {"type": "email", "unique_for": 3600, "unique_key": "invoice-42"},
        {"type": "email", "payload": {"n": 2}, "unique_for": 3600, "unique_key": "invoice-42"},
        {"type": "email", "payload": {"n": 3}},
    )

    assert response.status_code == 201
    hit, same_window, new = response.get_json()["jobs"]
    assert hit == HIDDEN and same_window == HIDDEN
    assert (new["created"], new["producer"], new["payload"]) == (True, "producer-b", {"n": 3})
    assert "4242" not in _text(response) and count_jobs() == 2


def test_a_batch_that_only_hits_hidden_jobs_answers_200(client, shared_invoice, other_producer):
    response = _batch(client, other_producer, {"type": "email", "unique_for": 3600, "unique_key": "invoice-42"})

    assert response.status_code == 200 and response.get_json() == {"jobs": [HIDDEN]}


def test_sharing_a_types_windows_leaves_the_windows_producers_took_before_their_own(
    client, invoice, shared, other_producer
):
    shared()
    response = _post(client, other_producer, unique_for=3600, unique_key="invoice-42")

    assert response.status_code == 201 and response.get_json()["producer"] == "producer-b"


def test_the_hidden_hit_answers_match_the_documented_200s(client, shared_invoice, other_producer):
    document = client.get("/openapi.json").get_json()

    def validate(path: str, response) -> None:
        schema = document["paths"][path]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
        OAS31Validator({**schema, "components": document["components"]}).validate(response.get_json())

    validate("/jobs", _post(client, other_producer, unique_for=3600, unique_key="invoice-42"))
    validate(
        "/jobs/batch", _batch(client, other_producer, {"type": "email", "unique_for": 3600, "unique_key": "invoice-42"})
    )
    assert document["components"]["schemas"]["HiddenDedupeHit"]["required"] == ["deduplicated"]


def test_windows_are_per_producer_again_once_the_type_is_set_back(client, admin, shared, invoice, other_producer):
    shared()
    client.patch("/types/email", json={"unique_scope": "producer"}, headers=admin)

    response = _post(client, other_producer, unique_for=3600, unique_key="invoice-42")

    assert response.status_code == 201 and response.get_json()["producer"] == "producer-b"


# --- no path to another producer's job: depends_on ----------------------------------------------------


def test_v33_a_single_enqueue_depending_on_another_producers_job_is_422(client, invoice, other_producer):
    response = _post(client, other_producer, depends_on=[invoice["id"]])

    problem = assert_problem(response, 422)
    assert [error["pointer"] for error in problem["errors"]] == ["/depends_on/0"]
    assert count_jobs() == 1


def test_v33_a_batch_depending_on_another_producers_job_by_id_is_422(client, invoice, other_producer):
    response = _batch(client, other_producer, {"type": "email"}, {"type": "email", "depends_on": [invoice["id"]]})

    problem = assert_problem(response, 422)
    assert [error["pointer"] for error in problem["errors"]] == ["/jobs/1/depends_on/0"]
    assert count_jobs() == 1


def test_a_batch_ref_names_the_callers_own_new_job(client, other_producer):
    response = _batch(
        client, other_producer, {"type": "email", "ref": "parent"}, {"type": "email", "depends_on": ["parent"]}
    )

    parent, child = response.get_json()["jobs"]
    assert response.status_code == 201 and child["depends_on"] == [parent["id"]]
    assert parent["producer"] == child["producer"] == "producer-b"


def test_v33_a_ref_deduplicated_into_another_producers_job_cannot_be_a_parent(client, shared_invoice, other_producer):
    response = _batch(
        client,
        other_producer,
        {"type": "email", "unique_for": 3600, "unique_key": "invoice-42", "ref": "invoice"},
        {"type": "email", "payload": {"step": "charge"}, "depends_on": ["invoice"]},
    )

    problem = assert_problem(response, 422)
    assert [error["pointer"] for error in problem["errors"]] == ["/jobs/1/depends_on/0"]
    assert "4242" not in _text(response) and "invoice-42" not in _text(response)
    assert count_jobs() == 1


def test_v33_a_ref_through_an_item_in_the_same_window_as_a_hidden_hit_cannot_be_a_parent(
    client, shared_invoice, other_producer
):
    response = _batch(
        client,
        other_producer,
        {"type": "email", "unique_for": 3600, "unique_key": "invoice-42"},
        {"type": "email", "unique_for": 3600, "unique_key": "invoice-42", "ref": "again"},
        {"type": "email", "depends_on": ["again"]},
    )

    problem = assert_problem(response, 422)
    assert [error["pointer"] for error in problem["errors"]] == ["/jobs/2/depends_on/0"]
    assert count_jobs() == 1


def test_a_ref_deduplicated_into_the_callers_own_job_depends_on_that_job(client, producer, invoice):
    response = _batch(
        client,
        producer,
        {**INVOICE, "idempotency_key": None, "ref": "invoice"},
        {"type": "email", "depends_on": ["invoice"]},
    )

    assert response.status_code == 201, response.get_json()
    hit, child = response.get_json()["jobs"]
    assert (hit["id"], hit["deduplicated"]) == (invoice["id"], True)
    assert child["depends_on"] == [invoice["id"]] and child["status"] == "waiting"


def test_a_ref_in_the_same_window_as_the_callers_own_hit_makes_a_child_that_is_decided(client, producer, invoice, run):
    # The ref's item is answered through an earlier item of the batch: the child still waits for that job,
    # and is decided when it completes.
    response = _batch(
        client,
        producer,
        {**INVOICE, "idempotency_key": None},
        {**INVOICE, "idempotency_key": None, "payload": {}, "ref": "again"},
        {"type": "report", "depends_on": ["again"]},
    )
    child = response.get_json()["jobs"][2]
    assert child["depends_on"] == [invoice["id"]]

    run(invoice["id"])

    assert client.get(f"/jobs/{child['id']}", headers=producer).get_json()["status"] == "pending"


# --- an admin's retry of a failed parent ------------------------------------------------------------


def test_v33_an_admins_retry_of_a_failed_parent_shows_no_other_producer_anything(
    client, producer, other_producer, admin, run
):
    parent = _post(client, producer).get_json()
    admins_child = _post(client, admin, depends_on=[parent["id"]]).get_json()
    theirs = _post(client, other_producer, type="report").get_json()
    run(parent["id"], fail=True)

    assert client.post(f"/jobs/{parent['id']}/retry", headers=admin).status_code == 200

    # The admin's child waits again; the parent's producer sees neither it nor its id.
    assert client.get(f"/jobs/{admins_child['id']}", headers=admin).get_json()["status"] == "waiting"
    seen = client.get(f"/jobs/{parent['id']}", headers=producer).get_json()
    assert seen["dependents"] == []
    assert client.get(f"/jobs/{admins_child['id']}", headers=producer).status_code == 404
    # Another producer's job is untouched, and nothing of the parent reaches it.
    assert [row.event for row in event_rows(theirs["id"])] == ["enqueued"]
    assert client.get(f"/jobs/{parent['id']}", headers=other_producer).status_code == 404
    assert client.get(f"/jobs/{parent['id']}/events", headers=other_producer).status_code == 404
