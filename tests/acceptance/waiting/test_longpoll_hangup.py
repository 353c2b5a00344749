"""A worker that hung up gets no job: on every server the README names (flask run, gunicorn).

A waiting claim outlives its client on the server: the worker exited, its request is still held.
Had it claimed the next job, that job would sit ``running`` for nobody until its lease ran out and
``flask reap`` came by. These tests run the real ``queuelog-worker`` against the real servers.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sqlite3
import time

import pytest
from sqlalchemy import create_engine, text

from tests.support.database import test_db_kind
from tests.support.dev_server import running_dev_server
from tests.support.server import running_server
from tests.worker_apps.harness import SERVER_ARGS, server_env, wait_until

pytestmark = pytest.mark.shared_server

SERVERS = ["flask run", "gunicorn"]


@pytest.fixture(scope="module", params=SERVERS)
def server(request, shared_database_url):
    """Overrides the harness's: the module's tests run once under each server, on the module's database."""
    env = server_env(shared_database_url)
    if request.param == "flask run":
        with running_dev_server(env) as srv:
            yield srv
    else:
        with running_server(env, workers=1, extra_args=SERVER_ARGS) as srv:
            yield srv


@contextlib.contextmanager
def writes_to_jobs_held(database_url: str):
    """Hold off every write to the jobs table (a claim waits for it) until the block ends."""
    if test_db_kind() == "sqlite":
        conn = sqlite3.connect(database_url.removeprefix("sqlite:///"), isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            yield
            conn.execute("ROLLBACK")
        finally:
            conn.close()
        return
    engine = create_engine(database_url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            conn.execute(text("LOCK TABLE jobs IN SHARE MODE"))  # reads go on, writes wait
            yield
            conn.rollback()
    finally:
        engine.dispose()


def events_of(client, admin, job_id):
    return client.get(f"/jobs/{job_id}/events", headers=admin).get_json()["events"]


def test_a_job_enqueued_after_an_idle_worker_exited_goes_to_a_live_worker(start_worker, producer_client, read_job):
    gone = start_worker()
    time.sleep(1)  # its long-poll is now waiting on the server
    gone.signal()
    assert gone.wait(timeout=10) == 0
    job = producer_client.enqueue("ok")
    start_worker()
    wait_until(lambda: read_job(job["id"]).status == "completed", 10)
    row = read_job(job["id"])
    assert (row.worker_id, row.retry_count) == ("e2e-worker-2", 0)


def test_a_claim_whose_worker_hung_up_before_the_answer_gives_its_job_back(
    server, database_url, make_key, producer_client, read_job, client, admin
):
    """The race the wait loop cannot close: the client leaves while its claim is being made."""
    job = producer_client.enqueue("ok")
    body = json.dumps({"wait": 5}).encode()
    head = (
        f"POST /jobs/claim HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        f"Authorization: Bearer {make_key('worker', 'hangs-up')}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with writes_to_jobs_held(database_url):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(head + body)
        time.sleep(1)  # the server has the request; its claim waits for the lock; the client is gone
    # The claim goes through now and takes the due job, then finds nobody to give it to.
    wait_until(lambda: len(events_of(client, admin, job["id"])) == 3, 10)
    history = events_of(client, admin, job["id"])
    assert [(e["event"], e["actor"]) for e in history] == [
        ("enqueued", "key:e2e-producer"),
        ("claimed", "key:hangs-up"),
        ("released", "server"),
    ]
    row = read_job(job["id"])
    assert (row.status, row.retry_count, row.worker_id, row.claim_token) == ("pending", 0, None, None)
