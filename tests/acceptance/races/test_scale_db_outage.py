"""Proof: while the database is unavailable the API answers 503 problem+json, and it recovers by itself.

PostgreSQL: the test runs its own throwaway cluster and stops it (pg_ctl stop -m fast: every
connection is cut) for a few seconds in the middle of an enqueue load, then starts it again.
SQLite cannot go away while its file is open, so its outage is the one SQLite has in practice:
another process holds the write lock (a backup, a maintenance script, a stuck program) longer than
the server's busy timeout, here shortened to 1 s.

Four client processes keep enqueueing throughout, retrying an unanswered request with the same
idempotency key, as a well-behaved producer does when it sees 503 and Retry-After.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time

import pytest

from queuelog import create_app
from queuelog.database.schema_upgrade import schema_is_current
from tests.support.api import bearer
from tests.support.database import app_config, test_db_kind
from tests.support.pg_cluster import free_port, throwaway_cluster
from tests.support.scale import (
    CTX,
    Processes,
    create_keys,
    enqueue_through_crashes,
    jobs_by_id,
    server_env,
    session_for,
)
from tests.support.server import _live_members, running_server

CLIENTS = 4
JOBS_PER_CLIENT = 40
OUTAGE_SECONDS = 3


class SqliteWriteLock:
    """Another program holding SQLite's write lock: BEGIN IMMEDIATE on its own connection."""

    def __init__(self, database_url: str):
        self._path = database_url.removeprefix("sqlite:///")
        self._conn = None

    def take(self) -> None:
        self._conn = sqlite3.connect(self._path, isolation_level=None)
        self._conn.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        self._conn.execute("ROLLBACK")
        self._conn.close()


@pytest.fixture(scope="module")
def outage(tmp_path_factory):
    """Run the load through an outage; return what the clients saw and what the database kept."""
    if test_db_kind() == "postgresql":
        with throwaway_cluster() as cluster:
            return _through_an_outage(cluster.url, go_away=cluster.stop, come_back=cluster.start, env={})
    database_url = f"sqlite:///{tmp_path_factory.mktemp('outage') / 'queuelog.db'}"
    lock = SqliteWriteLock(database_url)
    return _through_an_outage(
        database_url, go_away=lock.take, come_back=lock.release, env={"QUEUELOG_SQLITE_BUSY_TIMEOUT_MS": "1000"}
    )


def _through_an_outage(database_url: str, go_away, come_back, env: dict) -> dict:
    [producer] = create_keys(database_url, ("outage-producer", "producer", None))
    acknowledged = CTX.Value("i", 0)
    story = {}
    with running_server(server_env(database_url, **env), workers=4) as server:
        master = server.pid
        deadline = time.monotonic() + 120
        clients = Processes(
            enqueue_through_crashes,
            [(server.url, producer, client, JOBS_PER_CLIENT, acknowledged, deadline) for client in range(CLIENTS)],
        )
        try:
            while acknowledged.value < CLIENTS * JOBS_PER_CLIENT // 4 and time.monotonic() < deadline:
                time.sleep(0.01)
            go_away()
            # A server process restarting during the outage (a crash, gunicorn's timeout, max_requests)
            # boots without a database: it must come up anyway, or gunicorn stops the whole server.
            time.sleep(0.5)
            story["replaced_worker"] = _kill_one_worker(server)
            time.sleep(OUTAGE_SECONDS)
            come_back()
            back = time.monotonic()
            story["recovery_seconds"] = _seconds_until_an_enqueue_succeeds(server.url, producer, deadline) - back
            story["results"] = clients.results(timeout=150)
        finally:
            clients.kill_all()
        reader = session_for(producer)
        story["after"] = {
            job["id"]: reader.get(f"{server.url}/jobs/{job['id']}", timeout=30)
            for result in story["results"]
            for _, job in result["answers"]
        }
        story["same_master"] = server.pid == master and server.process.poll() is None
        story["workers_after"] = [pid for pid in _live_members(server.pid) if pid != server.pid]
        story["log"] = server.log()
    story["jobs"] = jobs_by_id(database_url)
    refusals = [r for result in story["results"] for r in result["refusals"]]
    print(
        f"\n[db outage] {len(refusals)} requests refused during the outage; "
        f"an enqueue succeeded {story['recovery_seconds']:.1f} s after the database came back"
    )
    return story


