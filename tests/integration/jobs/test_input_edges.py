"""Inputs at the edge of the contract: what a body must be sent as, which job types a claim or a key may
name, and which characters an idempotency key may hold."""

from __future__ import annotations

import html
import re

import pytest

from queuelog.api.openapi import shapes
from queuelog.core import patterns
from tests.support.api import bearer
from tests.support.factories import assert_problem, count_jobs, pointers
from tests.support.ui import post_form, text_of

# Each request runs in its own app context, as on a server (tests/support/ui.py).
pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")

JOB_BODY = b'{"type": "email", "payload": {"invoice_id": 42}}'

# --- item 11: a body is JSON only when it says so ------------------------------------------------

NOT_JSON_CONTENT_TYPES = [
    "text/plain",
    "text/plain; charset=utf-8",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=xyz",
    "application/xml",
    "application/jsonx",
    "text/json",
]


@pytest.mark.parametrize("content_type", NOT_JSON_CONTENT_TYPES)
def test_an_enqueue_body_sent_as_another_media_type_is_415_and_enqueues_nothing(client, producer, content_type):
    response = client.post("/jobs", data=JOB_BODY, headers={**producer, "Content-Type": content_type})
    problem = assert_problem(response, 415)
    assert "application/json" in problem["detail"]
    assert count_jobs() == 0


def test_a_body_without_a_content_type_is_415(client, producer):
    response = client.post("/jobs", data=JOB_BODY, headers=producer)
    assert "Content-Type" not in response.request.headers or not response.request.headers["Content-Type"]
    assert_problem(response, 415)
    assert count_jobs() == 0


def test_a_body_with_an_empty_content_type_is_415(client, producer):
    assert_problem(client.post("/jobs", data=JOB_BODY, headers={**producer, "Content-Type": ""}), 415)
    assert count_jobs() == 0


@pytest.mark.parametrize(
    "path, who, body",
    [
        ("/jobs/batch", "producer", b'{"jobs": [{"type": "email"}]}'),
        ("/jobs/claim", "worker", b'{"types": ["email"]}'),
        ("/jobs/complete", "worker", b'{"jobs": [{"id": 1, "claim_token": "t"}]}'),
    ],
)
def test_every_body_taking_route_refuses_a_form_encoded_body_with_415(client, request, path, who, body):
    headers = {**request.getfixturevalue(who), "Content-Type": "application/x-www-form-urlencoded"}
    assert_problem(client.post(path, data=body, headers=headers), 415)


def test_a_held_jobs_action_refuses_a_text_plain_body_and_leaves_the_job_running(client, worker, make_job, read_job):
    job_id = make_job(status="running")
    body = b'{"claim_token": "token-a", "result": {"ok": true}}'
    response = client.post(f"/jobs/{job_id}/complete", data=body, headers={**worker, "Content-Type": "text/plain"})
    assert_problem(response, 415)
    assert read_job(job_id).status == "running"


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/json; charset=utf-8", "Application/JSON", "application/merge-patch+json"],
)
def test_json_media_types_are_accepted(client, producer, content_type):
    response = client.post("/jobs", data=JOB_BODY, headers={**producer, "Content-Type": content_type})
    assert response.status_code == 201, response.get_json()


def test_an_empty_claim_needs_no_content_type(client, worker, enqueue):
    job = enqueue()
    response = client.post("/jobs/claim", headers=worker)  # curl -X POST with no -d: no body, no Content-Type
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["id"] == job["id"]


def test_an_empty_cancel_needs_no_content_type(client, producer, enqueue):
    job = enqueue()
    response = client.post(f"/jobs/{job['id']}/cancel", headers=producer)
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["status"] == "cancelled"


def test_an_empty_retry_needs_no_content_type(client, admin, make_job):
    job_id = make_job(status="failed")
    response = client.post(f"/jobs/{job_id}/retry", headers=admin)
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["status"] == "pending"


@pytest.mark.parametrize("body", ["\n", " \t\r\n", "\x0c", "\x0b", " \x0c\n"])
def test_a_body_of_whitespace_alone_is_malformed_json_not_an_empty_body(client, worker, admin, enqueue, body):
    job = enqueue()
    response = client.post("/jobs/claim", data=body, content_type="application/json", headers=worker)
    assert response.status_code == 400, response.get_json()
    assert response.content_type == "application/problem+json"
    assert client.get(f"/jobs/{job['id']}", headers=admin).get_json()["status"] == "pending"


def test_a_body_of_no_bytes_with_a_json_content_type_is_an_empty_body(client, worker, enqueue):
    job = enqueue()
    response = client.post("/jobs/claim", data=b"", content_type="application/json", headers=worker)
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["id"] == job["id"]


# --- item 11: job types outside QUEUELOG_JOB_TYPES are refused, not waited for ---------------------


