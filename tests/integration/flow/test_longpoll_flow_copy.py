"""A waiting claim needs no fresh copy of the flow-control settings: its claim's statement checks the copy.

So the claim it makes when a job arrives goes straight to its statement, however long it waited; waiting
claims read no settings while they wait; and a limit set where nobody announced it still reaches a waiting
claim at its next claim.
"""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import event, insert

from queuelog.core.clock import utcnow
from queuelog.extensions import db
from queuelog.models import TypeSettings
from queuelog.queue import flow, flow_copy
from tests.support.waiters import start_waiting

# Each test starts with no process copy of the type settings (the database is new, the copy is not).
pytestmark = pytest.mark.usefixtures("fresh_flow_settings")


@pytest.fixture
def settings_reads(app):
    """Each read of the process's copy of the type settings, in order (the thread ident that made it).

    That read selects the settings table alone; the claim's own statements consult it among the jobs.
    """
    reads: list[int] = []

    def note(_conn, _cursor, statement, *_rest):
        if statement == str(flow_copy._READ_CONTROLLED):
            reads.append(threading.get_ident())

    event.listen(db.engine, "before_cursor_execute", note)
    yield reads
    event.remove(db.engine, "before_cursor_execute", note)


def test_a_claim_woken_after_a_long_wait_reads_no_settings_before_its_statement(
    client, worker, enqueue, settings_reads
):
    waiter = start_waiting(client, worker, wait=10)
    time.sleep(2 * flow.CACHE_SECONDS)  # the copy its first claim read is old
    settings_reads.clear()
    job = enqueue()
    response = waiter.result()
    assert response.status_code == 200
    assert response.get_json()["id"] == job["id"]
    assert waiter.ident not in settings_reads


def test_waiting_claims_read_no_settings_while_they_wait(client, worker, settings_reads):
    waiters = [start_waiting(client, worker, wait=3.5) for _ in range(3)]
    assert [waiter.result().status_code for waiter in waiters] == [204, 204, 204]
    # The process's first claim reads the copy (each test starts without one); none after it.
    assert len(settings_reads) == 1, settings_reads


def test_a_limit_set_unannounced_reaches_a_waiting_claim_within_two_seconds(client, worker, enqueue):
    waiter = start_waiting(client, worker, wait=10, types=["email"])
    with db.engine.begin() as conn:  # written by hand: no process is told
        conn.execute(insert(TypeSettings.__table__).values(type="email", concurrency_limit=5, updated_at=utcnow()))
    enqueued_at = time.monotonic()
    job = enqueue(type="email")
    response = waiter.result()
    assert response.status_code == 200
    assert response.get_json()["id"] == job["id"]
    assert waiter.returned_at - enqueued_at < 2 * flow.CACHE_SECONDS + 0.5
