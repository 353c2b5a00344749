"""While another session holds an old snapshot (a long report, a pg_dump, a session left idle in a transaction),
vacuum may remove no row version that died since it began. Every job moved meanwhile leaves its old index entries
behind, and a statement that passes through them reads each one and looks at its row. The writes that act on a
job they name by id must not: each finds its job with one seek, however many jobs moved while the snapshot is held;
nor must the read a waiting claim makes of when the next job comes due, which seeks past the jobs due before it.

Measured by the index entries the statistics count as read (a count, not a time), on PostgreSQL; the snapshot
is held by ``hold_snapshot`` (tests/support/held_snapshot.py).
"""

from __future__ import annotations

import time

import pytest

from queuelog.core.clock import utcnow
from queuelog.extensions import db
from queuelog.waiting import claim_floor, longpoll, pg_listener
from tests.support.database import test_db_kind
from tests.support.held_snapshot import analyzed_live_table
from tests.support.table_stats import index_entries_read, scans_by_index

pytestmark = pytest.mark.skipif(test_db_kind() != "postgresql", reason="snapshots that hold vacuum back: PostgreSQL's")

#: A session reports its counts to the statistics at most this often (PostgreSQL 15), and about this long after
#: it fell idle.
_STATS_REPORT_SECONDS = 1.5
#: Index entries a seek reads for a job whose row was updated once under the held snapshot: its row's, and the
#: old version's that the snapshot keeps.
SEEK = 2
JOBS = 10  # finished (or sent a heartbeat) in each measured round
BETWEEN_ROUNDS = 150  # jobs run from start to end between the two rounds, under the held snapshot
#: Times a session sends one statement before PostgreSQL may plan it once for any values (psycopg prepares it
#: after five; the server then plans five more afresh): an act must find its job by the primary key either way.
PLANNED_GENERIC_AFTER = 12


@pytest.fixture
def floor_reads_paused(monkeypatch):
    """This process's listener reads the claims' floor once a second (waiting/claim_floor.py), on a connection of
    its own, and that read walks the pending jobs' index from its head, entries a held snapshot keeps included.
    Its counts reach the statistics whenever that connection next reports them, in the middle of a measurement
    as often as not, and would be counted as the acts'. The reads stop for the test, after the last one's counts
    have had time to arrive (the floor, unread, is soon not used: the claims walk from the head meanwhile)."""
    monkeypatch.setattr(pg_listener, "_read_floor", lambda _conn, _floor: None)
    time.sleep(claim_floor.REFRESH_SECONDS + _STATS_REPORT_SECONDS)


@pytest.fixture
def run_jobs(client, worker, enqueue, claim):
    """run_jobs(n): n jobs enqueued, claimed and completed, one by one, each leaving its old row versions behind."""

    def _run(count: int) -> None:
        for _ in range(count):
            enqueue()
            job = claim()
            complete(client, worker, job)

    return _run


def complete(client, worker, job: dict) -> None:
    response = client.post(f"/jobs/{job['id']}/complete", json={"claim_token": job["claim_token"]}, headers=worker)
    assert response.status_code == 200, response.get_json()


def heartbeat(client, worker, job: dict) -> None:
    response = client.post(f"/jobs/{job['id']}/heartbeat", json={"claim_token": job["claim_token"]}, headers=worker)
    assert response.status_code == 200, response.get_json()


def entries_read_by(act, jobs: list[dict]) -> int:
    """Index entries of jobs read while ``act`` is done to each of ``jobs``."""
    before, after = _counted_around(index_entries_read, act, jobs)
    return after - before


def indexes_scanned_by(act, jobs: list[dict]) -> dict[str, int]:
    """Indexes of jobs scanned while ``act`` is done to each of ``jobs``, with how many times."""
    before, after = _counted_around(scans_by_index, act, jobs)
    return {name: count - before.get(name, 0) for name, count in after.items() if count > before.get(name, 0)}


def _counted_around(count, act, jobs: list[dict]):
    """What ``count`` (a reader of tests/support/table_stats.py) says before and after ``act`` is done to each of
    ``jobs``, with the app's sessions ended each time so that they have reported what they did."""
    db.session.remove()
    before = count(db.engine)
    for job in jobs:
        act(job)
    db.session.remove()
    return before, count(db.engine)


def claimed(enqueue, claim, count: int) -> list[dict]:
    for _ in range(count):
        enqueue()
    return [claim() for _ in range(count)]


@pytest.mark.parametrize("act", [complete, heartbeat], ids=["complete", "heartbeat"])
def test_acting_on_a_held_job_reads_at_most_one_more_index_entry_after_many_jobs_ran_under_a_held_snapshot(
    client, worker, enqueue, claim, run_jobs, hold_snapshot, floor_reads_paused, act
):
    hold_snapshot()
    run_jobs(10)
    early = entries_read_by(lambda job: act(client, worker, job), claimed(enqueue, claim, JOBS))
    run_jobs(BETWEEN_ROUNDS)
    late = entries_read_by(lambda job: act(client, worker, job), claimed(enqueue, claim, JOBS))
    # Each act seeks its job: at most one entry more per act than a seek reads, or than the early round's acts
    # read. (The early round may read none: PostgreSQL may scan the still tiny live table instead, and plan a
    # seek once the table grew.) A walk over the dead entries would read one more per act for each job run in
    # between (1,500 here).
    assert late <= max(early, SEEK * JOBS) + JOBS, (early, late)


def test_a_waiting_claims_next_due_read_reads_at_most_one_more_index_entry_after_many_jobs_ran_under_a_held_snapshot(
    app, run_jobs, hold_snapshot, floor_reads_paused
):
    # The read is made on its own, as a waiting claim makes it after each wake-up: a waiting claim also claims, and
    # with the floor's reads paused its claims walk from the head, which would be counted with it.
    def next_due_reads(_job) -> None:
        with app.app_context():
            longpoll._earliest_run_at(None, utcnow())

    hold_snapshot()
    run_jobs(10)
    analyzed_live_table()
    early = entries_read_by(next_due_reads, [None] * JOBS)
    run_jobs(BETWEEN_ROUNDS)
    analyzed_live_table()
    late = entries_read_by(next_due_reads, [None] * JOBS)
    # One seek per type and priority, from the waiter's last look on: the jobs claimed before it are behind it.
    assert late <= max(early, SEEK * JOBS) + JOBS, (early, late)


@pytest.mark.parametrize("act", [complete, heartbeat], ids=["complete", "heartbeat"])
def test_acting_on_a_held_job_scans_no_index_but_the_live_tables_primary_key_after_it_was_analyzed_empty(
    client, worker, enqueue, claim, run_jobs, hold_snapshot, floor_reads_paused, act
):
    # Analyzed so, the live table is empty as far as the planner knows, and a walk of any index that holds the
    # job's id costs it as little as a seek: the act must have no such index to walk.
    hold_snapshot()
    run_jobs(BETWEEN_ROUNDS)
    analyzed_live_table()
    scanned = indexes_scanned_by(lambda job: act(client, worker, job), claimed(enqueue, claim, PLANNED_GENERIC_AFTER))
    assert set(scanned) <= {"jobs_live_pkey"}, scanned
