"""The worker runner when the server has no room for its long-poll: it waits as told, then carries on.

The server here lets no claim wait (QUEUELOG_LONGPOLL_MAX_WAITING=0), so every idle claim is
answered 503 with a Retry-After of 3 to 7 s, as a claim beyond a busy server's cap is.
"""

from __future__ import annotations

import time

import pytest

from tests.support.server import running_server
from tests.worker_apps.harness import SERVER_ARGS, claim_requests, server_env, wait_until

# One gunicorn and its database for the module (tests/worker_apps/harness.py).
pytestmark = pytest.mark.shared_server


@pytest.fixture(scope="module")
def server(shared_database_url):
    """Overrides the harness's: a server that lets no claim wait."""
    env = {**server_env(shared_database_url), "QUEUELOG_LONGPOLL_MAX_WAITING": "0"}
    with running_server(env, workers=1, extra_args=SERVER_ARGS) as srv:
        yield srv


def test_a_worker_refused_for_capacity_waits_retry_after_instead_of_spinning(start_worker, server):
    before = claim_requests(server.log())
    worker = start_worker()
    time.sleep(8)
    # One at start, then one 3-10.5 s after each refusal (Retry-After 3-7 s, plus up to half again).
    assert claim_requests(server.log()) - before <= 3
    assert "ACCESS POST /jobs/claim 503" in server.log()
    # Said once, not once per refusal, and not as a failure.
    assert worker.log().count("the server holds as many waiting claims as it can") == 1
    assert "WARNING" not in worker.log()


def test_a_worker_refused_for_capacity_still_gets_the_next_job(start_worker, producer_client, read_job):
    start_worker()
    time.sleep(1)  # refused: it is waiting out the Retry-After
    job = producer_client.enqueue("ok")
    wait_until(lambda: read_job(job["id"]).status == "completed", 15)
    assert read_job(job["id"]).retry_count == 0
