"""Slow clients: a request head begun and never finished must not hold the server's threads.

gunicorn hands a connection to a thread as soon as its first bytes arrive, and the thread then waits
for the rest of the head: 64 connections that sent half a head made every producer time out under
the README's production command. queuelog's gunicorn worker collects a head as it arrives and gives
the request to a thread only once the head is complete (queuelog/serving.py).
"""
from __future__ import annotations

import math
import select
import socket
import threading
import time

import pytest

from queuelog.serving import HEAD_TIMEOUT_SECONDS, MAX_HEAD_BYTES
from queuelog.worker import Client, ServerUnavailable
from tests.conftest import JOB_TYPES
from tests.support.server import running_server

#: With workers=4, the README's production command: gunicorn --workers 4 --threads 8.
PRODUCTION_ARGS = ("--threads", "8")
SLOW_CLIENTS = 64
HALF_A_HEAD = b"POST /jobs HTTP/1.1\r\nHost: queue.example.com\r\nContent-Type: application/json\r\n"


@pytest.fixture
def server(app, database_url):
    env = {"QUEUELOG_DATABASE_URL": database_url, "QUEUELOG_JOB_TYPES": ",".join(JOB_TYPES),
           "QUEUELOG_SECRET_KEY": "test-secret-key"}
    with running_server(env, workers=4, extra_args=PRODUCTION_ARGS) as srv:
        yield srv


def open_slow_client(server, first_bytes: bytes = HALF_A_HEAD) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    sock.sendall(first_bytes)
    return sock


def answer_or_close(sock: socket.socket, timeout: float) -> bytes:
    """What the server sends before it closes the connection (b"" if it just closes); waits ``timeout`` s."""
    sock.settimeout(timeout)
    received = b""
    while True:
        chunk = sock.recv(65536)   # socket.timeout (a failure) if the server keeps it open
        if not chunk:
            return received
        received += chunk


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def test_64_unfinished_request_heads_do_not_starve_producers(server, make_key):
    slow = [open_slow_client(server) for _ in range(SLOW_CLIENTS)]
    try:
        time.sleep(1)   # every server process has them by now
        latencies, errors = [], []

        def produce(key: str) -> None:
            client = Client(server.url, key, timeout=5)
            for n in range(10):
                started = time.monotonic()
                try:
                    client.enqueue("email", {"n": n})
                    latencies.append(time.monotonic() - started)
                except ServerUnavailable as exc:
                    errors.append(str(exc))
                client.close()   # a new connection each time: any server process may get it

        producers = [threading.Thread(target=produce, args=(make_key("producer", f"producer-{n}"),))
                     for n in range(4)]
        for thread in producers:
            thread.start()
        for thread in producers:
            thread.join(120)
    finally:
        for sock in slow:
            sock.close()
    p99 = percentile(latencies, 0.99) if latencies else math.inf
    print(f"\nenqueue with {SLOW_CLIENTS} unfinished heads open: n={len(latencies)} "
          f"p50={percentile(latencies, 0.5) * 1000 if latencies else 0:.0f} ms p99={p99 * 1000:.0f} ms "
          f"errors={len(errors)}")
    assert errors == [] and len(latencies) == 40
    assert p99 < 0.25


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
        while not select.select([sock], [], [], 1)[0] and time.monotonic() - started < HEAD_TIMEOUT_SECONDS + 5:
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
