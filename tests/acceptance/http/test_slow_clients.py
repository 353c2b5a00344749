"""Slow clients: a request head begun and never finished must not hold the server's threads.

gunicorn hands a connection to a thread as soon as its first bytes arrive, and the thread then waits
for the rest of the head: 64 connections that sent half a head made every producer time out under
the README's production command. queuelog's gunicorn worker collects a head as it arrives and gives
the request to a thread only once the head is complete (queuelog/serving.py).
"""

from __future__ import annotations

import select
import socket
import time

import pytest

from queuelog.serving import BODY_TIMEOUT_SECONDS, HEAD_TIMEOUT_SECONDS, MAX_HEAD_BYTES
from tests.support.database import JOB_TYPES
from tests.support.latency import allowed_p99, enqueue_steadily
from tests.support.server import running_server

#: With workers=4, the README's production command: gunicorn --workers 4 --threads 8.
PRODUCTION_ARGS = ("--threads", "8")
SLOW_CLIENTS = 64
HALF_A_HEAD = b"POST /jobs HTTP/1.1\r\nHost: queue.example.com\r\nContent-Type: application/json\r\n"


# One server for the module (each test opens its own connections and closes them; the database is emptied
# between tests): a production server starts five processes.
pytestmark = pytest.mark.shared_server


@pytest.fixture
def shared_server_settings():
    """The test app sees the server's settings: the suite's defaults."""
    return {}


@pytest.fixture(scope="module")
def production_server(shared_database_url):
    env = {
        "QUEUELOG_DATABASE_URL": shared_database_url,
        "QUEUELOG_JOB_TYPES": ",".join(JOB_TYPES),
        "QUEUELOG_SECRET_KEY": "test-secret-key",
    }
    with running_server(env, workers=4, extra_args=PRODUCTION_ARGS) as srv:
        yield srv


@pytest.fixture
def server(production_server, app):
    """The module's server, with the test's app (keys, rows) on its emptied database."""
    return production_server


def open_slow_client(server, first_bytes: bytes = HALF_A_HEAD) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    sock.sendall(first_bytes)
    return sock


def _readable_within(sock: socket.socket, seconds: float) -> bool:
    """Has the server sent something (or closed) within ``seconds``? poll(), not select(): a pytest process that
    has run many tests may hold descriptors past select()'s limit of 1024."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(seconds * 1000))


def answer_or_close(sock: socket.socket, timeout: float) -> bytes:
    """What the server sends before it closes the connection (b"" if it just closes); waits ``timeout`` s."""
    sock.settimeout(timeout)
    received = b""
    while True:
        chunk = sock.recv(65536)  # socket.timeout (a failure) if the server keeps it open
        if not chunk:
            return received
        received += chunk


# Compares latencies, so it runs alone (pyproject markers). The other tests wait for a timeout of the server's own,
# with seconds of leeway, and run beside the rest.
@pytest.mark.serial
def test_64_unfinished_request_heads_do_not_starve_producers(server, make_key):
    keys = [make_key("producer", "producer")]
    # A new connection per enqueue: any server process may get it, however many slow clients it has.
    baseline = enqueue_steadily(server.url, keys, 40, 0.1, "email", new_connection_each_time=True)
    slow = [open_slow_client(server) for _ in range(SLOW_CLIENTS)]
    try:
        time.sleep(1)  # every server process has some by now
        loaded = enqueue_steadily(server.url, keys, 40, 0.1, "email", new_connection_each_time=True)
    finally:
        for sock in slow:
            sock.close()
    print(
        f"\nenqueue on the idle server: {baseline.summary()}"
        f"\nenqueue with {SLOW_CLIENTS} unfinished heads open: {loaded.summary()}"
    )
    assert loaded.errors == [] and len(loaded.latencies) == 40
    assert loaded.p99 < allowed_p99(baseline)


def test_a_request_head_left_unfinished_is_closed(server):
    """Silence after half a head: the connection goes after gunicorn's keep-alive time (2 s)."""
    sock = open_slow_client(server)
    started = time.monotonic()
    with sock:
        assert answer_or_close(sock, timeout=10) == b""
    assert time.monotonic() - started < 6


def test_a_request_head_trickling_in_for_too_long_is_refused_with_408(server):
    sock = open_slow_client(server, b"POST /jobs HTTP/1.1\r\n")
    started = time.monotonic()
    with sock:
        # A header a second, never silent for long, until the server answers (or 5 s past its limit).
        while not _readable_within(sock, 1) and time.monotonic() - started < HEAD_TIMEOUT_SECONDS + 5:
            sock.sendall(b"X-Slow: a\r\n")
        answered_after = time.monotonic() - started
        answer = answer_or_close(sock, timeout=5)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert HEAD_TIMEOUT_SECONDS <= answered_after < HEAD_TIMEOUT_SECONDS + 3


def test_a_request_head_over_64_kib_is_refused_with_431(server, make_key):
    headers = b"".join(b"X-Filler-%d: %s\r\n" % (n, b"x" * 1000) for n in range(MAX_HEAD_BYTES // 1000 + 5))
    with open_slow_client(server, b"GET /jobs HTTP/1.1\r\nHost: x\r\n" + headers) as sock:
        answer = answer_or_close(sock, timeout=10)
    assert answer.startswith(b"HTTP/1.1 431 ")


def test_a_request_body_unfinished_30_s_after_its_head_is_refused_and_frees_its_thread(server, make_key):
    head = (
        f"POST /jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {make_key('producer', 'slow-body')}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    ).encode()
    with open_slow_client(server, head + b'{"type": "') as sock:  # and never the rest
        started = time.monotonic()
        sock.settimeout(BODY_TIMEOUT_SECONDS + 10)
        answer = sock.recv(65536)
        answered_after = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b"application/problem+json" in answer
    assert BODY_TIMEOUT_SECONDS - 1 <= answered_after < BODY_TIMEOUT_SECONDS + 5
