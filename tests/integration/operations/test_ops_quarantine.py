"""Poison-pill quarantine: a job whose worker died holding it MAX_STALLS times is failed by `flask reap`,
whatever retries it has left, and never handed out again."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from sqlalchemy import update

from queuelog.core.clock import utcnow
from queuelog.extensions import db
from queuelog.models import Job

jobs = Job.__table__


def worker_dies_holding(job_id: int) -> None:
    """The worker holding the job vanished long enough ago that its lease has run out."""
    with db.engine.begin() as conn:
        conn.execute(update(jobs).where(jobs.c.id == job_id).values(lease_expires_at=utcnow() - timedelta(seconds=1)))


def reap(runner) -> str:
    result = runner.invoke(args=["reap"])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_a_job_is_quarantined_when_its_worker_dies_the_third_time(client, runner, enqueue, claim, read_job, worker):
    job = enqueue(type="resize-image", max_retries=10)
    for stall in (1, 2):
        assert claim()["id"] == job["id"]
        worker_dies_holding(job["id"])
        assert reap(runner) == "reaped 1 jobs: 1 requeued, 0 failed, 0 quarantined\n"
        assert read_job(job["id"]).status == "pending" and read_job(job["id"]).stall_count == stall

    assert claim()["id"] == job["id"]
    worker_dies_holding(job["id"])
    assert reap(runner) == "reaped 1 jobs: 0 requeued, 0 failed, 1 quarantined\n"

    row = read_job(job["id"])
    assert row.status == "failed" and row.stall_count == 3
    assert row.error == "quarantined: its worker died 3 times"
    assert row.retry_count < row.max_retries  # retries were left; quarantine ignores them
    assert client.post("/jobs/claim", headers=worker).status_code == 204


@pytest.fixture
def stalled_twice(make_job):
    """A running job whose workers already died holding it twice, and now a third time."""
    return make_job(
        status="running", stall_count=2, retry_count=0, max_retries=5, lease_expires_at=utcnow() - timedelta(seconds=30)
    )


def test_a_quarantined_job_is_not_handed_out_again(client, runner, worker, stalled_twice, make_job):
    healthy = make_job(status="pending")
    reap(runner)
    first = client.post("/jobs/claim", headers=worker)
    assert first.status_code == 200 and first.get_json()["id"] == healthy
    assert client.post("/jobs/claim", headers=worker).status_code == 204


def test_a_quarantined_job_shows_the_error_to_an_admin(client, runner, admin, stalled_twice):
    reap(runner)
    body = client.get(f"/jobs/{stalled_twice}", headers=admin).get_json()
    assert body["status"] == "failed" and body["error"] == "quarantined: its worker died 3 times"
    events = client.get(f"/jobs/{stalled_twice}/events", headers=admin).get_json()["events"]
    assert events[-1]["event"] == "reaped" and events[-1]["to_status"] == "failed"
    assert events[-1]["error"] == "quarantined: its worker died 3 times"


def test_quarantine_is_logged_as_a_warning_and_counted(client, runner, admin, stalled_twice, caplog):
    caplog.set_level(logging.INFO, logger="queuelog")

    def quarantined_total():
        text = client.get("/metrics", headers=admin).get_data(as_text=True)
        return float(
            next(line.split()[-1] for line in text.splitlines() if line.startswith("queuelog_jobs_quarantined_total"))
        )

    before = quarantined_total()
    reap(runner)
    assert quarantined_total() == before + 1
    [warning] = [r for r in caplog.records if r.name == "queuelog.jobs" and r.levelno == logging.WARNING]
    assert warning.queuelog_fields["job_id"] == stalled_twice and warning.queuelog_fields["quarantined"] is True


class TestMaxStallsIsConfigurable:
    @pytest.fixture
    def config_overrides(self):
        return {"MAX_STALLS": 5}

    def test_below_the_configured_limit_the_job_is_requeued(self, runner, read_job, stalled_twice):
        assert reap(runner) == "reaped 1 jobs: 1 requeued, 0 failed, 0 quarantined\n"
        assert read_job(stalled_twice).status == "pending"
