"""End to end: a worker's shutdown on signals, its idle request rate, and a server restart under it."""

from __future__ import annotations

import re
import signal
import time

import pytest

from tests.worker_apps.harness import claim_requests, wait_until

# One gunicorn and its database for the module (tests/worker_apps/harness.py).
pytestmark = pytest.mark.shared_server


def running(read_job, job_id):
    wait_until(lambda: read_job(job_id).status == "running", 10)


def held(read_job, job_id):
    """The worker holds the job: it is running and its lease was renewed once. (Running alone is not enough: a
    worker signalled between the server's claim and its answer never gets the job, which goes back to pending
    when the worker deregisters: test_worker_processes_api's
    ``test_deregister_gives_back_a_job_still_running_under_the_process``.)"""
    wait_until(lambda: (row := read_job(job_id)).status == "running" and row.heartbeat_at > row.claimed_at, 10)


def completed(read_job, job_id):
    wait_until(lambda: read_job(job_id).status == "completed", 30)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_first_signal_finishes_the_running_job_then_exits_0(start_worker, producer_client, read_job, signum):
    worker = start_worker()
    job = producer_client.enqueue("sleep", {"seconds": 3})
    held(read_job, job["id"])
    worker.signal(signum)
    assert worker.wait(timeout=15) == 0
    row = read_job(job["id"])
    assert row.status == "completed" and row.retry_count == 0


def test_a_stopping_worker_claims_no_new_job(start_worker, producer_client, read_job):
    worker = start_worker()
    job = producer_client.enqueue("sleep", {"seconds": 3})
    held(read_job, job["id"])
    worker.signal()
    time.sleep(0.3)
    later = producer_client.enqueue("ok")
    assert worker.wait(timeout=15) == 0
    assert read_job(later["id"]).status == "pending"


def test_idle_worker_stops_at_once_on_a_signal(start_worker):
    worker = start_worker()
    time.sleep(1)  # its long-poll is now waiting on the server
    started = time.monotonic()
    worker.signal()
    assert worker.wait(timeout=10) == 0
    assert time.monotonic() - started < 8  # not the rest of its 30 s long-poll; generous for a busy machine


def test_a_worker_stopped_while_idle_leaves_no_claim_behind(start_worker, producer_client, read_job):
    """Its aborted long-poll must not claim the next job on the server for a worker that is gone."""
    worker = start_worker()
    time.sleep(1)  # its long-poll is now waiting on the server
    worker.signal()
    assert worker.wait(timeout=10) == 0
    job = producer_client.enqueue("ok")
    time.sleep(1.5)
    assert read_job(job["id"]).status == "pending"
    start_worker()
    wait_until(lambda: read_job(job["id"]).status == "completed", 10)


def test_second_signal_releases_the_unfinished_job_and_exits(start_worker, producer_client, read_job, client, admin):
    worker = start_worker()
    job = producer_client.enqueue("sleep", {"seconds": 60})
    held(read_job, job["id"])
    worker.signal()
    time.sleep(0.5)
    assert worker.process.poll() is None  # still finishing the job
    worker.signal()
    assert worker.wait(timeout=10) == 0
    row = read_job(job["id"])
    assert (row.status, row.retry_count, row.worker_id, row.claim_token) == ("pending", 0, None, None)
    events = [e["event"] for e in client.get(f"/jobs/{job['id']}/events", headers=admin).get_json()["events"]]
    assert events[-1] == "released"
    assert f"job {job['id']} type=sleep outcome=released" in worker.log()


def test_idle_worker_makes_at_most_a_few_requests_a_minute(start_worker, server):
    before = claim_requests(server.log())
    start_worker()
    time.sleep(20)
    assert claim_requests(server.log()) - before <= 3


@pytest.mark.parametrize("server_workers", [2])
def test_worker_survives_a_server_restart_and_finishes_its_jobs(start_worker, producer_client, read_job, server):
    worker = start_worker(concurrency=2)
    # Handlers long enough to outlast the server's stop on a busy machine, so they end while it is down.
    during = producer_client.enqueue_batch([{"type": "sleep", "payload": {"seconds": 3}}] * 2)
    for job in during:
        running(read_job, job["id"])
    server.stop()
    time.sleep(4)  # the handlers finish while the server is down: their acks must wait
    assert worker.process.poll() is None
    server.start()  # back on the same port
    for job in during:
        completed(read_job, job["id"])
        assert read_job(job["id"]).retry_count == 0
    assert producer_client.get_job(during[0]["id"])["result"] == {"slept": 3}
    after = producer_client.enqueue("ok")
    completed(read_job, after["id"])
    assert "acknowledging" in worker.log()  # it did have to retry
    worker.signal()
    assert worker.wait(timeout=15) == 0


def test_worker_logs_a_periodic_summary(start_worker, producer_client, read_job):
    worker = start_worker("--summary-interval", "1")
    job = producer_client.enqueue("ok")
    wait_until(lambda: read_job(job["id"]).status == "completed", 10)
    wait_until(lambda: re.search(r"summary: completed=1 failed=0 .* jobs/s\)", worker.log()), 5)
