"""The claim floor (PostgreSQL, queuelog/waiting/claim_floor.py): a claim's walk of the pending jobs starts at a
turn no claimable job is below, so that it passes over what a held snapshot keeps of the jobs claimed since
without reading their rows; and no job is left behind by it.

The floor is read again about once a second, so a test that needs it read after what it did waits for that.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from sqlalchemy import text

from queuelog.core.clock import utcnow
from queuelog.extensions import db
from queuelog.waiting import claim_floor, pg_listener, wakeup
from tests.support import plans
from tests.support.database import test_db_kind
from tests.support.held_snapshot import analyzed_live_table

pytestmark = pytest.mark.skipif(test_db_kind() != "postgresql", reason="the claim floor is PostgreSQL's")

#: Index entries of the live table that scans of this session have read since it last reported its counts: on
#: PostgreSQL 15 that is at most a second ago, so it may hold the reads of the session's earlier transactions.
#: Read it before and after a statement in one transaction (no report comes in between): the difference is the
#: statement's.
_READ_BY_THIS_SESSION = text(
    "SELECT sum(pg_stat_get_xact_tuples_returned(indexrelid)) FROM pg_index WHERE indrelid = 'jobs_live'::regclass"
)
#: Scans this session has made of the live table (by sequential scan: its own name) and of each of its indexes.
_SCANS_BY_THIS_SESSION = text(
    "SELECT relname, pg_stat_get_xact_numscans(oid) FROM pg_class WHERE oid = 'jobs_live'::regclass"
    " OR oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'jobs_live'::regclass) ORDER BY relname"
)
BETWEEN_ROUNDS = 150  # jobs run from start to end between the two rounds, under the held snapshot


def _floor_read_again() -> None:
    time.sleep(claim_floor.REFRESH_SECONDS * 3)


@pytest.fixture
def short_epochs(app, monkeypatch):
    """Floor epochs of two seconds, begun afresh now, with a horizon of one and a half seconds more, in place of
    the half-minute ones: what a test shows of the epoch's first read, from the head, it shows in seconds."""
    monkeypatch.setattr(claim_floor, "FULL_READ_SECONDS", 2.0)
    monkeypatch.setattr(claim_floor, "HORIZON_SECONDS", 1.5)
    wakeup.waker_for(db.engine).floor.forget()  # the epoch in progress was begun with the half-minute
    _floor_read_again()


@pytest.fixture
def run_jobs(enqueue, run):
    """run_jobs(n): n jobs enqueued and run to completion, one by one."""
    return lambda count: [run(enqueue()["id"]) for _ in range(count)]


def _walk_the_claim_order(conn) -> None:
    """For the rest of ``conn``'s transaction: no plan that reads the table whole or sorts what it read, so the
    pick walks the one index already in claim order."""
    conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
    conn.exec_driver_sql("SET LOCAL enable_sort = off")


def _planned_afresh(conn, statement: str, parameters: dict) -> None:
    """Send ``statement`` unprepared, so that it is planned now, under the settings above. The pooled connection
    may have sent the same claim five times already, for the app: psycopg has then prepared it, and PostgreSQL
    would run the plan it cached for it then, whatever the settings are now."""
    conn.connection.driver_connection.execute(statement, parameters, prepare=False).fetchall()


def _entries_read_by_a_claim(enqueue, claim, run) -> tuple[int, str]:
    """Index entries of the live table one claim reads: the claim the app sends is captured as a job is claimed,
    then sent once more in a transaction of its own (rolled back), with the session's counts read before and
    after it: no other statement's reads (the listener's, another test's, this session's earlier ones) count.
    The second job, which that claim found, is then run. With the count, what a failure should show: the floor
    the claim was sent with and its plan.

    It is sent again walking the claim order (ix_jobs_claim_order), the claim's plan on a live table of any size
    (test_scale_claim_plan.py). This one holds two or three rows, and its planner may take another index in one
    round than in the other: the suite's earlier tests leave their changes counted, so autovacuum analyzes it at
    no set moment of this test."""
    enqueue()
    second = enqueue()
    sent, _took = plans.capture(claim, lambda sql, way: way == "send" and plans.PICK in sql)
    [(statement, parameters)] = sent
    with db.engine.connect() as conn, conn.begin() as transaction:
        _walk_the_claim_order(conn)
        before = conn.execute(_READ_BY_THIS_SESSION).scalar_one()
        _planned_afresh(conn, statement, parameters)
        read = conn.execute(_READ_BY_THIS_SESSION).scalar_one() - before
        transaction.rollback()
    with db.engine.connect() as conn, conn.begin() as transaction:
        _walk_the_claim_order(conn)
        plan = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters).scalars().all()
        transaction.rollback()
    run(second["id"])
    return read, f"sent with floor {parameters.get('floor')}:\n" + "\n".join(plan)


def test_a_claim_reads_at_most_two_more_index_entries_after_many_jobs_ran_under_a_held_snapshot(
    enqueue, claim, run, run_jobs, hold_snapshot
):
    hold_snapshot()
    run_jobs(10)
    _floor_read_again()
    early, _ = _entries_read_by_a_claim(enqueue, claim, run)
    run_jobs(BETWEEN_ROUNDS)
    _floor_read_again()
    late, how = _entries_read_by_a_claim(enqueue, claim, run)
    # A walk from the head would read one more entry for each job run in between (150 here).
    assert late <= early + 2, f"{early} entries read, then {late}; the late claim {how}"


