"""A waiting claim keeps the process's copy of the flow-control settings fresh while it sleeps.

So the claim it makes when a job arrives goes straight to its statement, however long it waited; the copy is
renewed every ~0.75 s for the whole process, however many claims wait; and a limit set where nobody announced
it still reaches a waiting claim within a couple of seconds.
"""
from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import event, insert

from queuelog.clock import utcnow
from queuelog.extensions import db
from queuelog.models import TypeSettings
from queuelog.queue import flow
from tests.test_flow_claim import fresh_copy_of_the_settings  # noqa: F401 - autouse: each test starts with no copy
from tests.test_worker_api_longpoll import start_waiting


@pytest.fixture
def settings_reads(app, monkeypatch):
    """Each read of the process's copy of the type settings, in order: (thread ident, made by a waiting claim's
    renewal of the copy before it sleeps).

    That read selects the settings table alone; the claim's own statements consult it among the jobs.
    """
    reads: list[tuple[int, bool]] = []
    renewing = threading.local()
    keep_fresh = flow.keep_fresh

    def tagged_keep_fresh():
        renewing.now = True
        try:
            return keep_fresh()
        finally:
            renewing.now = False

    def note(_conn, _cursor, statement, *_rest):
        if statement.lstrip().startswith("SELECT type_settings.type, type_settings.paused"):
            reads.append((threading.get_ident(), getattr(renewing, "now", False)))

    monkeypatch.setattr(flow, "keep_fresh", tagged_keep_fresh)
    event.listen(db.engine, "before_cursor_execute", note)
    yield reads
    event.remove(db.engine, "before_cursor_execute", note)


def test_a_claim_woken_after_a_long_wait_reads_no_settings_before_its_statement(
        client, worker, enqueue, settings_reads):
    waiter = start_waiting(client, worker, wait=10)
    time.sleep(2 * flow.CACHE_SECONDS)   # the copy its first claim read is long out of date
    settings_reads.clear()
    job = enqueue()
    response = waiter.result()
    assert response.status_code == 200
    assert response.get_json()["id"] == job["id"]
    # A renewal while it waited may fall in this window; a read between its wake-up and its statement may not.
    assert (waiter.ident, False) not in settings_reads


def test_waiting_claims_renew_one_copy_for_the_process_not_one_each(client, worker, settings_reads):
    waiters = [start_waiting(client, worker, wait=3.5) for _ in range(3)]
    assert [waiter.result().status_code for waiter in waiters] == [204, 204, 204]
    # One read for the process every 0.75 s or so, not one per waiter: ~6 in the ~4 s the waiters spent.
    assert 2 <= len(settings_reads) <= 8, len(settings_reads)


def test_a_limit_set_unannounced_reaches_a_waiting_claim_within_two_seconds(client, worker, enqueue):
    waiter = start_waiting(client, worker, wait=10, types=["email"])
    with db.engine.begin() as conn:   # written by hand: no process is told
        conn.execute(insert(TypeSettings.__table__).values(type="email", concurrency_limit=5, updated_at=utcnow()))
    enqueued_at = time.monotonic()
    job = enqueue(type="email")
    response = waiter.result()
    assert response.status_code == 200
    assert response.get_json()["id"] == job["id"]
    assert waiter.returned_at - enqueued_at < 2 * flow.CACHE_SECONDS + 0.5
