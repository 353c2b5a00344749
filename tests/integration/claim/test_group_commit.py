"""Group commit with real threads on a real database: writes that arrive together share one COMMIT.

Each member of a group is answered only after the group's COMMIT; a member whose body raises undoes
only its own work; a COMMIT that fails fails every member. ``one_group`` makes a group on purpose: the
first member holds its transaction open until every other thread waits for the baton, so they join it.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

import pytest
from sqlalchemy import create_engine, insert, select, text
from sqlalchemy.exc import IntegrityError, OperationalError

from queuelog import queue
from queuelog.auth.keys import authenticate, create_key
from queuelog.config import SettingError, parse_settings
from queuelog.core.clock import utcnow
from queuelog.database.group_commit import GroupCommitter, committer_of
from queuelog.database.transactions import WRITE, group_commit_applies, write_transaction
from queuelog.extensions import db
from queuelog.models import Job, JobEvent
from queuelog.queue.enqueueing import NewJob
from queuelog.waiting import wakeup
from tests.support.database import test_db_kind
from tests.support.factories import event_rows

jobs = Job.__table__
events = JobEvent.__table__

THREADS = 16
JOBS_PER_THREAD = 50
WAIT_SECONDS = 30  # generous: only a hang should ever reach it


@pytest.fixture
def config_overrides(request):
    """Group commit on whatever the database, so the PostgreSQL run tests it too (a test may say otherwise)."""
    return {"GROUP_COMMIT": "on", "GROUP_COMMIT_MAX_MEMBERS": 64, **getattr(request, "param", {})}


@dataclass
class Outcome:
    """How one thread's write ended: the body's value, or the exception that came out of the block."""

    value: object = None
    error: BaseException | None = None
    wal_syncs_on_leaving: int = 0  # fsyncs of the WAL done when the thread left the block


def insert_job(conn, n: int) -> int:
    """A pending job with payload {"n": n}, written on the transaction's connection; returns its id."""
    now = utcnow()
    return conn.execute(
        insert(jobs)
        .values(
            type="email",
            payload=json.dumps({"n": n}),
            priority=0,
            status="pending",
            retry_count=0,
            max_retries=3,
            stall_count=0,
            run_at=now,
            created_at=now,
            updated_at=now,
        )
        .returning(jobs.c.id)
    ).scalar_one()


def payloads_stored() -> list[int]:
    with db.engine.connect() as conn:
        return sorted(json.loads(payload)["n"] for payload in conn.execute(select(jobs.c.payload)).scalars())


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.001)


def one_group(app, bodies, committer: GroupCommitter | None = None) -> list[Outcome]:
    """Run each ``body(conn)`` in a thread of its own inside ``write_transaction()`` (or ``committer``'s
    transaction), all in one group."""
    outcomes = [Outcome() for _ in bodies]
    leader_inside = threading.Event()

    def member(index: int) -> None:
        with app.app_context():
            transaction = write_transaction() if committer is None else committer.transaction(WAIT_SECONDS)
            try:
                with transaction as conn:
                    if index == 0:
                        leader_inside.set()
                        group = committer or committer_of(db.engine)
                        wait_until(lambda: group.waiting == len(bodies) - 1, "every other member waiting")
                    outcomes[index].value = bodies[index](conn)
            except Exception as error:
                outcomes[index].error = error
            outcomes[index].wal_syncs_on_leaving = (committer or committer_of(db.engine)).stats.wal_syncs

    threads = [threading.Thread(target=member, args=(index,)) for index in range(len(bodies))]
    threads[0].start()
    assert leader_inside.wait(WAIT_SECONDS)
    for thread in threads[1:]:
        thread.start()
    for thread in threads:
        thread.join(WAIT_SECONDS)
        assert not thread.is_alive(), "a member never left write_transaction()"
    return outcomes


