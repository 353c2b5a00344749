"""W3C trace context in the protocol: POST /jobs takes traceparent and tracestate as headers or body fields, each
item of POST /jobs/batch as fields (the headers for items that name none); the job keeps them, and a claim's
answer and GET /jobs/{id} carry them (null when none). Malformed ones are a 422 that points at them."""

from __future__ import annotations

import pytest

from tests.support.factories import pointers

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
OTHER_PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
STATE = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"


def enqueue(client, producer, body: dict | None = None, **headers):
    return client.post("/jobs", json={"type": "email", **(body or {})}, headers={**producer, **headers})


def test_a_job_enqueued_with_trace_headers_carries_them_to_its_claim_and_its_page(client, producer, worker, admin):
    made = enqueue(client, producer, traceparent=PARENT, tracestate=STATE)
    assert made.status_code == 201, made.get_json()
    claimed = client.post("/jobs/claim", json={}, headers=worker).get_json()
    shown = client.get(f"/jobs/{made.get_json()['id']}", headers=admin).get_json()
    for job in (made.get_json(), claimed, shown):
        assert (job["traceparent"], job["tracestate"]) == (PARENT, STATE)


def test_body_fields_give_the_job_its_trace_context(client, producer, worker):
    made = enqueue(client, producer, {"traceparent": PARENT, "tracestate": STATE})
    assert made.status_code == 201, made.get_json()
    claimed = client.post("/jobs/claim", json={}, headers=worker).get_json()
    assert (claimed["traceparent"], claimed["tracestate"]) == (PARENT, STATE)


def test_the_body_field_wins_over_the_header(client, producer):
    made = enqueue(client, producer, {"traceparent": OTHER_PARENT}, traceparent=PARENT, tracestate=STATE)
    assert (made.get_json()["traceparent"], made.get_json()["tracestate"]) == (OTHER_PARENT, None)


def test_a_job_enqueued_without_trace_context_shows_null(client, producer, worker):
    made = enqueue(client, producer)
    claimed = client.post("/jobs/claim", json={}, headers=worker).get_json()
    for job in (made.get_json(), claimed):
        assert job["traceparent"] is None and job["tracestate"] is None


def test_batch_items_take_their_own_fields_and_the_headers_otherwise(client, producer):
    answer = client.post(
        "/jobs/batch",
        json={"jobs": [{"type": "email", "traceparent": OTHER_PARENT}, {"type": "email"}]},
        headers={**producer, "traceparent": PARENT},
    )
    assert answer.status_code == 201, answer.get_json()
    assert [job["traceparent"] for job in answer.get_json()["jobs"]] == [OTHER_PARENT, PARENT]


def test_a_later_version_with_more_fields_is_kept_as_sent(client, producer):
    later = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-next"
    made = enqueue(client, producer, {"traceparent": later})
    assert made.status_code == 201, made.get_json()
    assert made.get_json()["traceparent"] == later


@pytest.mark.parametrize(
    "malformed",
    [
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",  # uppercase
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # all-zero parent id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  # version 00 with more
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",  # no flags
        "",
    ],
)
def test_a_malformed_traceparent_field_is_a_422_at_its_pointer(client, producer, malformed):
    assert pointers(enqueue(client, producer, {"traceparent": malformed})) == {"/traceparent"}


def test_a_malformed_traceparent_header_is_a_422_at_traceparent(client, producer):
    assert pointers(enqueue(client, producer, traceparent="not-a-traceparent")) == {"/traceparent"}


def test_a_malformed_traceparent_of_a_batch_item_points_at_the_item(client, producer):
    answer = client.post(
        "/jobs/batch",
        json={"jobs": [{"type": "email"}, {"type": "email", "traceparent": "00-xyz"}]},
        headers=producer,
    )
    assert pointers(answer) == {"/jobs/1/traceparent"}


def test_a_malformed_tracestate_is_a_422_at_tracestate(client, producer):
    answer = enqueue(client, producer, {"traceparent": PARENT, "tracestate": "no equals sign"})
    assert pointers(answer) == {"/tracestate"}


def test_a_tracestate_field_without_a_traceparent_is_a_422(client, producer):
    assert pointers(enqueue(client, producer, {"tracestate": STATE})) == {"/tracestate"}


def test_a_malformed_tracestate_header_is_a_422_at_tracestate(client, producer):
    assert pointers(enqueue(client, producer, traceparent=PARENT, tracestate="no equals sign")) == {"/tracestate"}


def test_a_tracestate_naming_a_key_twice_is_a_422(client, producer):
    assert pointers(enqueue(client, producer, {"traceparent": PARENT, "tracestate": "a=1,a=2"})) == {"/tracestate"}


def test_a_tracestate_header_without_a_traceparent_is_dropped(client, producer):
    made = enqueue(client, producer, tracestate=STATE)
    assert made.status_code == 201, made.get_json()
    assert made.get_json()["tracestate"] is None


def test_a_replay_in_another_trace_answers_with_the_first_job_and_its_context(client, producer):
    first = enqueue(client, producer, {"idempotency_key": "once"}, traceparent=PARENT)
    again = enqueue(client, producer, {"idempotency_key": "once"}, traceparent=OTHER_PARENT)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.get_json()["id"] == first.get_json()["id"]
    assert again.get_json()["traceparent"] == PARENT


def test_a_malformed_tracestate_header_is_a_422_even_without_a_traceparent(client, producer):
    assert pointers(enqueue(client, producer, tracestate="no equals sign")) == {"/tracestate"}
