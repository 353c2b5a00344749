"""End to end: a real ``queuelog-worker`` registers its process, and obeys an admin's quiet and stop."""

from __future__ import annotations

import time

import pytest

from queuelog.worker.client import Client
from tests.worker_apps.harness import wait_until

# One gunicorn and its database for the module (tests/worker_apps/harness.py).
pytestmark = pytest.mark.shared_server

#: "Within a few seconds": a beat every 3 s, plus the time to act on it.
OBEYS_WITHIN = 6


@pytest.fixture
def admin_client(server, make_key):
    return Client(server.url, make_key("admin", "e2e-admin"))


def _processes(admin_client: Client) -> list[dict]:
    return admin_client.request("GET", "/workers")[1]["workers"]


def test_quiet_finishes_the_held_job_claims_nothing_more_and_keeps_running_until_stop(
    start_worker, producer_client, admin_client, read_job
):
    worker = start_worker(concurrency=2)
    [process] = wait_until(lambda: _processes(admin_client), 10)
    assert (process["pid"], process["concurrency"], process["command"]) == (worker.process.pid, 2, "run")

    held = producer_client.enqueue("sleep", {"seconds": 4})
    wait_until(lambda: read_job(held["id"]).status == "running", 10)
    assert read_job(held["id"]).process_id == process["id"]

    admin_client.request("POST", f"/workers/{process['id']}/quiet", {})
    wait_until(lambda: "the server says quiet" in worker.log(), OBEYS_WITHIN)
    later = producer_client.enqueue("ok")
    wait_until(lambda: read_job(held["id"]).status == "completed", 15)
    time.sleep(1)
    assert read_job(later["id"]).status == "pending"  # quiet: the held job finished, nothing new was taken
    assert worker.process.poll() is None  # ... and the process is still there

    admin_client.request("POST", f"/workers/{process['id']}/stop", {})
    assert worker.wait(timeout=OBEYS_WITHIN + 2) == 0
    assert _processes(admin_client) == []  # a clean exit deregisters


def test_stop_finishes_the_held_job_then_exits_0(start_worker, producer_client, admin_client, read_job):
    worker = start_worker()
    [process] = wait_until(lambda: _processes(admin_client), 10)
    held = producer_client.enqueue("sleep", {"seconds": 3})
    wait_until(lambda: read_job(held["id"]).status == "running", 10)
    admin_client.request("POST", f"/workers/{process['id']}/stop", {})
    wait_until(lambda: "the server says stop" in worker.log(), OBEYS_WITHIN)
    assert worker.wait(timeout=15) == 0
    assert read_job(held["id"]).status == "completed"
