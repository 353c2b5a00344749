"""End to end: a worker of short jobs claims ahead of its free slots, and a job never waits long behind a slow one.

The worker judges from its handlers' recent run times how many jobs would start within 0.1 s and claims those
beyond its free slots (``--prefetch`` caps them, 0 turns it off). A job claimed ahead that has not started within
1 s of its claim goes back to the queue, and so do all of them on a first signal.
"""

from __future__ import annotations

import pytest

from tests.worker_apps.harness import claim_requests, logged, wait_until

# One gunicorn and its database for the module (tests/worker_apps/harness.py).
pytestmark = pytest.mark.shared_server


@pytest.fixture
def warm_worker(start_worker, producer_client, read_job):
    """warm_worker(*args, concurrency=1): a worker that has run ten short jobs, so it knows its jobs are short."""

    def _start(*args: str, concurrency: int = 1):
        worker = start_worker("--log-level", "DEBUG", *args, concurrency=concurrency)
        warm_up = producer_client.enqueue_batch([{"type": "ok"}] * 10)
        wait_until(lambda: statuses(read_job, warm_up) == {"completed"}, 20)
        return worker

    return _start


def statuses(read_job, jobs) -> set[str]:
    return {read_job(job["id"]).status for job in jobs}


def events(client, admin, job_id) -> list[str]:
    return [e["event"] for e in client.get(f"/jobs/{job_id}/events", headers=admin).get_json()["events"]]


def a_slow_job_then_short_ones(producer_client, seconds: float, short: int = 5):
    """One batch: a job that sleeps ``seconds``, then ``short`` quick ones, claimed in that order."""
    jobs = producer_client.enqueue_batch(
        [{"type": "sleep", "payload": {"seconds": seconds}}]
        + [{"type": "ok", "payload": {"n": n}} for n in range(short)]
    )
    return jobs[0], jobs[1:]


def test_a_worker_of_short_jobs_claims_many_jobs_per_request(warm_worker, producer_client, read_job, server):
    warm_worker()
    before = claim_requests(server.log())
    jobs = producer_client.enqueue_batch([{"type": "ok", "payload": {"n": n}} for n in range(300)])
    wait_until(lambda: statuses(read_job, jobs) == {"completed"}, 60)
    # One slot, 300 jobs: claiming only for the free slot would take 300 claims.
    assert claim_requests(server.log()) - before <= 100
    assert all(read_job(job["id"]).retry_count == 0 for job in jobs)


def test_prefetch_never_runs_more_handlers_at_once_than_the_concurrency(warm_worker, producer_client, read_job):
    warm_worker(concurrency=2)
    jobs = producer_client.enqueue_batch([{"type": "sleep", "payload": {"seconds": 0.3}}] * 6)
    wait_until(lambda: statuses(read_job, jobs) == {"completed"}, 30)
    rows = [read_job(job["id"]) for job in jobs]
    # Six 0.3 s jobs on two slots take three turns (0.9 s); three handlers at once would take two.
    took = (max(r.completed_at for r in rows) - min(r.claimed_at for r in rows)).total_seconds()
    assert took >= 0.85


def test_prefetch_0_claims_only_for_the_free_slots(warm_worker, producer_client, read_job):
    warm_worker("--prefetch", "0")
    slow, short = a_slow_job_then_short_ones(producer_client, 2)
    wait_until(lambda: read_job(slow["id"]).status == "running", 10)
    assert wait_until(lambda: statuses(read_job, short) == {"pending"}, 1)
    wait_until(lambda: statuses(read_job, short) == {"completed"}, 30)


def test_jobs_claimed_ahead_behind_a_slow_handler_go_to_another_worker(
    warm_worker, start_worker, producer_client, read_job, client, admin
):
    first = warm_worker()
    # Long enough to outlast a second worker's start and the short jobs on a busy machine (killed after the test).
    slow, short = a_slow_job_then_short_ones(producer_client, 60)
    logged(first, r"claimed 6 job\(s\), 5 of them ahead of the free slots")
    start_worker()  # its key is e2e-worker-2
    wait_until(lambda: statuses(read_job, short) == {"completed"}, 15)
    assert read_job(slow["id"]).status == "running"  # the first worker is still on the slow job
    for job in short:
        row = read_job(job["id"])
        assert (row.worker_id, row.retry_count) == ("e2e-worker-2", 0)
        assert "released" in events(client, admin, job["id"])
    logged(first, r"giving back 5 job\(s\) claimed ahead that have not started in time")


def test_first_signal_gives_back_the_jobs_claimed_ahead_and_finishes_the_running_one(
    warm_worker, producer_client, read_job, client, admin
):
    worker = warm_worker()
    slow, short = a_slow_job_then_short_ones(producer_client, 2)
    logged(worker, r"claimed 6 job\(s\), 5 of them ahead of the free slots")
    worker.signal()
    assert worker.wait(timeout=15) == 0
    assert read_job(slow["id"]).status == "completed"
    for job in short:
        row = read_job(job["id"])
        assert (row.status, row.retry_count, row.claim_token) == ("pending", 0, None)
        assert events(client, admin, job["id"])[-1] == "released"


def test_a_job_whose_timeout_runs_out_while_it_waits_goes_back_without_a_failed_attempt(
    warm_worker, producer_client, read_job, client, admin
):
    worker = warm_worker()
    jobs = producer_client.enqueue_batch(
        [{"type": "sleep", "payload": {"seconds": 2}}, {"type": "ok", "timeout_seconds": 1}]
    )
    logged(worker, r"claimed 2 job\(s\), 1 of them ahead of the free slots")
    wait_until(lambda: read_job(jobs[1]["id"]).status == "completed", 20)
    row = read_job(jobs[1]["id"])
    assert row.retry_count == 0 and row.error is None
    assert "released" in events(client, admin, jobs[1]["id"])
