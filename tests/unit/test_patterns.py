"""Shared names are written once (queuelog/core/patterns.py, states.py) and parsers hand back frozen values."""

from __future__ import annotations

import dataclasses
import re

import pytest

from queuelog.api import query_params, worker_bodies
from queuelog.api.openapi import shapes
from queuelog.core import patterns
from queuelog.states import STATUS_NAMES
from queuelog.worker import Worker
from tests.support.paths import PACKAGE

SPELLINGS = {
    "the job type pattern": re.escape("A-Za-z0-9_.:-"),
    "the idempotency key pattern": r"\[ -~\]|x20-\\x7e",
    "the priority labels": r"[\"']low[\"'],\s*[\"']medium[\"']|low, medium, high",
    "the status names": r"[\"']pending[\"'],\s*[\"']running[\"']|pending, running, completed",
}


@pytest.mark.parametrize("what", SPELLINGS)
def test_a_shared_name_is_spelled_only_where_it_is_defined(what):
    spelled = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.name not in {"patterns.py", "states.py"} and re.search(SPELLINGS[what], path.read_text(), re.IGNORECASE)
    ]
    assert spelled == [], f"{what} is spelled out in {spelled}: import it from queuelog/core/patterns.py or states.py"


def test_the_openapi_document_quotes_the_patterns_the_server_matches():
    assert shapes.TYPE_PATTERN == patterns.JOB_TYPE_PATTERN
    assert shapes.IDEMPOTENCY_KEY_PATTERN == patterns.IDEMPOTENCY_KEY_PATTERN
    assert list(patterns.PRIORITY_LABELS) == shapes.PRIORITY_LABELS
    assert list(STATUS_NAMES) == shapes.STATUSES
    documented = re.compile(patterns.PRIORITY_LABEL_PATTERN)
    for label in patterns.PRIORITY_LABELS:
        assert (
            documented.fullmatch(label) and documented.fullmatch(label.upper()) and documented.fullmatch(label.title())
        )
    assert not documented.fullmatch(" high") and not documented.fullmatch("highest")


@pytest.mark.parametrize(
    "name, valid",
    [
        ("send-invoice", True),
        ("a.b:c_d", True),
        ("x" * 100, True),
        ("email\n", False),
        ("-lead", False),
        ("x" * 101, False),
        ("has space", False),
    ],
)
def test_the_worker_takes_exactly_the_type_names_the_api_takes(name, valid):
    assert bool(patterns.JOB_TYPE.fullmatch(name)) is valid
    worker = Worker()
    if valid:
        worker.handler(name)(lambda payload: None)
    else:
        with pytest.raises(ValueError, match="not a valid job type name"):
            worker.handler(name)


@pytest.mark.parametrize(
    "parse, path, body, expected",
    [
        (
            lambda: worker_bodies.parse_claim("w"),
            "/jobs/claim",
            {"types": ["email"], "limit": 2, "wait": 1},
            worker_bodies.ClaimRequest(types=("email",), lease_seconds=None, limit=2, wait=1.0),
        ),
        (
            worker_bodies.parse_complete,
            "/jobs/1/complete",
            {"claim_token": "t", "result": {"ok": True}},
            worker_bodies.CompleteRequest(token="t", result={"ok": True}),
        ),
        (
            worker_bodies.parse_complete_batch,
            "/jobs/complete",
            {"jobs": [{"id": 3, "claim_token": "t"}]},
            [worker_bodies.CompleteItem(id=3, token="t", result=None)],
        ),
        (
            worker_bodies.parse_fail,
            "/jobs/1/fail",
            {"claim_token": "t", "error": "boom"},
            worker_bodies.FailRequest(token="t", error="boom", retryable=True),
        ),
        (
            worker_bodies.parse_heartbeat,
            "/jobs/1/heartbeat",
            {"claim_token": "t", "lease_seconds": 60},
            worker_bodies.HeartbeatRequest(token="t", lease_seconds=60),
        ),
        (worker_bodies.parse_release, "/jobs/1/release", {"claim_token": "t"}, worker_bodies.ReleaseRequest(token="t")),
    ],
)
def test_a_parser_returns_a_frozen_value(app, parse, path, body, expected):
    with app.test_request_context(path, method="POST", json=body):
        parsed = parse()
    assert parsed == expected
    value = parsed[0] if isinstance(parsed, list) else parsed
    assert dataclasses.is_dataclass(value)
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.token = "other"  # type: ignore[misc]


def test_the_list_query_is_a_frozen_value(app):
    with app.test_request_context("/jobs?status=failed&priority=HIGH&limit=5"):
        query = query_params.parse_list_query()
    assert query == query_params.ListQuery(
        status="failed", type=None, priority=patterns.Priority.HIGH.value, worker_id=None, limit=5, cursor=None
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        query.limit = 500  # type: ignore[misc]
