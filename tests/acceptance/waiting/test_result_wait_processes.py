"""Waiting for a job's end (``GET /jobs/{id}?wait=S``) against real gunicorn servers, run as the README's
production command runs them (``--threads 8``, gunicorn.conf.py):

- the waiting request answers within 100 ms of the answer to the ``POST /jobs/{id}/complete`` that ended the
  job, at p99, whether the waiter's own server process or another one completed it;
- a producer that hung up gives its place among the waiting requests back within a second or so, as a worker's
  waiting claim does: 96 abandoned waits leave no place taken for workers' long-polls.

Runs on the database QUEUELOG_TEST_DB selects. Both measure time: scripts/test runs them alone (``serial``).
"""

from __future__ import annotations

import select
import socket
import threading
import time

import pytest
import requests
from sqlalchemy import create_engine, text

from queuelog.waiting.waiting_places import reserved_threads
from tests.support.latency import percentile
from tests.support.scale import HTTP_TIMEOUT, create_keys, migrated_database_url, server_env, session_for
from tests.support.server import running_server

pytestmark = pytest.mark.serial

THREADS = 8
#: The README's production command: gunicorn --workers 4 --threads 8.
PRODUCTION_ARGS = ("--threads", str(THREADS))
SAMPLES = 100
FAR_FUTURE = "2099-01-01T00:00:00Z"


@pytest.fixture(scope="module")
def setup(request, tmp_path_factory):
    """The module's database (migrated), the servers' environment, and keys: a producer and a worker."""
    database_url = migrated_database_url(request, tmp_path_factory.mktemp("result-wait"))
    producer, worker = create_keys(database_url, ("rw-producer", "producer", None), ("rw-worker", "worker", None))
    engine = create_engine(database_url)
    yield {
        "database_url": database_url,
        "env": server_env(database_url),
        "producer": producer,
        "worker": worker,
        "engine": engine,
    }
    engine.dispose()


# --- how soon the wait answers -----------------------------------------------------------------------


def watched(engine, job_id: int) -> bool:
    with engine.connect() as conn:
        return bool(conn.execute(text("SELECT watched FROM jobs WHERE id = :id"), {"id": job_id}).scalar())


def lag_of_one_wait(setup, waiting_on: str, completing_on: str, producer, worker) -> float:
    """Seconds from the complete's answer to the waiting GET's answer (negative: the wait answered first)."""
    job = producer.post(f"{waiting_on}/jobs", json={"type": "noop", "payload": {}}, timeout=HTTP_TIMEOUT).json()
    answered: dict = {}

    def wait_for_it() -> None:
        response = requests.get(
            f"{waiting_on}/jobs/{job['id']}?wait=20",
            timeout=HTTP_TIMEOUT,
            headers={"Authorization": f"Bearer {setup['producer']}"},
        )
        answered["at"] = time.monotonic()
        answered["status"] = response.json()["status"]

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    deadline = time.monotonic() + 10
    while not watched(setup["engine"], job["id"]):  # the server holds the wait now
        assert time.monotonic() < deadline and waiter.is_alive(), answered
        time.sleep(0.005)
    claimed = worker.post(f"{completing_on}/jobs/claim", json={"types": ["noop"]}, timeout=HTTP_TIMEOUT).json()
    assert claimed["id"] == job["id"]
    completed = worker.post(
        f"{completing_on}/jobs/{job['id']}/complete",
        timeout=HTTP_TIMEOUT,
        json={"claim_token": claimed["claim_token"], "result": {"n": 1}},
    )
    acknowledged = time.monotonic()
    assert completed.status_code == 200
    waiter.join(HTTP_TIMEOUT)
    assert answered["status"] == "completed"
    return answered["at"] - acknowledged


@pytest.mark.parametrize("where", ["same", "another"])
def test_wait_answers_within_100_ms_of_the_completions_answer_at_p99(setup, where):
    with (
        running_server(setup["env"], workers=1, extra_args=PRODUCTION_ARGS) as waiting_on,
        running_server(setup["env"], workers=1, extra_args=PRODUCTION_ARGS) as other,
    ):
        completing_on = waiting_on if where == "same" else other
        producer, worker = session_for(setup["producer"]), session_for(setup["worker"])
        lags = [lag_of_one_wait(setup, waiting_on.url, completing_on.url, producer, worker) for _ in range(SAMPLES)]
    print(
        f"\n?wait on {where} process as the completion, {SAMPLES} waits: answered after the complete's answer "
        f"p50 {percentile(lags, 0.5) * 1000:+.1f} ms, p99 {percentile(lags, 0.99) * 1000:+.1f} ms, "
        f"max {max(lags) * 1000:+.1f} ms"
    )
    assert percentile(lags, 0.99) < 0.100


