"""The type rollups: no state change writes them; the rollup step folds closed minutes of the event log into
per-minute and per-hour rows, once per minute however often or from however many places it runs, and
``flask purge`` prunes old periods. Percentiles come from the histogram buckets."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from queuelog.core.clock import utcnow
from queuelog.core.timing_buckets import OVERFLOW, bucket_of, percentile, upper_edge
from queuelog.extensions import db
from queuelog.models import RollupMark
from queuelog.queue import rollups
from queuelog.queue.rollups import HOUR, MINUTE, period_of, settle_lag
from queuelog.schedules import ticker
from tests.support.rollups import job_with_events, minute_ago, run_job, store, stored_rows, totals

MS = timedelta(milliseconds=1)


def the_mark() -> int | None:
    with db.engine.connect() as conn:
        return conn.execute(select(RollupMark.__table__.c.through)).scalar()


def test_no_state_change_writes_a_rollup_row(client, enqueue, claim, worker):
    enqueue(type="report")
    job = claim()
    assert (
        client.post(f"/jobs/{job['id']}/complete", json={"claim_token": job["claim_token"]}, headers=worker).status_code
        == 200
    )
    assert stored_rows(MINUTE) == {} and stored_rows(HOUR) == {}


def test_flask_rollup_counts_each_minutes_jobs_per_type_and_says_through_when(app, runner):
    m10, m9 = minute_ago(10), minute_ago(9)
    run_job("report", m10 + timedelta(seconds=1), wait=100 * MS, run=2 * MS)  # all in minute -10
    run_job(
        "report", m10 + timedelta(seconds=2), wait=1000 * MS, run=timedelta(seconds=58), outcome="failed"
    )  # fails in minute -9
    run_job("email", m9 + timedelta(seconds=5), wait=1 * MS, run=1 * MS)
    result = runner.invoke(args=["rollup"])
    first, through = period_of(m10, MINUTE), the_mark()
    assert result.output == (
        f"rolled up {(through - first) // MINUTE} minutes through "
        f"{rollups.as_time(through - MINUTE):%Y-%m-%d %H:%M} UTC\n"
    )
    second = first + MINUTE
    assert stored_rows(MINUTE) == {
        (first, "enqueued", "report", 0): 2,
        (first, "wait", "report", bucket_of(100 * MS)): 1,
        (first, "wait", "report", bucket_of(1000 * MS)): 1,
        (first, "completed", "report", 0): 1,
        (first, "run", "report", bucket_of(2 * MS)): 1,
        (second, "failed", "report", 0): 1,
        (second, "run", "report", bucket_of(timedelta(seconds=58))): 1,
        (second, "enqueued", "email", 0): 1,
        (second, "wait", "email", 1): 1,
        (second, "completed", "email", 0): 1,
        (second, "run", "email", 1): 1,
    }


def test_the_run_is_timed_from_the_latest_claim_before_its_end(app):
    start = minute_ago(20)
    job_with_events(
        "email",
        start,
        ("claimed", "running", start + 1 * MS),
        ("requeued", "pending", start + 3 * MS),
        ("claimed", "running", start + 1000 * MS),
        ("completed", "completed", start + 1100 * MS),
    )
    rollups.roll_up(utcnow())
    period = period_of(start, MINUTE)
    runs = {bucket: n for (p, metric, _t, bucket), n in stored_rows().items() if metric == "run" and p == period}
    assert runs == {bucket_of(2 * MS): 1, bucket_of(100 * MS): 1}


def test_the_wait_is_from_the_jobs_due_time_to_its_claim(app):
    start = minute_ago(20)
    job_with_events(
        "email", start, ("claimed", "running", start + timedelta(seconds=40)), run_at=start + timedelta(seconds=30)
    )  # scheduled 30 s after enqueue, waited 10 s
    rollups.roll_up(utcnow())
    waits = [bucket for (_p, metric, _t, bucket) in stored_rows() if metric == "wait"]
    assert waits == [bucket_of(timedelta(seconds=10))]


def test_the_hour_rows_are_the_sums_of_their_minutes(app):
    start = minute_ago(20)
    for i in range(3):
        run_job("email", start + timedelta(seconds=i), wait=1 * MS, run=1 * MS)
    run_job("email", start + timedelta(minutes=1), wait=1 * MS, run=1 * MS, outcome="failed")
    rollups.roll_up(utcnow())
    assert totals(HOUR) == {("enqueued", "email"): 4, ("completed", "email"): 3, ("failed", "email"): 1}


def test_rolling_up_again_what_was_rolled_counts_nothing_twice(app):
    start = minute_ago(20)
    run_job("email", start, wait=1 * MS, run=1 * MS)
    rollups.roll_up(utcnow())
    first = (stored_rows(MINUTE), stored_rows(HOUR))
    with db.engine.begin() as conn:  # as if the step had died before moving its mark: it rolls them again
        conn.execute(RollupMark.__table__.update().values(through=period_of(start, MINUTE)))
    rollups.roll_up(utcnow())
    assert (stored_rows(MINUTE), stored_rows(HOUR)) == first


def test_a_second_step_with_nothing_closed_since_rolls_nothing(app, runner):
    run_job("email", minute_ago(20), wait=1 * MS, run=1 * MS)
    runner.invoke(args=["rollup"])
    assert runner.invoke(args=["rollup"]).output.startswith("nothing to roll up: rolled up through ")
    assert totals() == {("enqueued", "email"): 1, ("wait", "email"): 1, ("completed", "email"): 1, ("run", "email"): 1}


def test_steps_from_four_threads_at_once_count_each_minute_once(app):
    start = minute_ago(30)
    for i in range(20):
        run_job("email", start + timedelta(minutes=i % 10, seconds=i), wait=1 * MS, run=1 * MS)
    now = utcnow()
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def step() -> None:
        with app.app_context():
            barrier.wait()
            try:
                rollups.roll_up(now, most=10)  # every thread wants the same ten minutes
                rollups.roll_up(now, most=10)
            except BaseException as error:  # noqa: BLE001 - reported below
                errors.append(error)

    threads = [threading.Thread(target=step) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert totals(MINUTE)[("completed", "email")] == 20 and totals(HOUR)[("completed", "email")] == 20


def test_a_step_rolls_at_most_the_minutes_it_is_given(app):
    start = minute_ago(30)
    run_job("email", start, wait=1 * MS, run=1 * MS)
    rolled = rollups.roll_up(utcnow(), most=5)
    assert rolled.minutes == 5 and the_mark() == period_of(start, MINUTE) + 5 * MINUTE


def test_a_minute_inside_the_settle_lag_is_not_rolled(app):
    now = datetime(2026, 12, 1, 1, 43, tzinfo=UTC) + settle_lag() - timedelta(seconds=1)  # 01:42: not settled
    run_job("email", datetime(2026, 12, 1, 1, 41, 5, tzinfo=UTC), wait=1 * MS, run=1 * MS)
    run_job("email", datetime(2026, 12, 1, 1, 42, 5, tzinfo=UTC), wait=1 * MS, run=1 * MS)
    rolled = rollups.roll_up(now)
    assert rolled.last_minute == datetime(2026, 12, 1, 1, 41, tzinfo=UTC)
    assert {period for (period, *_rest) in stored_rows()} == {period_of(rolled.last_minute, MINUTE)}
    later = rollups.roll_up(now + timedelta(seconds=1))
    assert later.minutes == 1 and totals()[("completed", "email")] == 2


def test_with_no_event_the_first_step_marks_the_closed_minutes_rolled(runner):
    assert runner.invoke(args=["rollup"]).output.startswith("nothing to roll up: rolled up through ")
    assert the_mark() is not None


def test_the_ticker_steps_again_at_once_while_catching_up_else_after_the_next_minute_settles(app):
    now = datetime(2026, 12, 1, 1, 42, 30, tzinfo=UTC)
    assert ticker._next_roll(now, rollups.Rolled(rollups.MOST_MINUTES, 0), rollups) == now
    after = ticker._next_roll(now, rollups.Rolled(1, 0), rollups)
    settled = datetime(2026, 12, 1, 1, 43, tzinfo=UTC) + settle_lag()
    assert settled < after < settled + timedelta(seconds=1)


def test_purge_prunes_minutes_after_48_hours_and_hours_after_8_days(runner, app):
    now = utcnow()
    store(MINUTE, "completed", now - timedelta(hours=49), 1)
    store(MINUTE, "wait", now - timedelta(hours=49), 1, bucket=5)
    store(MINUTE, "completed", now - timedelta(hours=47), 10)
    store(HOUR, "completed", now - timedelta(days=8, hours=2), 100)
    store(HOUR, "completed", now - timedelta(days=7), 1000)
    result = runner.invoke(args=["purge"])
    assert result.output == "purged 0 jobs (0 events); pruned 3 rollup rows\n"
    assert totals(MINUTE) == {("completed", "email"): 10}
    assert totals(HOUR) == {("completed", "email"): 1000}


def test_a_time_falls_in_the_bucket_whose_upper_edge_holds_it():
    for ms, bucket in ((0, 1), (1, 1), (1.2, 2), (2, 3), (100, 15), (1000, 21)):
        assert bucket_of(timedelta(milliseconds=ms)) == bucket
        assert upper_edge(bucket) >= timedelta(milliseconds=ms)
        assert upper_edge(bucket) <= timedelta(milliseconds=max(ms, 1)) * 1.4143
    assert bucket_of(timedelta(hours=2)) == OVERFLOW and upper_edge(OVERFLOW) is None
    assert bucket_of(timedelta(seconds=-3)) == 1


def test_a_percentile_is_the_first_bucket_whose_running_total_reaches_it():
    counts = {3: 50, 10: 45, 20: 5}
    assert percentile(counts, 0.5) == 3
    assert percentile(counts, 0.95) == 10
    assert percentile(counts, 0.96) == 20
    assert percentile({}, 0.5) is None


def test_a_period_starts_on_the_minute_and_the_hour():
    at = datetime(2026, 11, 30, 21, 47, 13, tzinfo=UTC)
    assert datetime.fromtimestamp(period_of(at, MINUTE), UTC) == at.replace(second=0)
    assert datetime.fromtimestamp(period_of(at, HOUR), UTC) == at.replace(minute=0, second=0)


def test_a_started_ticker_rolls_up_the_closed_minutes_at_once(app):
    run_job("email", minute_ago(20), wait=1 * MS, run=1 * MS)
    stop = ticker.start(app)
    try:
        deadline = time.monotonic() + 20
        while the_mark() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
    assert totals()[("completed", "email")] == 1