def test_a_claim_naming_a_type_off_the_allowlist_is_422_with_a_pointer(client, worker):
    response = client.post("/jobs/claim", json={"types": ["email", "send-invoice"]}, headers=worker)
    assert pointers(response) == {"/types/1"}
    assert "send-invoice" in response.get_json()["detail"]


def test_a_long_poll_naming_a_type_off_the_allowlist_is_refused_at_once(client, worker):
    response = client.post("/jobs/claim", json={"types": ["typo"], "wait": 30}, headers=worker)
    assert pointers(response) == {"/types/0"}


def test_keys_create_refuses_a_type_off_the_allowlist(runner):
    result = runner.invoke(args=["keys", "create", "invoicer", "--role", "worker", "--types", "email,send-invoice"])
    assert result.exit_code != 0
    assert "send-invoice" in result.output and "QUEUELOG_JOB_TYPES" in result.output
    assert "Traceback" not in result.output
    assert "ql_" not in result.stdout
    assert runner.invoke(args=["keys", "list"]).stdout.count("\n") == 1  # the header row alone: no key made


def test_keys_create_still_takes_types_on_the_allowlist(runner, client):
    result = runner.invoke(args=["keys", "create", "reporter", "--role", "worker", "--types", "report, noop"])
    assert result.exit_code == 0, result.output
    claimed = client.post("/jobs/claim", json={"types": ["report"]}, headers=bearer(result.stdout.strip()))
    assert claimed.status_code == 204


def test_the_keys_page_refuses_a_type_off_the_allowlist(signed_in):
    response = post_form(
        signed_in,
        "/admin/keys",
        {"name": "invoicer", "role": "worker", "max_priority": "", "types": "email, send-invoice"},
        page="/admin/keys",
    )
    assert response.status_code == 400
    body = html.unescape(text_of(response))
    assert "send-invoice" in body and "QUEUELOG_JOB_TYPES" in body
    assert 'data-key="invoicer"' not in body and "data-secret" not in body


# --- item 12: idempotency keys are printable ASCII, space included -------------------------------


def test_an_idempotency_key_with_spaces_replays_its_job(client, producer):
    body = {"type": "email", "idempotency_key": "invoice 42 / March"}
    first = client.post("/jobs", json=body, headers=producer)
    again = client.post("/jobs", json=body, headers=producer)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.get_json()["id"] == first.get_json()["id"]
    assert again.get_json()["idempotency_key"] == "invoice 42 / March"
    assert count_jobs() == 1


def test_an_idempotency_key_header_with_spaces_is_accepted(client, producer):
    headers = {**producer, "Idempotency-Key": "order 7 attempt 1"}
    first = client.post("/jobs", json={"type": "email"}, headers=headers)
    again = client.post("/jobs", json={"type": "email"}, headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.get_json()["idempotency_key"] == "order 7 attempt 1"


def test_every_printable_ascii_character_is_accepted_in_an_idempotency_key(client, producer):
    key = "".join(chr(code) for code in range(0x20, 0x7F))
    response = client.post("/jobs", json={"type": "email", "idempotency_key": key}, headers=producer)
    assert response.status_code == 201, response.get_json()
    assert response.get_json()["idempotency_key"] == key


@pytest.mark.parametrize("key", ["", "tab\there", "new\nline", "del\x7f", "caf\u00e9", "x" * 201])
def test_an_idempotency_key_outside_printable_ascii_is_422(client, producer, key):
    response = client.post("/jobs", json={"type": "email", "idempotency_key": key}, headers=producer)
    assert pointers(response) == {"/idempotency_key"}
    assert "printable ASCII" in response.get_json()["errors"][0]["detail"]
    assert count_jobs() == 0


def test_the_openapi_pattern_is_the_one_the_server_matches_and_takes_exactly_printable_ascii():
    assert shapes.IDEMPOTENCY_KEY_PATTERN == patterns.IDEMPOTENCY_KEY_PATTERN
    documented = re.compile(shapes.IDEMPOTENCY_KEY_PATTERN)
    for code in range(0x00, 0x100):
        char = chr(code)
        assert bool(documented.fullmatch(char)) == (0x20 <= code <= 0x7E), hex(code)
    assert documented.fullmatch("a b") and not documented.fullmatch("x" * 201)


@pytest.mark.parametrize("field", ["run_at", "expires_at"])
@pytest.mark.parametrize("sent", ["0001-01-01T00:00:00+06:06", "9999-12-31T23:59:59-05:00"])
def test_a_time_an_offset_carries_past_year_1_or_9999_is_refused_as_out_of_range_not_malformed(
    client, producer, field, sent
):
    response = client.post("/jobs", json={"type": "email", field: sent}, headers=producer)
    assert response.status_code == 422
    assert response.get_json()["errors"] == [
        {"pointer": f"/{field}", "detail": "must fall within the years 1 to 9999 once converted to UTC"}
    ]
