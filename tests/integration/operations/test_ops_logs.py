"""Request and state-change log lines: their fields, the request id, the JSON format, and no secrets."""

from __future__ import annotations

import json
import logging
import os
import re

import pytest

from queuelog import create_app
from queuelog.extensions import db
from queuelog.ops.logging_setup import JsonFormatter, configure_logging
from tests.support.api import bearer
from tests.support.database import app_config

PAYLOAD_SECRET = "4111-1111-PAYLOAD-SECRET"
RESULT_SECRET = "RESULT-SECRET-VALUE"


@pytest.fixture
def records(caplog):
    """The structured log records queuelog wrote: [(logger name, fields)]."""
    caplog.set_level(logging.INFO, logger="queuelog")

    def _records(name: str | None = None):
        return [
            (r.name, r.queuelog_fields)
            for r in caplog.records
            if hasattr(r, "queuelog_fields") and (name is None or r.name == name)
        ]

    return _records


@pytest.fixture
def json_logs(app):
    """Switch the app to JSON lines for one test, and back."""
    configure_logging("json")
    yield
    configure_logging(app.config["LOG_FORMAT"])


def stderr_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_each_request_logs_one_line_with_its_fields(client, producer, records):
    response = client.post("/jobs", json={"type": "email"}, headers=producer)
    lines = records("queuelog.request")
    assert len(lines) == 1
    fields = lines[0][1]
    assert fields["method"] == "POST" and fields["path"] == "/jobs" and fields["status"] == 201
    assert fields["key"] == "producer-a"
    assert isinstance(fields["duration_ms"], float) and fields["duration_ms"] >= 0
    assert fields["request_id"] == response.headers["X-Request-Id"]


def test_a_request_without_a_key_logs_no_key_name(client, records):
    client.get("/jobs")
    [(_, fields)] = records("queuelog.request")
    assert fields["status"] == 401 and fields["key"] is None


def test_a_valid_request_id_is_echoed_and_logged(client, producer, records):
    response = client.get("/jobs", headers={**producer, "X-Request-Id": "trace-4bf92f3577b34da6:00f067aa"})
    assert response.headers["X-Request-Id"] == "trace-4bf92f3577b34da6:00f067aa"
    assert records("queuelog.request")[0][1]["request_id"] == "trace-4bf92f3577b34da6:00f067aa"


def test_a_request_id_is_generated_when_none_is_sent(client):
    first = client.get("/healthz").headers["X-Request-Id"]
    second = client.get("/healthz").headers["X-Request-Id"]
    assert re.fullmatch(r"[0-9a-f]{32}", first) and first != second


@pytest.mark.parametrize("offered", ["has space", "x" * 129, "semi;colon", 'quote"d', "ünïcode", ""])
def test_an_unsafe_request_id_is_replaced(client, records, offered):
    response = client.get("/healthz", headers={"X-Request-Id": offered})
    assert re.fullmatch(r"[0-9a-f]{32}", response.headers["X-Request-Id"])
    assert records("queuelog.request")[0][1]["request_id"] == response.headers["X-Request-Id"]


def test_state_changes_log_one_line_each_with_the_request_id(client, worker, enqueue, claim, records):
    job = enqueue(type="report")
    response = client.post("/jobs/claim", headers={**worker, "X-Request-Id": "claim-1"})
    changes = [fields for _, fields in records("queuelog.jobs")]
    assert [(c["event"], c["from"], c["to"]) for c in changes] == [
        ("enqueued", None, "pending"),
        ("claimed", "pending", "running"),
    ]
    claimed = changes[1]
    assert claimed["job_id"] == job["id"] == response.get_json()["id"]
    assert claimed["type"] == "report" and claimed["actor"] == "key:worker-a"
    assert claimed["request_id"] == "claim-1"


def test_text_lines_are_one_line_key_value(client, producer, capsys):
    capsys.readouterr()
    client.get("/jobs/%0Aforged%20line", headers=producer)
    [line] = stderr_lines(capsys)
    assert re.match(r"^\d{4}-\d\d-\d\dT[\d:.]+Z INFO queuelog\.request request method=GET ", line)
    assert 'path="/jobs/\\nforged line"' in line and "status=404" in line


