"""End to end: ``queuelog-worker`` stops waiting for a handler that outlives its job's timeout_seconds.

A real gunicorn and real worker processes (tests/worker_apps/harness.py) running tests/worker_apps/jobs.py.
"""

from __future__ import annotations

import time

import pytest

from queuelog import queue
from tests.worker_apps.harness import logged, wait_until

# One gunicorn and its database for the module (tests/worker_apps/harness.py).
pytestmark = pytest.mark.shared_server


def ended(read_job, job_id, status: str, timeout: float):
    """Wait until the job is ``status``, reaping as cron would meanwhile: the worker's own failure lands
    before the timeout, or is refused (409) and the reaper fails the run as timed out. Returns its row."""

    def reaped_and_read():
        queue.reap()
        row = read_job(job_id)
        return row.status == status and row

    return wait_until(reaped_and_read, timeout, interval=0.2)


def test_the_worker_fails_a_handler_at_its_timeout_and_logs_it(start_worker, producer_client, read_job):
    worker = start_worker()
    job = producer_client.enqueue("sleep", {"seconds": 30}, timeout_seconds=2, max_retries=0)
    started = time.monotonic()

    row = ended(read_job, job["id"], "failed", 10)

    assert time.monotonic() - started < 10  # a handler of 30 s, stopped at its 2 s timeout
    assert "timed out" in row.error
    # The reaper may fail the run before the worker's own line is written: wait for the line.
    assert logged(worker, rf"job {job['id']} \(sleep\) timed out")
    assert logged(worker, rf"job {job['id']} type=sleep outcome=failed")


def test_a_timed_out_handler_frees_its_slot_for_the_next_job(start_worker, producer_client, read_job):
    start_worker(concurrency=1)
    stuck = producer_client.enqueue("sleep", {"seconds": 30}, timeout_seconds=1, max_retries=0)
    after = producer_client.enqueue("ok", {"n": 1})

    wait_until(lambda: read_job(after["id"]).status == "completed", 10)

    # Long before the stuck handler's 30 s are up.
    ended(read_job, stuck["id"], "failed", 5)


def test_a_timed_out_run_is_retried_per_its_retries(start_worker, producer_client, read_job):
    start_worker(concurrency=2)
    job = producer_client.enqueue("sleep", {"seconds": 30}, timeout_seconds=1, max_retries=1)

    row = ended(read_job, job["id"], "failed", 15)

    assert row.retry_count == 1  # two runs, each given up on at its timeout


def test_a_handler_within_its_timeout_completes(start_worker, producer_client, read_job):
    start_worker()
    job = producer_client.enqueue("sleep", {"seconds": 0.2}, timeout_seconds=10)

    wait_until(lambda: read_job(job["id"]).status == "completed", 10)
