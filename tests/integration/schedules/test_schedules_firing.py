"""A pass of the ticker fires its due schedules in bounded batches, each one write transaction: every due
schedule's job exactly once, a tick whose job exists already costs only that tick, and tickers racing on
the same due schedules still enqueue one job per tick."""

from __future__ import annotations

import contextlib
import logging
import threading
from datetime import UTC, datetime

from sqlalchemy import func, select, update

from queuelog import schedules
from queuelog.extensions import db
from queuelog.models import Job, Schedule
from queuelog.schedules import firing

TICK = datetime(2030, 1, 1, 10, 0, tzinfo=UTC)
SOON_AFTER = datetime(2030, 1, 1, 10, 0, 0, 200_000, tzinfo=UTC)


def create_due(count: int, **fields) -> list[str]:
    """``count`` every-minute schedules, all due at TICK; their names."""
    names = [f"due-{index:04d}" for index in range(count)]
    for name in names:
        schedules.create_schedule({"name": name, "every_seconds": 60, "job": {"type": "noop"}, **fields})
    with db.engine.begin() as conn:
        conn.execute(update(Schedule.__table__).values(next_run_at=TICK))
    return names


def jobs_by_schedule() -> dict[str, list]:
    """Each schedule's jobs' ticks."""
    with db.engine.connect() as conn:
        rows = conn.execute(select(Job.schedule, Job.scheduled_for).where(Job.schedule.is_not(None))).all()
    ticks: dict[str, list] = {}
    for row in rows:
        ticks.setdefault(row.schedule, []).append(row.scheduled_for)
    return ticks


def count_batches(monkeypatch) -> list[int]:
    """The jobs enqueued by each of the firing's write transactions, in order (filled as they run)."""
    batches: list[int] = []
    transaction, enqueue = firing.write_transaction, firing.enqueue_job

    @contextlib.contextmanager
    def counted_transaction():
        batches.append(0)
        with transaction() as conn:
            yield conn

    def counted_enqueue(*args):
        batches[-1] += 1
        return enqueue(*args)

    monkeypatch.setattr(firing, "write_transaction", counted_transaction)
    monkeypatch.setattr(firing, "enqueue_job", counted_enqueue)
    return batches


def test_one_pass_fires_all_300_due_schedules_once_each_in_transactions_of_at_most_a_batch(app, monkeypatch):
    names = create_due(300)
    monkeypatch.setattr(firing, "FIRE_BATCH", 100)
    batches = count_batches(monkeypatch)
    assert schedules.fire_due(SOON_AFTER) == 300
    assert jobs_by_schedule() == {name: [TICK] for name in names}
    assert sum(batches) == 300 and len(batches) >= 3 and max(batches) <= 100
    states = schedules.list_schedules()
    assert {state.next_run_at for state in states} == {datetime(2030, 1, 1, 10, 1, tzinfo=UTC)}
    assert all(state.last_run_at == TICK and state.last_job_id is not None for state in states)


def test_a_batch_past_its_time_leaves_the_rest_of_the_due_schedules_to_the_next_batch(app, monkeypatch):
    create_due(3)
    monkeypatch.setattr(firing, "BATCH_SECONDS", 0)
    monkeypatch.setattr(firing, "CAS_CHUNK", 1)
    due = firing.due_at(SOON_AFTER)
    fired, left = firing.fire_batch(due, SOON_AFTER)
    assert fired == 1 and [each.state.spec.name for each in left] == ["due-0001", "due-0002"]
    assert schedules.fire_due(SOON_AFTER) == 2


def test_a_batch_where_one_ticks_job_exists_already_fires_all_the_others(app, make_job, caplog):
    names = create_due(5)
    make_job(type="noop", schedule="due-0002", scheduled_for=TICK)  # the belt trips on this one
    with caplog.at_level(logging.ERROR, logger="queuelog.schedules"):
        assert schedules.fire_due(SOON_AFTER) == 4
    assert jobs_by_schedule() == {name: [TICK] for name in names}  # due-0002's is the one made before
    assert "schedule due-0002: a job for tick 2030-01-01T10:00:00+00:00 exists already" in caplog.text
    # Moved on without a job: the tick is not tried again, and the next one fires.
    assert schedules.get_schedule("due-0002").next_run_at == datetime(2030, 1, 1, 10, 1, tzinfo=UTC)
    assert schedules.fire_due(SOON_AFTER) == 0
    assert schedules.fire_due(datetime(2030, 1, 1, 10, 1, 0, 100_000, tzinfo=UTC)) == 5


def test_a_batch_fires_around_a_paused_schedule_and_one_whose_type_left_the_allowlist(app, caplog):
    create_due(3)
    schedules.update_schedule("due-0000", {"paused": True})
    schedules.update_schedule("due-0001", {"job": {"type": "email"}})
    with db.engine.begin() as conn:  # both changes moved the next tick: back to the due one
        conn.execute(update(Schedule.__table__).values(next_run_at=TICK))
    app.config["JOB_TYPES"] = [name for name in app.config["JOB_TYPES"] if name != "email"]
    with caplog.at_level(logging.WARNING, logger="queuelog.schedules"):
        assert schedules.fire_due(SOON_AFTER) == 1
    assert jobs_by_schedule() == {"due-0002": [TICK]}
    assert "schedule due-0001: job type 'email' is no longer on QUEUELOG_JOB_TYPES" in caplog.text
    assert schedules.get_schedule("due-0000").next_run_at == TICK  # paused: not moved on
    assert schedules.get_schedule("due-0001").next_run_at > SOON_AFTER  # skipped, moved on


def test_two_tickers_racing_on_the_same_200_due_schedules_enqueue_one_job_per_tick(app, monkeypatch):
    names = create_due(200)
    monkeypatch.setattr(firing, "FIRE_BATCH", 20)  # many batches, so the two interleave
    barrier, fired, errors = threading.Barrier(2), [], []

    def ticker():
        with app.app_context():
            barrier.wait()
            try:
                fired.append(schedules.fire_due(SOON_AFTER))
            except Exception as error:  # noqa: BLE001 - reported by the assertion below
                errors.append(error)

    threads = [threading.Thread(target=ticker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and sum(fired) == 200
    assert jobs_by_schedule() == {name: [TICK] for name in names}
    with db.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Job)).scalar_one() == 200
