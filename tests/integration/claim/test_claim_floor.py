"""The claim floor (PostgreSQL, queuelog/waiting/claim_floor.py): a claim's walk of the pending jobs starts at a
turn no claimable job is below, so that it passes over what a held snapshot keeps of the jobs claimed since
without reading their rows; and no job is left behind by it.

The floor is read again about once a second, so a test that needs it read after what it did waits for that.
"""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text

from queuelog.core.clock import utcnow
from queuelog.extensions import db
from queuelog.waiting import claim_floor, wakeup
from tests.support import plans
from tests.support.database import test_db_kind

pytestmark = pytest.mark.skipif(test_db_kind() != "postgresql", reason="the claim floor is PostgreSQL's")

#: Index entries of the live table that scans in this session's transaction have read.
_READ_IN_THIS_TRANSACTION = text(
    "SELECT sum(pg_stat_get_xact_tuples_returned(indexrelid)) FROM pg_index WHERE indrelid = 'jobs_live'::regclass"
)
BETWEEN_ROUNDS = 150  # jobs run from start to end between the two rounds, under the held snapshot


def _turns_past_what_earlier_tests_left() -> None:
    """Start this test's ids, and so its turns, past every job an earlier test made. Between tests the suite
    deletes the rows and restarts the id sequence (tests/support/database.py); the index entries of the deleted
    rows stay until vacuum, under the same turns this test's jobs would take. A database in use never gives an
    id twice, so there the old entries lie below the floor."""
    with db.engine.begin() as conn:
        conn.exec_driver_sql("SELECT setval('jobs_id_seq', 1000000)")


def _floor_read_again() -> None:
    time.sleep(claim_floor.REFRESH_SECONDS * 3)


@pytest.fixture
def run_jobs(enqueue, run):
    """run_jobs(n): n jobs enqueued and run to completion, one by one."""
    return lambda count: [run(enqueue()["id"]) for _ in range(count)]


def _entries_read_by_a_claim(enqueue, claim, run) -> int:
    """Index entries of the live table one claim reads: the claim the app sends is captured as a job is claimed,
    then sent once more in a transaction of its own (rolled back), whose own counts are read: no other session's
    reads (the listener's, another test's) count. The second job, which that claim found, is then run."""
    enqueue()
    second = enqueue()
    sent, _took = plans.capture(claim, lambda sql, way: way == "send" and plans.PICK in sql)
    [(statement, parameters)] = sent
    with db.engine.connect() as conn, conn.begin() as transaction:
        conn.exec_driver_sql(statement, parameters).all()
        read = conn.execute(_READ_IN_THIS_TRANSACTION).scalar_one()
        transaction.rollback()
    run(second["id"])
    return read


def test_a_claim_reads_at_most_two_more_index_entries_after_many_jobs_ran_under_a_held_snapshot(
    enqueue, claim, run, run_jobs, hold_snapshot
):
    _turns_past_what_earlier_tests_left()
    hold_snapshot()
    run_jobs(10)
    _floor_read_again()
    early = _entries_read_by_a_claim(enqueue, claim, run)
    run_jobs(BETWEEN_ROUNDS)
    _floor_read_again()
    late = _entries_read_by_a_claim(enqueue, claim, run)
    # A walk from the head would read one more entry for each job run in between (150 here).
    assert late <= early + 2, (early, late, f"floor now: {wakeup.claim_floor(db.engine)}")


def test_a_released_job_is_claimed_again_at_once_though_later_jobs_ran_since(client, worker, enqueue, claim, run_jobs):
    first = enqueue()
    held = claim()
    assert held["id"] == first["id"]
    run_jobs(20)
    _floor_read_again()
    released = client.post(f"/jobs/{held['id']}/release", json={"claim_token": held["claim_token"]}, headers=worker)
    assert released.status_code == 200, released.get_json()
    assert claim()["id"] == first["id"]


def test_a_pending_job_written_by_hand_and_never_announced_is_claimed_once_the_floor_is_read_again(
    client, worker, run_jobs
):
    run_jobs(20)
    _floor_read_again()
    now = utcnow().replace(tzinfo=None)
    with db.engine.begin() as conn:
        job_id = conn.execute(
            text(
                "INSERT INTO jobs (type, payload, priority, status, retry_count, max_retries, stall_count,"
                " run_at, created_at, updated_at, fair_tag)"
                " VALUES ('email', '{}', 0, 'pending', 0, 3, 0, :now, :now, :now, 0) RETURNING id"
            ),
            {"now": now},
        ).scalar_one()
    deadline = time.monotonic() + claim_floor.STALE_SECONDS + claim_floor.REFRESH_SECONDS
    claimed = None
    while claimed is None and time.monotonic() < deadline:
        response = client.post("/jobs/claim", headers=worker)
        claimed = response.get_json()["id"] if response.status_code == 200 else time.sleep(0.1)
    assert claimed == job_id
