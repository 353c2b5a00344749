"""Schemathesis against the app: whatever a client sends, no server error and every answer matches
/openapi.json (documented status, content type, body and headers); invalid input is refused.

Each generated request is sent with an admin, a producer and a worker key, so both the allowed and
the refused (403) answers of every operation are checked. The database holds jobs in every state,
so that small job ids mostly exist.
"""
import os

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from queuelog.api.openapi import paths

# 30 per operation and mode keeps a run under a minute; raise it for a deeper hunt.
MAX_EXAMPLES = int(os.environ.get("QUEUELOG_SCHEMATHESIS_EXAMPLES", "30"))
# positive_data_acceptance is left out on purpose: a valid-looking request may still be refused for
# reasons no schema can say (an idempotency key reused for another request, a header key that
# differs from the body's, a worker_id that is not the key's name, a forged cursor).
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance, negative_data_rejection]
# Every documented operation, with valid (positive) and invalid (negative) requests; GET /openapi.json
# takes no input at all, so there is nothing invalid to send it.
CASES = [pytest.param(f"{method.upper()} {path}", mode, id=f"{method.upper()} {path} {mode}")
         for path, item in paths().items() for method in item
         for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
         if mode.is_positive or path != "/openapi.json"]


@pytest.fixture
def seeded_jobs(make_job):
    """A few jobs in every state, some held by the test worker key (worker-a)."""
    for status in ("pending", "running", "completed", "failed", "cancelled") * 2:
        make_job(status=status, payload={"n": 1}, error="boom" if status == "failed" else None)


def keep_long_polls_short(case) -> None:
    """A valid ``wait`` holds the request up to 30 s; the answer's shape is the same after 0 s (a claim) or
    a hundredth of a second (GET /jobs/{id}, whose wait must be above 0)."""
    wait = case.body.get("wait") if isinstance(case.body, dict) else None
    if isinstance(wait, (int, float)) and not isinstance(wait, bool) and 0 <= wait <= 30:
        case.body["wait"] = 0
    query_wait = case.query.get("wait") if isinstance(case.query, dict) else None
    if isinstance(query_wait, (int, float)) and not isinstance(query_wait, bool) and 0 < query_wait <= 30:
        case.query["wait"] = 0.01


# Parametrised here rather than with schemathesis' own schema.parametrize(), whose pytest plugin
# (schemathesis 4.x) fails on pytest 9 (it rewrites the test item's removed ``_nodeid``).
@pytest.mark.parametrize("label, mode", CASES)
def test_every_answer_matches_the_document(app, seeded_jobs, admin, producer, worker, label, mode):
    method, path = label.split(" ", 1)
    operation = schemathesis.openapi.from_wsgi("/openapi.json", app)[path][method]

    @given(case=operation.as_strategy(mode))
    @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def each_request(case):
        keep_long_polls_short(case)
        for headers in (admin, producer, worker):
            case.call_and_validate(headers=headers, checks=CHECKS)

    each_request()


# Inputs on which the server and the document used to disagree (each was accepted, or a 500, where
# the document says 422); pinned here so they stay fixed.
DOCUMENTED_AS_INVALID = [
    pytest.param("/jobs", "producer", {"type": "email", "idempotency_key": "key\n"}, id="key-trailing-newline"),
    pytest.param("/jobs", "producer", {"type": "email", "priority": " low "}, id="priority-with-spaces"),
    pytest.param("/jobs", "admin", {"type": "email", "priority": "h\u0131gh"}, id="priority-dotless-i"),
    pytest.param("/jobs/claim", "worker", {"types": ["email\n"]}, id="claim-type-trailing-newline"),
    pytest.param("/jobs/1/complete", "worker", {"claim_token": "\ud800"}, id="token-lone-surrogate"),
]


@pytest.mark.parametrize("path, who, body", DOCUMENTED_AS_INVALID)
def test_input_the_document_calls_invalid_is_refused_with_422(client, producer, worker, admin, path, who, body):
    headers = {"producer": producer, "worker": worker, "admin": admin}[who]
    response = client.post(path, json=body, headers=headers)
    assert response.status_code == 422, response.get_json()
    assert response.mimetype == "application/problem+json"


def test_a_list_limit_must_be_plain_digits(client, admin):
    assert client.get("/jobs?limit=5_0", headers=admin).status_code == 422
    assert client.get("/jobs?limit=50", headers=admin).status_code == 200


def test_an_integral_number_is_an_integer_as_json_schema_says(client, producer):
    response = client.post("/jobs", json={"type": "email", "max_retries": 2.0}, headers=producer)
    assert response.status_code == 201, response.get_json()
    assert response.get_json()["max_retries"] == 2
