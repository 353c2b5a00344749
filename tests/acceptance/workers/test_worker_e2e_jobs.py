"""End to end: a real gunicorn server and real ``queuelog-worker`` processes running tests/worker_apps/jobs.py."""

from __future__ import annotations

import re
import time

import pytest

from queuelog import queue
from queuelog.worker import ApiError
from tests.worker_apps.harness import LEASE_SECONDS, logged, wait_until

# One gunicorn and its database for the module (tests/worker_apps/harness.py).
pytestmark = pytest.mark.shared_server


def finished(read_job, job_id, status="completed"):
    """Wait until the job reaches ``status``; returns its row."""
    return wait_until(lambda: (row := read_job(job_id)).status == status and row, 20)


def test_worker_completes_a_job_with_its_handlers_result(start_worker, producer_client, read_job):
    worker = start_worker()
    job = producer_client.enqueue("ok", {"invoice": 7})
    row = finished(read_job, job["id"])
    assert producer_client.get_job(job["id"])["result"] == {"echo": {"invoice": 7}}
    assert row.retry_count == 0
    assert logged(worker, rf"job {job['id']} type=ok outcome=completed duration_ms=\d+")


def test_handler_exception_fails_the_attempt_with_a_short_message(start_worker, producer_client, read_job, server):
    worker = start_worker()
    job = producer_client.enqueue("boom", {"what": "invoice 7"}, max_retries=1)
    row = finished(read_job, job["id"], "failed")
    assert row.retry_count == 1  # it was retried once, then failed for good
    assert row.error == "ValueError: cannot handle invoice 7"
    # The traceback is in the worker's log, never on the server.
    assert "Traceback" in worker.log() and "raise ValueError" in worker.log()
    assert "Traceback" not in (row.error or "")
    assert logged(
        worker,
        rf"job {job['id']} type=boom outcome=failed retry=yes duration_ms=\d+ "
        r'error="ValueError: cannot handle invoice 7"',
    )


def test_permanent_error_fails_the_job_without_a_retry(start_worker, producer_client, read_job):
    start_worker()
    job = producer_client.enqueue("permanent", max_retries=5)
    row = finished(read_job, job["id"], "failed")
    assert row.retry_count == 0
    assert row.error == "PermanentError: the invoice does not exist"


def test_worker_claims_only_the_types_it_has_handlers_for(start_worker, producer_client, read_job):
    start_worker()
    other = producer_client.enqueue("other")
    mine = producer_client.enqueue("ok")
    finished(read_job, mine["id"])
    time.sleep(0.5)
    assert read_job(other["id"]).status == "pending"


def test_concurrent_worker_runs_jobs_at_once_with_batch_claims_and_acks(
    start_worker, producer_client, read_job, server
):
    start_worker(concurrency=4)
    time.sleep(0.5)  # let its first long-poll reach the server, so the batch lands in one claim
    started = time.monotonic()
    jobs = producer_client.enqueue_batch([{"type": "sleep", "payload": {"seconds": 1.5}}] * 4)
    for job in jobs:
        finished(read_job, job["id"])
    # Four 1.5 s jobs in well under 4 × 1.5 s: they ran side by side.
    assert time.monotonic() - started < 4.0
    # gunicorn writes a request's access line after its answer, which may be after the rows read above.
    log = wait_until(lambda: "ACCESS POST /jobs/complete 200" in server.log() and server.log(), 10)
    assert not re.search(r"ACCESS POST /jobs/\d+/complete", log)


def test_heartbeats_keep_a_job_past_its_lease(start_worker, producer_client, read_job, app):
    start_worker()
    job = producer_client.enqueue("sleep", {"seconds": LEASE_SECONDS * 2})
    wait_until(lambda: read_job(job["id"]).status == "running", 10)
    time.sleep(LEASE_SECONDS + 1)
    # The reaper finds nothing to take: the lease was extended while the handler ran.
    assert queue.reap().total == 0
    row = finished(read_job, job["id"])
    assert row.retry_count == 0 and row.stall_count == 0


def test_job_of_a_killed_worker_is_reaped_when_its_lease_ends(start_worker, producer_client, read_job, app):
    worker = start_worker()
    job = producer_client.enqueue("sleep", {"seconds": LEASE_SECONDS * 2})
    # Until its first heartbeat the job may not be the worker's yet: killed between the server's claim and
    # its answer, a worker is seen to have hung up, and the server gives the job back at once.
    wait_until(lambda: (row := read_job(job["id"])).status == "running" and row.heartbeat_at > row.claimed_at, 10)
    worker.kill()  # no more heartbeats
    time.sleep(LEASE_SECONDS + 0.5)
    assert queue.reap().requeued == [job["id"]]
    row = read_job(job["id"])
    assert (row.status, row.retry_count, row.stall_count) == ("pending", 1, 1)


def test_client_reports_a_refusal_with_its_problem_document(producer_client):
    with pytest.raises(ApiError) as refusal:
        producer_client.enqueue("not-on-the-allowlist")
    assert refusal.value.status == 422
    assert refusal.value.problem["errors"][0]["pointer"] == "/type"


def test_worker_logs_a_lost_lease_and_carries_on(start_worker, producer_client, read_job, app):
    worker = start_worker()
    job = producer_client.enqueue("sleep", {"seconds": 1.5})
    wait_until(lambda: read_job(job["id"]).status == "running", 10)
    queue.release(job["id"], "admin:test")  # taken away from the worker while its handler runs
    wait_until(lambda: f"job {job['id']} type=sleep outcome=lease-lost" in worker.log(), 10)
    # The job went back to the queue; the same worker picks it up again and finishes it.
    row = wait_until(lambda: (row := read_job(job["id"])).status == "completed" and row, 15)
    assert row.retry_count == 0
    assert worker.process.poll() is None
