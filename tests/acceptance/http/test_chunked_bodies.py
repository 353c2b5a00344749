"""A body sent chunked (Transfer-Encoding: chunked, no Content-Length) is held to the same 1 MiB as any other.

Werkzeug stops reading such a stream at MAX_CONTENT_LENGTH and hands over what it read as if it were the
whole body, so a chunked body of 1 MiB and a bit used to be cut at 1 MiB and its first MiB enqueued (201).
These tests send real chunked requests to the servers the README names: gunicorn as Production runs it
(gthread workers), and Werkzeug's development server behind ``flask run``.
"""

from __future__ import annotations

import http.client
import json
import threading

import pytest
from werkzeug.serving import make_server

from tests.support.factories import count_jobs
from tests.support.pg_cluster import free_port

pytestmark = pytest.mark.shared_server  # one gunicorn for the module: starting one per test took ~7 s

MIB = 1024 * 1024
# "ok": a type of the shared server (tests/worker_apps/harness.py JOB_TYPES)
JOB = json.dumps({"type": "ok", "payload": {"invoice_id": 42}}).encode()


def chunked_post(port: int, secret: str, body: bytes, chunk_size: int = 64 * 1024) -> tuple[int, str, dict]:
    """POST /jobs with ``body`` sent in chunks; returns (status, content type, parsed answer)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        chunks = (body[start : start + chunk_size] for start in range(0, len(body), chunk_size))
        connection.request(
            "POST",
            "/jobs",
            body=chunks,
            encode_chunked=True,
            headers={
                "Authorization": f"Bearer {secret}",
                "Content-Type": "application/json",
                "Transfer-Encoding": "chunked",
            },
        )
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type"), json.loads(response.read())
    finally:
        connection.close()


def sized_post(port: int, secret: str, body: bytes) -> tuple[int, str, dict]:
    """POST /jobs with ``body`` and its Content-Length, all sent before the answer is read."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request(
            "POST",
            "/jobs",
            body=body,
            headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
        )
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type"), json.loads(response.read())
    finally:
        connection.close()


def padded_to(size: int) -> bytes:
    """A valid enqueue body padded with trailing spaces to ``size`` bytes: its first MiB alone is valid JSON."""
    return JOB + b" " * (size - len(JOB))


@pytest.fixture
def gunicorn(server):
    """gunicorn with gthread workers, as the README's Production section runs it: the module's shared server
    (tests/worker_apps/harness.py), on the test's emptied database."""
    return server.port


@pytest.fixture
def dev_server(app):
    """Werkzeug's development server (what ``flask run`` serves with), in a thread."""
    server = make_server("127.0.0.1", free_port(), app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_port
    server.shutdown()
    thread.join(timeout=10)


@pytest.fixture(params=["gunicorn", "dev_server"])
def port(request):
    return request.getfixturevalue(request.param)


@pytest.mark.parametrize("size", [MIB + 1, MIB + 4096, 2 * MIB, 8 * MIB])
def test_a_chunked_body_over_1_mib_is_413_and_enqueues_nothing(port, make_key, size):
    status, content_type, problem = chunked_post(port, make_key("producer"), padded_to(size))
    assert (status, content_type) == (413, "application/problem+json"), problem
    assert problem["status"] == 413 and "1048576" in problem["detail"]
    assert count_jobs() == 0


@pytest.mark.parametrize("size", [len(JOB), MIB])
def test_a_chunked_body_up_to_1_mib_is_enqueued(port, make_key, size):
    status, _, job = chunked_post(port, make_key("producer"), padded_to(size))
    assert status == 201, job
    assert job["payload"] == {"invoice_id": 42}
    assert count_jobs() == 1


@pytest.mark.parametrize("size", [2 * MIB, 8 * MIB])
def test_a_client_still_sending_a_body_over_1_mib_reads_the_413_not_a_reset(port, make_key, size):
    # The 413 is decided from the Content-Length before a byte is read; the server reads the rest before
    # answering, or the client, still writing, would get a reset connection instead of the answer.
    status, content_type, problem = sized_post(port, make_key("producer"), padded_to(size))
    assert (status, content_type) == (413, "application/problem+json"), problem
    assert count_jobs() == 0
