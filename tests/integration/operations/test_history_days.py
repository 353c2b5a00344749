"""PostgreSQL keeps live jobs apart from history, and history in days (docs/storage.md). Retention drops whole days:
the jobs of a day go with their events, the live jobs and their events stay, and the live table is not touched.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import text

from queuelog.core.clock import utcnow
from queuelog.database.transactions import write_transaction
from queuelog.extensions import db
from queuelog.ops import retention
from queuelog.sql import partitions
from tests.support import plans
from tests.support.database import test_db_kind
from tests.support.table_stats import writes_of

pytestmark = pytest.mark.skipif(test_db_kind() != "postgresql", reason="partitioned history: PostgreSQL's layout")


def _tomorrow_after_midnight():
    """A cutoff just past the end of today: today's day of history is wholly before it."""
    now = utcnow().replace(tzinfo=None)
    return now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1, seconds=1)


@pytest.fixture(autouse=True)
def today_is_a_day(app):
    """Today has its day of history (a test before may have dropped it), and the days after it theirs."""
    now = utcnow().replace(tzinfo=None)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    for table in (partitions.JOBS, partitions.EVENTS):
        with write_transaction() as conn:
            known = partitions.days(conn, table)
        if not any(day.lower is not None and day.lower <= now < day.upper for day in known):
            with write_transaction() as conn:
                partitions.make_day(conn, table, midnight, midnight + partitions.DAY)
    retention.make_days_ahead(now)


@pytest.fixture
def run_to_the_end(client, worker, enqueue, claim):
    """run_to_the_end(): a job enqueued, claimed and completed; its id."""

    def _run() -> int:
        job_id = enqueue()["id"]
        held = claim()
        response = client.post(
            f"/jobs/{held['id']}/complete", json={"claim_token": held["claim_token"]}, headers=worker
        )
        assert response.status_code == 200, response.get_json()
        return job_id

    return _run


def _table_of(job_id: int) -> str:
    with db.engine.connect() as conn:
        return conn.execute(text("SELECT tableoid::regclass::text FROM jobs WHERE id = :id"), {"id": job_id}).scalar()


def test_a_live_job_is_in_the_live_table_and_a_finished_one_in_its_day(enqueue, run_to_the_end):
    finished = run_to_the_end()
    waiting = enqueue()["id"]
    assert _table_of(waiting) == "jobs_live"
    assert _table_of(finished).startswith(f"jobs_done_{utcnow():%Y%m%d}")


def test_retention_drops_a_day_of_finished_jobs_with_their_events(client, admin, run_to_the_end):
    finished = [run_to_the_end() for _ in range(3)]
    dropped = retention.drop_days_before(_tomorrow_after_midnight())
    assert dropped.jobs >= 3
    for job_id in finished:
        assert client.get(f"/jobs/{job_id}", headers=admin).status_code == 404
    with db.engine.connect() as conn:
        left = conn.execute(text("SELECT count(*) FROM job_events WHERE job_id = ANY(:ids)"), {"ids": finished})
        assert left.scalar() == 0


def test_retention_keeps_a_live_job_and_its_whole_event_log(client, admin, enqueue, claim, run_to_the_end):
    held = enqueue()["id"]
    claim()
    run_to_the_end()
    events_before = client.get(f"/jobs/{held}/events", headers=admin).get_json()
    retention.drop_days_before(_tomorrow_after_midnight())
    answer = client.get(f"/jobs/{held}", headers=admin)
    assert answer.status_code == 200 and answer.get_json()["status"] == "running"
    assert client.get(f"/jobs/{held}/events", headers=admin).get_json() == events_before


def test_a_job_finished_after_a_dropped_day_keeps_the_events_it_had_in_that_day(client, admin, run_to_the_end):
    finished = run_to_the_end()
    gone = run_to_the_end()
    midnight = utcnow().replace(tzinfo=None, hour=0, minute=0, second=0, microsecond=0)
    with write_transaction() as conn:
        partitions.make_day(conn, partitions.EVENTS, midnight - 2 * partitions.DAY, midnight - partitions.DAY)
        partitions.make_day(conn, partitions.JOBS, midnight - 2 * partitions.DAY, midnight - partitions.DAY)
        # Both jobs were enqueued the day before yesterday: the first finished today, the second that day.
        conn.exec_driver_sql(
            "UPDATE job_events SET bucket = %(then)s WHERE job_id IN (%(finished)s, %(gone)s) AND event = 'enqueued'",
            {"then": midnight - 2 * partitions.DAY + timedelta(hours=1), "finished": finished, "gone": gone},
        )
        conn.exec_driver_sql(
            "UPDATE jobs SET updated_at = %(then)s WHERE id = %(gone)s",
            {"then": midnight - 2 * partitions.DAY + timedelta(hours=2), "gone": gone},
        )
    events_before = client.get(f"/jobs/{finished}/events", headers=admin).get_json()
    dropped = retention.drop_days_before(midnight - partitions.DAY)
    assert dropped.jobs == 1
    assert client.get(f"/jobs/{gone}", headers=admin).status_code == 404
    assert client.get(f"/jobs/{finished}/events", headers=admin).get_json() == events_before


