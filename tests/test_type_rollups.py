"""The type rollups: the queue's write path counts what it does per type, minute and hour, in the same
transaction, and ``flask purge`` prunes old periods. Percentiles come from the histogram buckets."""
from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from queuelog import queue, sql
from queuelog.clock import utcnow
from queuelog.extensions import db
from queuelog.keys import authenticate
from queuelog.models import TypeRollup
from queuelog.queue import moves
from queuelog.queue.rollups import HOUR, MINUTE, period_of
from queuelog.timing_buckets import OVERFLOW, bucket_of, percentile, upper_edge

rollups = TypeRollup.__table__


def counted(span: int = MINUTE) -> dict[tuple[str, str], int]:
    """(metric, type) → jobs, over every period and bucket of ``span``."""
    totals: dict[tuple[str, str], int] = {}
    with db.engine.connect() as conn:
        for metric, job_type, n in conn.execute(
                select(rollups.c.metric, rollups.c.type, rollups.c.n).where(rollups.c.span == span)):
            totals[(metric, job_type)] = totals.get((metric, job_type), 0) + n
    return totals


def add(span: int, metric: str, at: datetime, n: int = 1, job_type: str = "email", bucket: int = 0) -> None:
    with db.engine.begin() as conn:
        sql.add_rollups(conn, [(span, metric, period_of(at, span), job_type, bucket, 0, n)])


def test_a_job_run_through_the_api_is_counted_enqueued_waited_run_and_completed(client, enqueue, claim, worker):
    enqueue(type="report")
    job = claim()
    assert client.post(f"/jobs/{job['id']}/complete", json={"claim_token": job["claim_token"]},
                       headers=worker).status_code == 200
    assert counted(MINUTE) == {("enqueued", "report"): 1, ("wait", "report"): 1, ("run", "report"): 1,
                               ("completed", "report"): 1}
    assert counted(HOUR) == {("enqueued", "report"): 1, ("completed", "report"): 1}


def test_a_batch_enqueue_adds_each_types_jobs_in_one_statement(client, producer):
    response = client.post("/jobs/batch", headers=producer, json={"jobs": [
        {"type": "email"}, {"type": "email"}, {"type": "report"}, {"type": "email"}]})
    assert response.status_code == 201
    assert counted(MINUTE) == {("enqueued", "email"): 3, ("enqueued", "report"): 1}


def test_a_failure_with_retries_left_times_its_run_but_is_not_a_failure(client, enqueue, claim, worker):
    enqueue(max_retries=2)
    job = claim()
    client.post(f"/jobs/{job['id']}/fail", json={"claim_token": job["claim_token"], "error": "smtp"}, headers=worker)
    totals = counted(MINUTE)
    assert totals[("run", "email")] == 1 and ("failed", "email") not in totals


def test_a_final_failure_is_counted_failed_with_its_run(client, enqueue, claim, worker):
    enqueue(max_retries=0)
    job = claim()
    client.post(f"/jobs/{job['id']}/fail", json={"claim_token": job["claim_token"], "error": "x"}, headers=worker)
    totals = counted(MINUTE)
    assert totals[("failed", "email")] == 1 and totals[("run", "email")] == 1


def test_a_refused_completion_counts_nothing(client, enqueue, claim, worker):
    enqueue()
    job = claim()
    assert client.post(f"/jobs/{job['id']}/complete", json={"claim_token": "not-the-token"},
                       headers=worker).status_code == 409
    assert ("completed", "email") not in counted(MINUTE) and ("run", "email") not in counted(MINUTE)


def test_counts_of_one_period_add_up_in_one_row(app):
    now = utcnow()
    add(MINUTE, "completed", now, 2)
    add(MINUTE, "completed", now, 3)
    with db.engine.connect() as conn:
        assert conn.execute(select(rollups.c.n).where(rollups.c.metric == "completed")).scalars().all() == [5]


def test_purge_prunes_minutes_after_48_hours_and_hours_after_8_days(runner, app):
    now = utcnow()
    add(MINUTE, "completed", now - timedelta(hours=49), 1)
    add(MINUTE, "wait", now - timedelta(hours=49), 1, bucket=5)
    add(MINUTE, "completed", now - timedelta(hours=47), 10)
    add(HOUR, "completed", now - timedelta(days=8, hours=2), 100)
    add(HOUR, "completed", now - timedelta(days=7), 1000)
    result = runner.invoke(args=["purge"])
    assert result.output == "purged 0 jobs (0 events); pruned 3 rollup rows\n"
    assert counted(MINUTE) == {("completed", "email"): 10}
    assert counted(HOUR) == {("completed", "email"): 1000}


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


def test_a_count_rolls_back_with_the_change_it_counts(app, make_key, make_job, read_job, monkeypatch):
    worker = authenticate(make_key("worker", "worker-a"))
    job_id = make_job(status="running")   # held by worker-a under token-a

    def later_step_fails(*args, **kwargs):
        raise RuntimeError("a later step of the same transaction failed")

    monkeypatch.setattr(moves, "observe_changes", later_step_fails)   # runs after the rollups' UPSERT
    with pytest.raises(RuntimeError):
        queue.complete(worker, job_id, "token-a")
    assert read_job(job_id).status == "running"
    assert counted(MINUTE) == {} and counted(HOUR) == {}


def test_concurrent_completions_of_one_type_are_all_counted(app, make_key):
    producer = authenticate(make_key("producer", "producer-a"))
    worker = authenticate(make_key("worker", "worker-a"))
    queue.enqueue(producer, [queue.NewJob("email", {})] * 40, batch=True)
    held = queue.claim(worker, ["email"], 40)

    def complete_each(rows) -> None:
        with app.app_context():
            for row in rows:
                queue.complete(worker, row.id, row.claim_token)

    threads = [threading.Thread(target=complete_each, args=(held[i::8],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    totals = counted(MINUTE)
    assert totals[("completed", "email")] == 40 and totals[("run", "email")] == 40
    assert counted(HOUR)[("completed", "email")] == 40