def _counted_around_a_floor_read(floor: claim_floor.Floor, count):
    """What ``count`` (a statement about this session's own reads) says before and after one read of ``floor``, as
    this process's listener sends it, in a transaction of its own: no other statement's reads count. On a new
    connection, so the read is planned now, under the statistics of now: after five reads a pooled one would have
    it prepared (psycopg) and might run a plan made before them."""
    db.engine.dispose()
    with db.engine.connect() as conn, conn.begin() as transaction:
        before = conn.execute(count).all()
        pg_listener._read_floor(conn.connection.driver_connection, floor)
        after = conn.execute(count).all()
        transaction.rollback()
    return before, after


def _entries_read_by_a_floor_read(floor: claim_floor.Floor) -> int:
    """Index entries of the live table that one read of ``floor`` reads."""
    [(before,)], [(after,)] = _counted_around_a_floor_read(floor, _READ_BY_THIS_SESSION)
    return after - before


def test_the_floors_read_reads_at_most_two_more_index_entries_after_many_jobs_ran_under_a_held_snapshot(
    monkeypatch, run_jobs, hold_snapshot
):
    monkeypatch.setattr(claim_floor, "FULL_READ_SECONDS", 3600.0)  # one epoch: no read from the head but its first
    floor = claim_floor.Floor()
    hold_snapshot()
    _entries_read_by_a_floor_read(floor)
    run_jobs(10)
    _entries_read_by_a_floor_read(floor)
    early = _entries_read_by_a_floor_read(floor)
    run_jobs(BETWEEN_ROUNDS)
    analyzed_live_table()
    _entries_read_by_a_floor_read(floor)
    late = _entries_read_by_a_floor_read(floor)
    # A read from the head would read one more entry for each job run in between (150 here).
    assert late <= early + 2, f"{early} entries read, then {late}"


def test_the_floors_read_scans_only_the_claim_orders_index_after_the_live_table_was_analyzed_nearly_empty(
    enqueue, run_jobs, hold_snapshot
):
    floor = claim_floor.Floor()
    # What earlier tests left of the live table's pages goes first: the table is then as small as its few rows.
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM jobs_live")
    hold_snapshot()
    run_jobs(40)
    # Two jobs pending, the live rows: all the statistics then see of the live table.
    enqueue()
    enqueue(type="report", priority="low")
    analyzed_live_table()
    before, after = _counted_around_a_floor_read(floor, _SCANS_BY_THIS_SESSION)
    scanned = {name for (name, count), (_, was) in zip(after, before, strict=True) if count > was}
    assert scanned == {"ix_jobs_claim_order"}, scanned


def test_a_job_scheduled_past_the_floors_horizon_is_claimed_as_it_comes_due_though_later_jobs_ran_past_it(
    short_epochs, client, worker, enqueue, run_jobs, read_job
):
    # Past the horizon of every epoch begun while the test waits below for the floor to pass over it.
    due_in = claim_floor.REFRESH_SECONDS * 3 + claim_floor.FULL_READ_SECONDS + claim_floor.HORIZON_SECONDS + 1
    due = time.monotonic() + due_in
    # Of another type than the jobs run after it, whose turns then start at the newest id, past its own.
    scheduled = enqueue(type="report", run_at=(utcnow() + timedelta(seconds=due_in)).isoformat())
    run_jobs(5)
    turn = read_job(scheduled["id"]).fair_tag
    waited_until = time.monotonic() + claim_floor.REFRESH_SECONDS * 3
    while (floor := wakeup.claim_floor(db.engine)) <= turn and time.monotonic() < waited_until:
        time.sleep(0.05)
    assert floor > turn, f"the floor stayed at {floor}, not past the scheduled job's turn {turn}"
    claimed = None
    while claimed is None and time.monotonic() < due + claim_floor.STALE_SECONDS:
        response = client.post("/jobs/claim", headers=worker)
        claimed = response.get_json()["id"] if response.status_code == 200 else time.sleep(0.1)
    assert claimed == scheduled["id"]


def test_a_released_job_is_claimed_again_at_once_though_later_jobs_ran_since(client, worker, enqueue, claim, run_jobs):
    first = enqueue()
    held = claim()
    assert held["id"] == first["id"]
    run_jobs(20)
    _floor_read_again()
    released = client.post(f"/jobs/{held['id']}/release", json={"claim_token": held["claim_token"]}, headers=worker)
    assert released.status_code == 200, released.get_json()
    assert claim()["id"] == first["id"]


def test_a_pending_job_written_by_hand_and_never_announced_is_claimed_after_the_next_read_from_the_head(
    short_epochs, client, worker, run_jobs
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
    deadline = time.monotonic() + claim_floor.FULL_READ_SECONDS + claim_floor.REFRESH_SECONDS * 3
    claimed = None
    while claimed is None and time.monotonic() < deadline:
        response = client.post("/jobs/claim", headers=worker)
        claimed = response.get_json()["id"] if response.status_code == 200 else time.sleep(0.1)
    assert claimed == job_id


def test_a_job_of_a_limited_type_finishing_does_not_lower_the_claim_floor(client, admin, enqueue, run_jobs):
    limited = client.patch("/types/email", json={"concurrency_limit": 5}, headers=admin)
    assert limited.status_code == 200, limited.get_json()
    run_jobs(20)
    _floor_read_again()
    floor = wakeup.claim_floor(db.engine)
    assert floor > 0
    run_jobs(1)  # its completion frees a slot of the limit, and wakes the waiting claims
    assert wakeup.claim_floor(db.engine) >= floor