def test_dropping_a_day_of_history_writes_nothing_to_the_live_table(enqueue, run_to_the_end):
    for _ in range(5):
        run_to_the_end()
    for _ in range(3):
        enqueue()
    db.session.remove()
    before = writes_of(db.engine, "jobs_live")
    dropped = retention.drop_days_before(_tomorrow_after_midnight())
    assert dropped.jobs >= 5
    assert writes_of(db.engine, "jobs_live") == before


def test_a_day_holding_a_parent_that_a_live_job_waits_on_is_kept(client, admin, producer, worker, enqueue, claim):
    parent = enqueue()["id"]
    child = client.post("/jobs", json={"type": "email", "payload": {}, "depends_on": [parent]}, headers=producer)
    assert child.status_code == 201, child.get_json()
    held = claim()
    assert held["id"] == parent
    done = client.post(f"/jobs/{parent}/complete", json={"claim_token": held["claim_token"]}, headers=worker)
    assert done.status_code == 200
    retention.drop_days_before(_tomorrow_after_midnight())
    assert client.get(f"/jobs/{parent}", headers=admin).status_code == 200
    assert client.get(f"/jobs/{child.get_json()['id']}", headers=admin).get_json()["status"] == "pending"


def test_an_idempotency_key_of_a_finished_job_still_answers_with_that_job(client, producer, worker, claim):
    body = {"type": "email", "payload": {}, "idempotency_key": "order-7"}
    first = client.post("/jobs", json=body, headers=producer).get_json()
    held = claim()
    client.post(f"/jobs/{held['id']}/complete", json={"claim_token": held["claim_token"]}, headers=worker)
    again = client.post("/jobs", json=body, headers=producer)
    assert again.status_code == 200
    assert again.get_json()["id"] == first["id"] and again.get_json()["status"] == "completed"


def test_an_admin_retry_brings_a_failed_job_back_from_history(client, admin, worker, enqueue, claim):
    job_id = enqueue()["id"]
    held = claim()
    failed = client.post(
        f"/jobs/{job_id}/fail",
        json={"claim_token": held["claim_token"], "error": "boom", "retryable": False},
        headers=worker,
    )
    assert failed.get_json()["status"] == "failed"
    assert _table_of(job_id) != "jobs_live"
    retried = client.post(f"/jobs/{job_id}/retry", headers=admin)
    assert retried.status_code == 200, retried.get_json()
    assert retried.get_json()["status"] == "pending"
    assert _table_of(job_id) == "jobs_live"


def test_a_heartbeat_waiting_on_a_job_that_finishes_meanwhile_is_answered_409_not_500(
    app, client, worker, enqueue, claim
):
    enqueue()
    held = claim()
    answers: list = []
    with db.engine.connect() as other:
        # Another transaction finishes the job (the row moves to history) and holds it until it commits.
        other.execute(
            text("UPDATE jobs SET status = 'completed', updated_at = now() WHERE id = :id"), {"id": held["id"]}
        )

        def beat() -> None:
            with app.app_context():
                answers.append(
                    client.post(
                        f"/jobs/{held['id']}/heartbeat", json={"claim_token": held["claim_token"]}, headers=worker
                    )
                )

        beating = threading.Thread(target=beat)
        beating.start()
        beating.join(timeout=0.5)
        assert beating.is_alive()  # it waits for the row
        other.commit()
    beating.join(timeout=30)
    assert answers[0].status_code == 409, answers[0].get_json()


def test_the_enqueue_claim_heartbeat_and_completion_plan_no_day_of_history(
    client, worker, enqueue, claim, run_to_the_end
):
    run_to_the_end()  # today's day of history holds a job

    def live_work():
        enqueue()
        held = claim()
        token = {"claim_token": held["claim_token"]}
        assert client.post(f"/jobs/{held['id']}/heartbeat", json=token, headers=worker).status_code == 200
        assert client.post(f"/jobs/{held['id']}/complete", json=token, headers=worker).status_code == 200

    sent, _took = plans.capture(live_work, lambda sql, way: way == "send" and "jobs" in sql)
    assert len(sent) >= 4, sent
    for statement, parameters in sent:
        assert "jobs_done" not in plans.explain(statement, parameters), statement
