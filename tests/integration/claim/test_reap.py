"""Reaping: jobs whose worker died go back to the queue, or fail, or are quarantined; nothing else moves."""

from __future__ import annotations

from datetime import timedelta

import pytest

from queuelog import queue
from queuelog.core.clock import utcnow
from tests.support.factories import assert_problem, event_rows, expire_lease


def test_a_job_whose_lease_ends_in_the_future_is_untouched(make_job, read_job):
    job_id = make_job(status="running", lease_expires_at=utcnow() + timedelta(seconds=5))
    before = read_job(job_id)
    assert queue.reap().total == 0
    assert read_job(job_id) == before


def test_a_job_whose_lease_just_expired_is_reaped(make_job, read_job):
    job_id = make_job(status="running", lease_expires_at=utcnow() - timedelta(milliseconds=1))
    assert queue.reap().requeued == [job_id]
    assert read_job(job_id).status == "pending"


def test_the_lease_boundary_is_exact(make_job, read_job):
    lease_end = utcnow().replace(microsecond=500_000)
    job_id = make_job(status="running", lease_expires_at=lease_end)
    assert queue.reap(now=lease_end).total == 0, "a lease that ends now has not yet run out"
    assert read_job(job_id).status == "running"
    assert queue.reap(now=lease_end + timedelta(microseconds=1)).requeued == [job_id]


def test_a_reaped_job_is_requeued_with_one_more_retry_and_no_holder(make_job, read_job):
    job_id = make_job(status="running", retry_count=1)
    expire_lease(job_id)
    queue.reap()
    row = read_job(job_id)
    assert (row.status, row.retry_count, row.stall_count) == ("pending", 2, 1)
    assert row.worker_id is row.claim_token is row.claimed_at is row.lease_expires_at is None
    assert "worker-a" in row.error


def test_a_reaped_job_is_claimable_again_at_once(make_job, claim):
    job_id = make_job(status="running")
    expire_lease(job_id)
    queue.reap()
    assert claim()["id"] == job_id


def test_reaping_is_logged_with_the_reaper_as_actor(make_job):
    job_id = make_job(status="running")
    expire_lease(job_id)
    queue.reap()
    last = event_rows(job_id)[-1]
    assert (last.event, last.from_status, last.to_status, last.actor) == ("reaped", "running", "pending", "reaper")
    assert "lease expired" in last.error


def test_a_job_with_no_retries_left_fails_instead_of_staying_running(make_job, read_job):
    job_id = make_job(status="running", retry_count=3, max_retries=3)
    expire_lease(job_id)
    assert queue.reap().failed == [job_id]
    row = read_job(job_id)
    assert (row.status, row.retry_count) == ("failed", 3)
    assert "no retries are left" in row.error
    assert row.claim_token is None and row.lease_expires_at is None


def test_max_retries_zero_fails_on_the_first_stall(make_job, read_job):
    job_id = make_job(status="running", max_retries=0)
    expire_lease(job_id)
    queue.reap()
    assert read_job(job_id).status == "failed"


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled", "pending"])
def test_reap_never_touches_a_job_that_is_not_running(make_job, read_job, status):
    # Even with stale lease and claim times left on the row: only status decides.
    long_ago = utcnow() - timedelta(hours=2)
    job_id = make_job(status=status, worker_id="worker-a", claimed_at=long_ago, lease_expires_at=long_ago)
    before = read_job(job_id)
    assert queue.reap(older_than=60).total == 0
    assert read_job(job_id) == before


def test_a_job_completed_before_the_reaper_runs_stays_completed(client, worker, enqueue, claim, read_job):
    job_id = enqueue()["id"]
    token = claim()["claim_token"]
    client.post(f"/jobs/{job_id}/complete", json={"claim_token": token}, headers=worker)
    assert queue.reap(now=utcnow() + timedelta(days=1), older_than=1).total == 0
    assert read_job(job_id).status == "completed"


def _die_while_holding(claim, job_id: int) -> None:
    assert claim()["id"] == job_id
    expire_lease(job_id)
    queue.reap()


def test_a_job_whose_workers_keep_dying_is_quarantined_after_max_stalls(enqueue, claim, read_job):
    job_id = enqueue(max_retries=10)["id"]
    for stall in (1, 2):
        _die_while_holding(claim, job_id)
        assert (read_job(job_id).status, read_job(job_id).stall_count) == ("pending", stall)
    _die_while_holding(claim, job_id)
    row = read_job(job_id)
    assert (row.status, row.stall_count) == ("failed", 3)
    assert row.error == "quarantined: its worker died 3 times"
    assert event_rows(job_id)[-1].error == "quarantined: its worker died 3 times"


@pytest.mark.parametrize("config_overrides", [{"MAX_STALLS": 2}])
def test_max_stalls_is_configurable(enqueue, claim, read_job, config_overrides):
    job_id = enqueue(max_retries=10)["id"]
    _die_while_holding(claim, job_id)
    _die_while_holding(claim, job_id)
    assert read_job(job_id).error == "quarantined: its worker died 2 times"


def test_a_quarantined_job_retried_by_an_admin_starts_with_a_clean_record(client, admin, enqueue, claim, read_job):
    job_id = enqueue(max_retries=10)["id"]
    for _ in range(3):
        _die_while_holding(claim, job_id)
    client.post(f"/jobs/{job_id}/retry", headers=admin)
    row = read_job(job_id)
    assert (row.status, row.retry_count, row.stall_count) == ("pending", 0, 0)
    assert claim()["id"] == job_id


@pytest.mark.parametrize("action", ["complete", "fail", "heartbeat"])
def test_the_old_worker_of_a_reaped_job_gets_409(client, worker, enqueue, claim, read_job, action):
    job_id = enqueue()["id"]
    token = claim()["claim_token"]
    expire_lease(job_id)
    queue.reap()
    before = read_job(job_id)
    response = client.post(f"/jobs/{job_id}/{action}", json={"claim_token": token}, headers=worker)
    assert_problem(response, 409)
    assert read_job(job_id) == before


def test_dry_run_reports_without_changing_anything(make_job, read_job):
    job_id = make_job(status="running")
    expire_lease(job_id)
    before = read_job(job_id)
    report = queue.reap(dry_run=True)
    assert report.requeued == [job_id]
    assert read_job(job_id) == before


def test_reap_takes_every_stalled_job_in_one_run(make_job, read_job):
    stalled = [make_job(status="running") for _ in range(5)]
    alive = make_job(status="running")
    for job_id in stalled:
        expire_lease(job_id)
    assert sorted(queue.reap().requeued) == stalled
    assert read_job(alive).status == "running"
