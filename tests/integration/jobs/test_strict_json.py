"""Numbers a double cannot hold are refused anywhere in any body (400), so no answer ever carries
``Infinity``; and the check every test's answers go through (tests/support/strict_json.py) does catch one."""

from __future__ import annotations

import json
import sys

import pytest
from flask import Response

from tests.support.factories import assert_problem, count_jobs
from tests.support.strict_json import NotStrictJSONAnswer

JSON = "application/json"
BEYOND_A_DOUBLE = [
    "1e400",
    "-1e400",
    "1.8e308",
    "2E+308",
    "1" + "0" * 309,  # an integer literal past the largest double (1.79…e308)
    "-" + "9" * 309,
    "1" + "0" * 5000,  # past Python's own 4300-digit limit for int()
]


def post_raw(client, path: str, text: str, headers: dict):
    return client.post(path, data=text, content_type=JSON, headers=headers)


def out_of_range_problem(response) -> dict:
    problem = assert_problem(response, 400)
    assert "outside the finite range of a double" in problem["detail"], problem
    return problem


@pytest.mark.parametrize("number", BEYOND_A_DOUBLE)
def test_a_payload_number_beyond_a_double_is_400_and_enqueues_nothing(client, producer, number):
    response = post_raw(client, "/jobs", f'{{"type": "email", "payload": {{"x": {number}}}}}', producer)
    problem = out_of_range_problem(response)
    assert [error["pointer"] for error in problem["errors"]] == ["/payload/x"]
    assert count_jobs() == 0


def test_each_number_beyond_a_double_is_named_by_its_pointer(client, producer):
    text = '{"type": "email", "payload": {"a": [1, {"b": 1e400}], "c/d~e": -1e999, "ok": 1e308}}'
    problem = out_of_range_problem(post_raw(client, "/jobs", text, producer))
    assert [error["pointer"] for error in problem["errors"]] == ["/payload/a/1/b", "/payload/c~1d~0e"]


def test_a_batch_with_one_number_beyond_a_double_enqueues_nothing(client, producer):
    text = '{"jobs": [{"type": "email"}, {"type": "email", "payload": {"n": 1e400}}]}'
    problem = out_of_range_problem(post_raw(client, "/jobs/batch", text, producer))
    assert [error["pointer"] for error in problem["errors"]] == ["/jobs/1/payload/n"]
    assert count_jobs() == 0


def test_a_result_number_beyond_a_double_is_400_and_the_job_stays_running(client, worker, make_job, read_job):
    job_id = make_job(status="running")
    text = '{"claim_token": "token-a", "result": {"total": 1e400}}'
    problem = out_of_range_problem(post_raw(client, f"/jobs/{job_id}/complete", text, worker))
    assert [error["pointer"] for error in problem["errors"]] == ["/result/total"]
    row = read_job(job_id)
    assert (row.status, row.result) == ("running", None)


def test_a_batch_complete_with_a_result_beyond_a_double_completes_nothing(client, worker, make_job, read_job):
    job_id = make_job(status="running")
    text = f'{{"jobs": [{{"id": {job_id}, "claim_token": "token-a", "result": {{"r": [-1e400]}}}}]}}'
    problem = out_of_range_problem(post_raw(client, "/jobs/complete", text, worker))
    assert [error["pointer"] for error in problem["errors"]] == ["/jobs/0/result/r/0"]
    assert read_job(job_id).status == "running"


@pytest.mark.parametrize(
    "path, text",
    [
        ("/jobs/claim", '{"wait": 1e400}'),
        ("/jobs/claim", '{"lease_seconds": 1e400}'),
        ("/jobs/claim", '{"limit": ' + "9" * 400 + "}"),
    ],
)
def test_claim_numbers_beyond_a_double_are_400(client, worker, enqueue, read_job, path, text):
    job = enqueue()
    out_of_range_problem(post_raw(client, path, text, worker))
    assert read_job(job["id"]).status == "pending"


def test_a_heartbeat_lease_beyond_a_double_is_400(client, worker, make_job, read_job):
    job_id = make_job(status="running")
    before = read_job(job_id).lease_expires_at
    out_of_range_problem(
        post_raw(client, f"/jobs/{job_id}/heartbeat", '{"claim_token": "token-a", "lease_seconds": 1e400}', worker)
    )
    assert read_job(job_id).lease_expires_at == before


def test_the_largest_and_smallest_doubles_are_stored_and_served_back_as_they_came(client, producer, admin):
    largest = sys.float_info.max
    text = json.dumps(
        {"type": "email", "payload": {"max": largest, "min": -largest, "tiny": 5e-324, "big_int": int(largest)}}
    )
    response = post_raw(client, "/jobs", text, producer)
    assert response.status_code == 201, response.get_json()
    payload = client.get(f"/jobs/{response.get_json()['id']}", headers=admin).get_json()["payload"]
    assert payload == {"max": largest, "min": -largest, "tiny": 5e-324, "big_int": int(largest)}


# --- the suite-wide check itself -----------------------------------------------------------------


@pytest.mark.parametrize(
    "body, content_type",
    [
        ('{"x": Infinity}', "application/json"),
        ('{"x": -Infinity}', "application/json"),
        ('{"x": NaN}', "application/problem+json"),
        ('{"x": 1e400}', "application/json; charset=utf-8"),
        ('{"x": ' + "1" * 400 + "}", "application/json"),
        (b'{"x": "\xff"}', "application/json"),
        ("", "application/json"),
    ],
)
def test_the_suite_fails_any_request_answered_with_json_a_strict_parser_refuses(app, client, body, content_type):
    app.add_url_rule("/test-not-strict-json", "not_strict_json", lambda: Response(body, content_type=content_type))
    with pytest.raises(NotStrictJSONAnswer):
        client.get("/test-not-strict-json")


def test_the_suite_lets_strict_json_and_other_media_types_through(app, client):
    app.add_url_rule("/test-strict-json", "strict_json", lambda: Response('{"x": 1e308}', content_type=JSON))
    app.add_url_rule("/test-plain-text", "plain_text", lambda: Response("Infinity", content_type="text/plain"))
    assert client.get("/test-strict-json").get_json() == {"x": 1e308}
    assert client.get("/test-plain-text").get_data(as_text=True) == "Infinity"