def _kill_one_worker(server) -> int:
    worker = min(pid for pid in _live_members(server.pid) if pid != server.pid)
    os.kill(worker, signal.SIGKILL)
    return worker


def _seconds_until_an_enqueue_succeeds(url: str, producer: str, deadline: float) -> float:
    session = session_for(producer)
    while time.monotonic() < deadline:
        response = session.post(f"{url}/jobs", json={"type": "noop", "payload": {"probe": True}}, timeout=30)
        if response.status_code == 201:
            return time.monotonic()
        time.sleep(0.1)
    raise AssertionError("the server never recovered")


def _refusals(outage) -> list:
    return [refusal for result in outage["results"] for refusal in result["refusals"]]


def test_requests_during_the_outage_get_503_problem_json_with_retry_after(outage):
    refusals = _refusals(outage)
    assert refusals, "no request was refused: the outage did not happen"
    for status, content_type, retry_after, body in refusals:
        assert (status, content_type) == (503, "application/problem+json"), body
        assert retry_after is not None
        problem = json.loads(body)
        assert problem["status"] == 503 and problem["title"] and problem["detail"]


def test_no_traceback_reaches_a_client_or_the_log(outage):
    assert not any("Traceback" in body for _, _, _, body in _refusals(outage))
    assert "Traceback" not in outage["log"]


def test_no_request_failed_any_other_way(outage):
    # Every failure was an answered 503. The one exception allowed: the request the killed server
    # process may have been serving when it died.
    assert sum(result["dropped"] for result in outage["results"]) <= 1


def test_nothing_acknowledged_is_lost(outage):
    created = [job for result in outage["results"] for status, job in result["answers"] if status == 201]
    for job in created:
        assert outage["after"][job["id"]].json() == job
        assert outage["jobs"][job["id"]].idempotency_key == job["idempotency_key"]
    # Every request was answered in the end, each with its own job.
    answers = [job for result in outage["results"] for _, job in result["answers"]]
    assert len(answers) == len({job["id"] for job in answers}) == CLIENTS * JOBS_PER_CLIENT


def test_the_server_recovers_by_itself(outage):
    assert outage["same_master"], "the server stopped or was restarted"
    assert outage["recovery_seconds"] < 10


def test_a_server_process_that_boots_during_the_outage_comes_up_and_serves_later(outage):
    assert outage["replaced_worker"] not in outage["workers_after"]
    assert len(outage["workers_after"]) == 4
    assert "Worker failed to boot" not in outage["log"]


def test_a_server_process_started_while_the_database_is_unreachable_answers_503(tmp_path):
    if test_db_kind() == "postgresql":
        url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/postgres"  # nobody listens there
    else:
        url = f"sqlite:///{tmp_path / 'not-mounted-yet' / 'queuelog.db'}"
    application = create_app(app_config(url))  # must not raise: gunicorn would stop the server
    response = application.test_client().post("/jobs", json={"type": "email"}, headers=bearer("ql_" + "x" * 43))
    assert response.status_code == 503
    assert response.headers["Content-Type"] == "application/problem+json"


def test_once_the_database_is_there_the_schema_is_created_and_requests_work(tmp_path):
    # SQLite shows the whole story in-process: the directory appears, the next request migrates.
    directory = tmp_path / "not-mounted-yet"
    application = create_app(app_config(f"sqlite:///{directory / 'queuelog.db'}"))
    client = application.test_client()
    assert client.get("/jobs", headers=bearer("ql_" + "x" * 43)).status_code == 503
    directory.mkdir()
    assert client.get("/jobs", headers=bearer("ql_" + "x" * 43)).status_code == 401  # unknown key, not 503
    with application.app_context():
        assert schema_is_current()