def run_threads(app, work, count: int) -> list:
    """``work(index)`` in ``count`` threads at once, each in the app's context; their results in order."""
    results: list = [None] * count
    failures: list[BaseException] = []
    start = threading.Barrier(count)

    def run(index: int) -> None:
        with app.app_context():
            try:
                start.wait(WAIT_SECONDS)
                results[index] = work(index)
            except BaseException as error:  # reported by the test thread
                failures.append(error)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not failures, failures[:3]
    assert not any(thread.is_alive() for thread in threads)
    return results


# --- many writers at once -------------------------------------------------------------------------


def test_sixteen_threads_enqueue_claim_and_complete_fifty_jobs_each_and_every_job_is_done_once(app):
    producer = authenticate(create_key("producer-many", "producer", "high"))
    worker = authenticate(create_key("worker-many", "worker"))

    def enqueue(index: int) -> list[int]:
        return [
            queue.enqueue(producer, [NewJob("email", {"thread": index, "n": n})])[0].job.id
            for n in range(JOBS_PER_THREAD)
        ]

    def claim_and_complete(_index: int) -> list[int]:
        done = []
        for _ in range(JOBS_PER_THREAD):
            [job] = queue.claim(worker)
            done.append(queue.complete(worker, job.id, job.claim_token).id)
        return done

    enqueued = [job_id for ids in run_threads(app, enqueue, THREADS) for job_id in ids]
    completed = [job_id for ids in run_threads(app, claim_and_complete, THREADS) for job_id in ids]

    assert len(enqueued) == len(set(enqueued)) == THREADS * JOBS_PER_THREAD
    assert sorted(completed) == sorted(enqueued)
    with db.engine.connect() as conn:
        stored = conn.execute(select(jobs.c.id, jobs.c.status).order_by(jobs.c.id)).all()
    assert stored == [(job_id, "completed") for job_id in sorted(enqueued)]
    assert {tuple(row.event for row in event_rows(job_id)) for job_id in enqueued} == {
        ("enqueued", "claimed", "completed")
    }


def test_writes_that_arrive_together_share_commits(app):
    producer = authenticate(create_key("producer-grouped", "producer"))
    run_threads(app, lambda index: [queue.enqueue(producer, [NewJob("email", {"n": n})]) for n in range(20)], 8)

    stats = committer_of(db.engine).stats
    assert stats.committed_members >= 8 * 20
    assert stats.commits < stats.committed_members
    assert stats.mean_group_size > 1


# --- one group, made on purpose -------------------------------------------------------------------


def test_every_member_of_a_group_is_committed_by_one_commit(app):
    outcomes = one_group(app, [lambda conn, n=n: insert_job(conn, n) for n in range(6)])

    assert [outcome.error for outcome in outcomes] == [None] * 6
    assert payloads_stored() == list(range(6))
    stats = committer_of(db.engine).stats
    assert (stats.commits, stats.committed_members) == (1, 6)


def test_a_member_whose_body_raises_leaves_no_trace_and_gets_its_own_exception(app):
    def gives_up(conn):
        insert_job(conn, 3)
        raise ValueError("member 3 gives up")

    bodies = [lambda conn, n=n: insert_job(conn, n) for n in range(6)]
    bodies[3] = gives_up
    outcomes = one_group(app, bodies)

    assert isinstance(outcomes[3].error, ValueError) and str(outcomes[3].error) == "member 3 gives up"
    assert [outcome.error for index, outcome in enumerate(outcomes) if index != 3] == [None] * 5
    assert payloads_stored() == [0, 1, 2, 4, 5]


def test_the_first_member_raising_undoes_only_its_own_work(app):
    def gives_up(conn):
        insert_job(conn, 0)
        raise ValueError("the first member gives up")

    outcomes = one_group(app, [gives_up] + [lambda conn, n=n: insert_job(conn, n) for n in range(1, 5)])

    assert isinstance(outcomes[0].error, ValueError)
    assert [outcome.error for outcome in outcomes[1:]] == [None] * 4
    assert payloads_stored() == [1, 2, 3, 4]


