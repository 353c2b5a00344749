"""Proof: a dedupe window holds under concurrent enqueues across server processes.

20 clients released together (threads of this process, or 20 forked processes) enqueue the same job with
``unique_for`` against gunicorn with 4 worker processes of 4 threads, so the requests race in the
database: exactly one job is created (one 201). In a producer key's own window (20 clients of one key) every
other answer is that job (200, deduplicated); in a type's shared window (20 keys, unique_scope "type") every
other answer is only {"deduplicated": true}, the job being another producer's. Batches sharing keys in
opposite orders never deadlock and still make one job per key.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
import requests

from queuelog.auth.keys import create_key
from queuelog.queue import flow
from tests.support.scale import (
    CTX,
    app_on,
    four_by_four_server,
    migrated_database_url,
    read_rows,
    session_for,
)

CLIENTS = 20
ROUNDS = 5


@pytest.fixture(scope="module")
def database(request, tmp_path_factory):
    return migrated_database_url(request, tmp_path_factory.mktemp("dedupe"))


@pytest.fixture(scope="module")
def server(database):
    with four_by_four_server(database) as srv:
        yield srv


#: The types whose windows every producer shares in this module; resize-image keeps them per producer.
SHARED = ("email", "report", "noop")


@pytest.fixture(scope="module")
def secrets(database):
    """A producer key per client; they share the windows of the SHARED types."""
    with app_on(database):
        for job_type in SHARED:
            flow.update_type(job_type, {"unique_scope": "type"}, "test")
        return [create_key(f"producer-{n}", "producer") for n in range(CLIENTS)]


def _enqueue(url: str, secret: str, body: dict, barrier, out) -> None:
    session = session_for(secret)
    session.get(url.rsplit("/jobs", 1)[0] + "/healthz", timeout=30)  # connect before the barrier
    barrier.wait(timeout=60)
    try:
        response = session.post(url, json=body, timeout=60)
        out.put((response.status_code, response.json()))
    except requests.RequestException as error:
        out.put((repr(error), None))


def _all_at_once(url: str, secrets: list[str], body: dict, processes: bool) -> list[tuple]:
    """POST ``body`` to ``url`` from one client per secret, released together; (status, answer) of each."""
    if processes:
        barrier, out = CTX.Barrier(len(secrets)), CTX.Queue()
        clients = [CTX.Process(target=_enqueue, args=(url, secret, body, barrier, out)) for secret in secrets]
    else:
        import queue

        barrier, out = threading.Barrier(len(secrets)), queue.Queue()
        clients = [threading.Thread(target=_enqueue, args=(url, secret, body, barrier, out)) for secret in secrets]
    for client in clients:
        client.start()
    answers = [out.get(timeout=120) for _ in clients]
    for client in clients:
        client.join(timeout=60)
    return answers


def _jobs_with_key(database: str, key: str) -> int:
    return read_rows(database, "SELECT COUNT(*) AS n FROM jobs WHERE unique_key = :key", key=key)[0].n


@pytest.mark.parametrize("processes", [False, True], ids=["threads", "processes"])
def test_20_concurrent_enqueues_in_one_shared_window_make_exactly_one_job(server, database, secrets, processes):
    for round_ in range(ROUNDS):
        key = f"{'p' if processes else 't'}-{round_}"
        body = {"type": "email", "payload": {"round": round_}, "unique_for": 600, "unique_key": key}

        answers = _all_at_once(server.url + "/jobs", secrets, body, processes)

        assert Counter(status for status, _ in answers) == {201: 1, 200: CLIENTS - 1}, answers
        # The other 19 producers may not see the job: they learn only that they were deduplicated.
        assert sorted((answer for _, answer in answers), key=len)[:-1] == [{"deduplicated": True}] * (CLIENTS - 1)
        assert _jobs_with_key(database, key) == 1


@pytest.mark.parametrize("processes", [False, True], ids=["threads", "processes"])
def test_20_concurrent_enqueues_of_one_key_in_its_own_window_make_exactly_one_job(server, database, secrets, processes):
    for round_ in range(ROUNDS):
        key = f"own-{'p' if processes else 't'}-{round_}"
        body = {"type": "resize-image", "payload": {"round": round_}, "unique_for": 600, "unique_key": key}

        answers = _all_at_once(server.url + "/jobs", [secrets[0]] * CLIENTS, body, processes)

        assert Counter(status for status, _ in answers) == {201: 1, 200: CLIENTS - 1}, answers
        assert len({answer["id"] for _, answer in answers}) == 1
        assert sorted(answer.get("deduplicated", False) for _, answer in answers) == [False] + [True] * (CLIENTS - 1)
        assert _jobs_with_key(database, key) == 1


def test_20_concurrent_enqueues_with_the_default_key_make_exactly_one_job(server, database, secrets):
    body = {"type": "report", "payload": {"report": "daily", "for": "2026-12-01"}, "unique_for": 600}

    answers = _all_at_once(server.url + "/jobs", secrets, body, processes=False)

    assert Counter(status for status, _ in answers) == {201: 1, 200: CLIENTS - 1}, answers
    assert read_rows(database, "SELECT COUNT(*) AS n FROM jobs WHERE type = 'report'")[0].n == 1


def test_concurrent_batches_sharing_keys_in_any_order_make_one_job_per_key(server, database, secrets):
    keys = [f"batch-{n}" for n in range(10)]
    bodies = []
    for n in range(CLIENTS):
        order = keys if n % 2 else list(reversed(keys))
        bodies.append({"jobs": [{"type": "noop", "unique_for": 600, "unique_key": key} for key in order]})
    barrier = threading.Barrier(CLIENTS)
    statuses: list = [None] * CLIENTS

    def client(index: int) -> None:
        session = session_for(secrets[index])
        barrier.wait(timeout=60)
        statuses[index] = session.post(server.url + "/jobs/batch", json=bodies[index], timeout=60).status_code

    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    # No deadlock, no error: each batch made the jobs whose window it took first (201) or none (200).
    assert set(statuses) <= {200, 201} and 201 in statuses, statuses
    assert [_jobs_with_key(database, key) for key in keys] == [1] * len(keys)