# --- a producer that hung up -------------------------------------------------------------------------


def request_bytes(method: str, path: str, port: int, secret: str, body: bytes = b"") -> bytes:
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {secret}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def status_of(sock: socket.socket) -> int:
    """The status of the answer that has begun to arrive on ``sock``."""
    return int(sock.recv(65536).split(b" ", 2)[1])


def take_every_place(port: int, wait_request: bytes, places: int, first: int, within: float) -> list[socket.socket]:
    """Send waits, ``first`` at once then more as needed, until exactly ``places`` are held and the rest were
    refused (503); returns the connections of the held ones."""
    open_waits: list[socket.socket] = []
    deadline = time.monotonic() + within
    quiet_since = None
    for _ in range(first):
        open_waits.append(socket.create_connection(("127.0.0.1", port), timeout=HTTP_TIMEOUT))
        open_waits[-1].sendall(wait_request)
    while True:
        assert time.monotonic() < deadline, f"{len(open_waits)} waits unanswered, not {places}"
        readable, _, _ = select.select(open_waits, [], [], 0.1)
        for sock in readable:
            assert status_of(sock) == 503  # only a wait that found every place taken answers this soon
            sock.close()
            open_waits.remove(sock)
        if readable or len(open_waits) != places:
            quiet_since = None
        if len(open_waits) < places:  # some process holds fewer than it may: fill it
            for _ in range(places - len(open_waits)):
                open_waits.append(socket.create_connection(("127.0.0.1", port), timeout=HTTP_TIMEOUT))
                open_waits[-1].sendall(wait_request)
        elif len(open_waits) == places:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since >= 1.0:  # no refusal still on its way
                return open_waits


def probe_claims(port: int, claim_request: bytes, since: float, every: float, until: float) -> list[tuple[float, int]]:
    """Send a long-poll claim on a new connection every ``every`` seconds, up to ``until`` seconds after
    ``since``; returns (seconds after ``since`` it was sent, its status) for each."""
    sent: list[tuple[float, socket.socket]] = []
    answers: list[tuple[float, int]] = []
    while time.monotonic() - since < until:
        sock = socket.create_connection(("127.0.0.1", port), timeout=HTTP_TIMEOUT)
        sock.sendall(claim_request)
        sent.append((time.monotonic() - since, sock))
        time.sleep(every)
    for at, sock in sent:
        with sock:
            answers.append((at, status_of(sock)))
    return answers


def test_96_waits_whose_producers_hung_up_free_the_places_workers_long_poll_in_within_2_s(setup):
    places_per_process = THREADS - reserved_threads(THREADS)
    with running_server(setup["env"], workers=4, extra_args=PRODUCTION_ARGS) as server:
        producer = session_for(setup["producer"])
        never_due = producer.post(
            f"{server.url}/jobs", json={"type": "report", "run_at": FAR_FUTURE}, timeout=HTTP_TIMEOUT
        ).json()
        wait = request_bytes("GET", f"/jobs/{never_due['id']}?wait=30", server.port, setup["producer"])
        held = take_every_place(server.port, wait, places=4 * places_per_process, first=96, within=60)
        hung_up_at = time.monotonic()
        for sock in held:
            sock.close()
        # Claims that find nothing due: held for their wait if they get a place, else refused at once (503).
        claim = request_bytes("POST", "/jobs/claim", server.port, setup["worker"], b'{"types": ["noop"], "wait": 0.2}')
        answers = probe_claims(server.port, claim, since=hung_up_at, every=0.1, until=3.0)
    print(
        "\nlong-poll claims after 96 abandoned waits (seconds after the hang-up: status): "
        + ", ".join(f"{at:.1f}: {status}" for at, status in answers)
    )
    accepted = [at for at, status in answers if status == 204]
    assert accepted and accepted[0] < 2.0
    # From then on no process holds a place for a producer who left: every claim waits.
    assert [status for at, status in answers if at >= 2.0] == [204] * len([at for at, _ in answers if at >= 2.0])