@pytest.mark.skipif(test_db_kind() != "sqlite", reason="a deferred foreign key of SQLite forces the COMMIT to fail")
def test_a_failed_commit_fails_every_member_of_the_group(app):
    def breaks_the_commit(conn):
        # Checked only at COMMIT: an event of a job that does not exist.
        conn.execute(text("PRAGMA defer_foreign_keys = ON"))
        conn.execute(
            insert(events).values(
                job_id=999_999, event="enqueued", to_status="pending", actor="test", attempt=0, at=utcnow()
            )
        )

    bodies = [lambda conn, n=n: insert_job(conn, n) for n in range(5)]
    bodies[2] = breaks_the_commit
    outcomes = one_group(app, bodies)

    assert all(isinstance(outcome.error, IntegrityError) for outcome in outcomes), outcomes
    assert all("FOREIGN KEY" in str(outcome.error) for outcome in outcomes)
    assert payloads_stored() == []
    assert committer_of(db.engine).stats.failed_groups == 1


@pytest.mark.skipif(test_db_kind() != "sqlite", reason="a deferred foreign key of SQLite forces the COMMIT to fail")
def test_after_a_failed_commit_the_next_writes_commit(app):
    def breaks_the_commit(conn):
        conn.execute(text("PRAGMA defer_foreign_keys = ON"))
        conn.execute(
            insert(events).values(
                job_id=999_999, event="enqueued", to_status="pending", actor="test", attempt=0, at=utcnow()
            )
        )

    one_group(app, [lambda conn: insert_job(conn, 0), breaks_the_commit])
    outcomes = one_group(app, [lambda conn, n=n: insert_job(conn, n) for n in range(10, 13)])

    assert [outcome.error for outcome in outcomes] == [None] * 3
    assert payloads_stored() == [10, 11, 12]


# --- on disk before the answer --------------------------------------------------------------------


@pytest.mark.skipif(test_db_kind() != "sqlite", reason="PostgreSQL's COMMIT is durable when it returns")
def test_every_member_leaves_only_after_an_fsync_of_the_wal_that_followed_the_groups_commit(app):
    one_group(app, [lambda conn: insert_job(conn, 0)])
    syncs_before = committer_of(db.engine).stats.wal_syncs

    outcomes = one_group(app, [lambda conn, n=n: insert_job(conn, n) for n in range(1, 6)])

    assert [outcome.error for outcome in outcomes] == [None] * 5
    assert min(outcome.wal_syncs_on_leaving for outcome in outcomes) == syncs_before + 1


@pytest.mark.skipif(test_db_kind() != "sqlite", reason="PostgreSQL's COMMIT is durable when it returns")
def test_a_wal_that_cannot_be_synced_fails_every_member_and_every_later_group(app):
    # procfs refuses fsync (EINVAL): a real failed fsync, as a failing disk gives one.
    committer = GroupCommitter(db.engine.execution_options(**{WRITE: True}), 16, wal_path="/proc/self/stat")

    first = one_group(app, [lambda conn, n=n: insert_job(conn, n) for n in range(4)], committer)
    later = one_group(app, [lambda conn, n=n: insert_job(conn, n) for n in range(10, 12)], committer)

    assert all(isinstance(outcome.error, OperationalError) for outcome in first + later), first + later
    assert all("fdatasync of the SQLite WAL" in str(outcome.error) for outcome in first + later)


@pytest.mark.skipif(test_db_kind() != "sqlite", reason="SQLite's synchronous setting")
@pytest.mark.parametrize("config_overrides", [{"DATABASE_POOL_SIZE": 1, "DATABASE_MAX_OVERFLOW": 1}], indirect=True)
def test_the_groups_connection_goes_back_to_the_pool_syncing_each_commit_again(app):
    one_group(app, [lambda conn, n=n: insert_job(conn, n) for n in range(3)])

    with db.engine.connect() as conn:  # the pool's one connection: the group's
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar_one() == 2  # FULL, as configured


