"""Proof: quotas hold across server processes and threads; and the Python Client's answer to a quota.

20 clients (threads here, each with its own connection, released together by a barrier) enqueue at the
same moment against gunicorn with 4 worker processes of 4 threads, so the requests race in the
database. However they interleave, no two of them share the last slot. One server for the module;
each test has a key of its own and counts that key's jobs.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
import requests

from queuelog.auth.keys import create_key
from queuelog.worker import Client, QuotaExceeded, ServerUnavailable
from tests.support.scale import (
    app_on,
    four_by_four_server,
    migrated_database_url,
    read_rows,
    session_for,
)

CLIENTS = 20


@pytest.fixture(scope="module")
def database(request, tmp_path_factory):
    return migrated_database_url(request, tmp_path_factory.mktemp("quotas"))


@pytest.fixture(scope="module")
def server(database):
    with four_by_four_server(database) as srv:
        yield srv


@pytest.fixture
def key(database, request):
    """key(**quotas) → the secret of a producer key named for the test; ``key.jobs()`` counts its jobs."""
    name = request.node.name.removeprefix("test_")[:100]

    def make(**quotas) -> str:
        with app_on(database):
            return create_key(name, "producer", **quotas)

    make.jobs = lambda status=None: (
        read_rows(
            database,
            "SELECT COUNT(*) AS n FROM jobs WHERE producer = :name"
            + ("" if status is None else " AND status = :status"),
            name=name,
            status=status,
        )[0].n
    )
    return make


def all_at_once(url: str, secret: str, body: dict) -> list[int]:
    """POST ``body`` to ``url`` from CLIENTS threads released together; their statuses."""
    sessions = [session_for(secret) for _ in range(CLIENTS)]
    for session in sessions:  # connect first, so the barrier releases requests, not TCP handshakes
        session.get(url.rsplit("/jobs", 1)[0] + "/healthz", timeout=30)
    barrier = threading.Barrier(CLIENTS)
    statuses: list = [None] * CLIENTS

    def client(index: int) -> None:
        barrier.wait(timeout=30)
        try:
            statuses[index] = sessions[index].post(url, json=body, timeout=30).status_code
        except requests.RequestException as error:
            statuses[index] = repr(error)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return statuses


def test_20_concurrent_enqueues_with_max_pending_10_store_exactly_10(server, key):
    statuses = all_at_once(server.url + "/jobs", key(max_pending=10), {"type": "email"})
    assert Counter(statuses) == {201: 10, 429: 10}, statuses
    assert key.jobs(status="pending") == 10


def test_20_concurrent_enqueues_with_a_rate_of_10_store_exactly_10(server, key):
    statuses = all_at_once(server.url + "/jobs", key(enqueue_rate="10/600"), {"type": "email"})
    assert Counter(statuses) == {201: 10, 429: 10}, statuses
    assert key.jobs() == 10


def test_20_concurrent_batches_are_each_taken_or_refused_whole(server, key):
    secret = key(max_pending=10, enqueue_rate="100/600")
    statuses = all_at_once(server.url + "/jobs/batch", secret, {"jobs": [{"type": "email"}] * 3})
    assert Counter(statuses) == {201: 3, 429: 17}, statuses
    assert key.jobs() == 9  # three whole batches; the fourth would have passed 10


def test_the_client_raises_quota_exceeded_with_retry_after_and_does_not_retry(server, key):
    refusals_before = server.log().count("status=429")
    client = Client(server.url, key(enqueue_rate="2/3600"))
    client.enqueue("email")
    client.enqueue("email")
    with pytest.raises(QuotaExceeded) as refused:
        client.enqueue("email")
    error = refused.value
    assert isinstance(error, ServerUnavailable) and error.status == 429
    assert error.quota == "enqueue_rate"
    assert 3500 <= error.retry_after <= 3600  # as the server said, not capped like a 503's
    assert error.problem["limit"] == 2 and "at most 2 jobs in any 3600 s" in str(error)
    assert server.log().count("status=429") == refusals_before + 1  # asked once: the caller decides what next
    assert key.jobs() == 2


def test_the_client_reports_a_max_pending_refusal_of_a_batch(server, key):
    client = Client(server.url, key(max_pending=2))
    with pytest.raises(QuotaExceeded) as refused:
        client.enqueue_batch([{"type": "email"}] * 3)
    assert (refused.value.quota, refused.value.retry_after) == ("max_pending", 5)
    assert key.jobs() == 0