def test_json_format_writes_one_json_object_per_line(client, producer, json_logs, capsys):
    capsys.readouterr()
    client.post("/jobs", json={"type": "email"}, headers={**producer, "X-Request-Id": "json-1"})
    lines = [json.loads(line) for line in stderr_lines(capsys)]
    assert [line["message"] for line in lines] == ["job_changed", "request"]
    request_line = lines[1]
    assert request_line["level"] == "info" and request_line["logger"] == "queuelog.request"
    assert {key: request_line[key] for key in ("method", "path", "status", "key", "request_id")} == {
        "method": "POST",
        "path": "/jobs",
        "status": 201,
        "key": "producer-a",
        "request_id": "json-1",
    }
    assert request_line["time"].endswith("Z") and isinstance(request_line["duration_ms"], float)
    assert lines[0]["event"] == "enqueued" and lines[0]["request_id"] == "json-1"


def test_text_lines_end_with_the_server_process_id(client, producer, capsys):
    capsys.readouterr()
    client.post("/jobs", json={"type": "email"}, headers=producer)
    lines = stderr_lines(capsys)
    assert len(lines) == 2 and all(line.endswith(f" pid={os.getpid()}") for line in lines)


def test_json_lines_carry_the_server_process_id(client, producer, json_logs, capsys):
    capsys.readouterr()
    client.post("/jobs", json={"type": "email"}, headers=producer)
    lines = [json.loads(line) for line in stderr_lines(capsys)]
    assert [line["pid"] for line in lines] == [os.getpid(), os.getpid()]


def test_json_format_is_chosen_by_config(database_url):
    application = create_app(app_config(database_url, LOG_FORMAT="json"))
    with application.app_context():
        db.engine.dispose()
    handlers = [h for h in logging.getLogger("queuelog").handlers if isinstance(h.formatter, JsonFormatter)]
    configure_logging("text")
    assert len(handlers) == 1


def test_an_unknown_log_format_stops_the_app_from_starting(database_url):
    with pytest.raises(ValueError, match="LOG_FORMAT"):
        create_app(app_config(database_url, LOG_FORMAT="xml"))
    configure_logging("text")


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_logs_hold_no_secrets_or_payloads(app, client, make_key, capsys, caplog, log_format):
    configure_logging(log_format)
    caplog.set_level(logging.INFO, logger="queuelog")
    producer_secret, worker_secret = make_key("producer"), make_key("worker")
    capsys.readouterr()
    client.post(
        "/jobs",
        json={"type": "email", "payload": {"card": PAYLOAD_SECRET}, "idempotency_key": "idem-7"},
        headers=bearer(producer_secret),
    )
    job = client.post("/jobs/claim", headers=bearer(worker_secret)).get_json()
    client.post(
        f"/jobs/{job['id']}/fail",
        headers=bearer(worker_secret),
        json={"claim_token": job["claim_token"], "error": "db password=hunter2 refused"},
    )
    job = client.post("/jobs/claim", headers=bearer(worker_secret)).get_json()
    client.post(
        f"/jobs/{job['id']}/complete",
        headers=bearer(worker_secret),
        json={"claim_token": job["claim_token"], "result": {"note": RESULT_SECRET}},
    )
    client.get(f"/jobs?cursor={producer_secret}", headers=bearer(producer_secret))
    client.get(f"/jobs/{producer_secret}", headers=bearer("ql_wrong" + "x" * 30))
    written = capsys.readouterr().err + caplog.text
    configure_logging(app.config["LOG_FORMAT"])

    assert "request" in written and "job_changed" in written
    for secret in (
        producer_secret,
        worker_secret,
        job["claim_token"],
        PAYLOAD_SECRET,
        RESULT_SECRET,
        "hunter2",
        "idem-7",
        "Bearer",
        "Authorization",
        "ql_wrong",
    ):
        assert secret not in written, secret