@pytest.mark.skipif(test_db_kind() != "sqlite", reason="SQLite's journal modes")
def test_a_database_in_a_rollback_journal_keeps_syncing_inside_each_commit(app, tmp_path):
    # Where WAL is refused (no shared memory), NORMAL would leave commits unsynced: the group stays at FULL.
    rollback_journal = create_engine(f"sqlite:///{tmp_path / 'rollback-journal.db'}")
    committer = GroupCommitter(rollback_journal, 16, wal_path=f"{tmp_path / 'rollback-journal.db'}-wal")

    outcomes = one_group(app, [lambda conn: conn.exec_driver_sql("PRAGMA synchronous").scalar_one()] * 3, committer)

    assert [(outcome.error, outcome.value) for outcome in outcomes] == [(None, 2)] * 3  # FULL
    assert committer.stats.wal_syncs == 0
    rollback_journal.dispose()


@pytest.mark.skipif(test_db_kind() != "sqlite", reason="SQLite's synchronous setting")
@pytest.mark.parametrize("config_overrides", [{"SQLITE_SYNCHRONOUS": "NORMAL"}], indirect=True)
def test_at_synchronous_normal_a_group_commits_without_syncing_the_wal_itself(app):
    outcomes = one_group(app, [lambda conn, n=n: insert_job(conn, n) for n in range(3)])

    assert [outcome.error for outcome in outcomes] == [None] * 3
    assert payloads_stored() == [0, 1, 2]
    assert committer_of(db.engine).stats.wal_syncs == 0


# --- after the commit -----------------------------------------------------------------------------


def test_a_waiting_claim_is_woken_after_the_groups_commit_and_sees_every_job_of_it(app):
    engine = db.engine
    waker = wakeup.waker_for(engine)
    if engine.dialect.name == "postgresql":
        # The LISTEN thread wakes everyone once when it connects (for what it may have missed).
        wait_until(lambda: waker.listening, "the LISTEN connection up")
        time.sleep(0.2)
    seen = waker.generation
    visible_at_wake_up: list[int] = []

    def waiting_claim() -> None:
        if waker.wait(seen, WAIT_SECONDS):
            with engine.connect() as conn:  # a reader of its own, as a woken claim is
                visible_at_wake_up.append(conn.execute(text("SELECT COUNT(*) FROM jobs")).scalar_one())

    watcher = threading.Thread(target=waiting_claim)
    watcher.start()
    outcomes = one_group(app, [lambda conn, n=n: _enqueue_on(conn, n) for n in range(5)])
    watcher.join(WAIT_SECONDS)

    assert [outcome.error for outcome in outcomes] == [None] * 5
    assert visible_at_wake_up == [5]


def _enqueue_on(conn, n: int) -> int:
    """What an enqueue does inside its transaction: the job, and the announcement that it is claimable."""
    job_id = insert_job(conn, n)
    wakeup.jobs_ready(conn)
    return job_id


# --- the setting ----------------------------------------------------------------------------------


def test_group_commit_is_on_for_sqlite_and_off_for_postgresql_by_default():
    assert parse_settings({})["GROUP_COMMIT"] == "auto"
    sqlite = create_engine("sqlite://")
    postgresql = create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")  # never connects
    assert group_commit_applies(sqlite, "auto") is True
    assert group_commit_applies(postgresql, "auto") is False
    assert group_commit_applies(postgresql, "on") is True
    assert group_commit_applies(sqlite, "off") is False


def test_an_unknown_group_commit_setting_stops_the_start_naming_its_variable():
    with pytest.raises(SettingError, match="QUEUELOG_GROUP_COMMIT must be auto, on or off"):
        parse_settings({"GROUP_COMMIT": "sometimes"})


@pytest.mark.parametrize("config_overrides", [{"GROUP_COMMIT": "off"}], indirect=True)
def test_with_group_commit_off_every_write_commits_on_its_own(app):
    producer = authenticate(create_key("producer-alone", "producer"))
    run_threads(app, lambda index: queue.enqueue(producer, [NewJob("email", {"n": index})]), 4)

    assert committer_of(db.engine) is None
    assert payloads_stored() == [0, 1, 2, 3]
