"""Proof: 20 clients sending the same idempotency key at the same moment create exactly one job.

The clients are threads in this process, each with its own connection, released together by a
barrier; the server is gunicorn with 4 worker processes, so the requests really race in the database
(on PostgreSQL the losers hit the unique constraint and answer with the winner's job).
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
import requests

from tests.support.scale import create_keys, fresh_database_url, read_rows, server_env, session_for
from tests.support.server import running_server

CLIENTS = 20
ROUNDS = 5  # five keys, so the race is run more than once


@pytest.fixture(scope="module")
def database(request, tmp_path_factory):
    """One database for the module: the race runs once, each test checks one promise."""
    return fresh_database_url(request, tmp_path_factory.mktemp("idempotency"))


@pytest.fixture(scope="module")
def raced(database):
    """For each of ROUNDS keys, 20 simultaneous POST /jobs; returns {key: [(status, body), ...]}."""
    [secret] = create_keys(database, ("racing-producer", "producer", "high"))
    outcomes: dict[str, list] = {}
    with running_server(server_env(database), workers=4) as server:
        for round_number in range(ROUNDS):
            key = f"order-{round_number}"
            body = {"type": "email", "payload": {"order": round_number}, "priority": "high", "idempotency_key": key}
            outcomes[key] = _post_all_at_once(f"{server.url}/jobs", secret, body)
    return outcomes


def _post_all_at_once(url: str, secret: str, body: dict) -> list:
    sessions = [session_for(secret) for _ in range(CLIENTS)]
    barrier = threading.Barrier(CLIENTS)
    results: list = [None] * CLIENTS

    def client(index: int) -> None:
        barrier.wait(timeout=30)
        try:
            response = sessions[index].post(url, json=body, timeout=30)
            results[index] = (response.status_code, response.json())
        except requests.RequestException as error:
            results[index] = ("error", repr(error))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def test_every_client_gets_201_or_200_with_the_same_job(raced):
    for key, results in raced.items():
        assert {status for status, _ in results} <= {200, 201}, (key, results)
        assert len({body["id"] for _, body in results}) == 1, (key, results)


def test_exactly_one_client_gets_201(raced):
    for key, results in raced.items():
        assert Counter(status for status, _ in results)[201] == 1, (key, results)


def test_exactly_one_job_exists_per_key(raced, database):
    rows = read_rows(database, "SELECT idempotency_key, COUNT(*) AS n FROM jobs GROUP BY idempotency_key")
    assert {row.idempotency_key: row.n for row in rows} == {key: 1 for key in raced}
    enqueued = read_rows(database, "SELECT COUNT(*) AS n FROM job_events WHERE event = 'enqueued'")
    assert enqueued[0].n == ROUNDS
