"""Long-poll claims: POST /jobs/claim with ``wait`` holds the request until a job is claimable.

A waiting claim must hold no transaction or lock and must not spin; other server processes'
enqueues wake it too (LISTEN/NOTIFY on PostgreSQL, short polling on SQLite).
"""

from __future__ import annotations

import resource
import sqlite3
import threading
import time
from datetime import datetime, timedelta

import pytest
from sqlalchemy import create_engine, text

from queuelog import queue
from queuelog.core.clock import rfc3339, utcnow
from queuelog.waiting import pg_listener, wakeup
from tests.support.api import bearer
from tests.support.database import test_db_kind
from tests.support.server import running_server
from tests.support.waiters import start_waiting
from tests.worker_apps.harness import server_env, wait_until


def test_claim_with_wait_answers_204_when_the_time_is_up(client, worker):
    started = time.monotonic()
    response = client.post("/jobs/claim", json={"wait": 1}, headers=worker)
    elapsed = time.monotonic() - started
    assert response.status_code == 204
    assert 1.0 <= elapsed < 2.5


def test_claim_with_wait_takes_a_due_job_at_once(client, worker, enqueue):
    job = enqueue()
    started = time.monotonic()
    response = client.post("/jobs/claim", json={"wait": 10}, headers=worker)
    assert response.status_code == 200
    assert response.get_json()["id"] == job["id"]
    assert time.monotonic() - started < 1


def test_waiting_claim_returns_as_soon_as_a_job_is_enqueued(client, worker, enqueue):
    waiter = start_waiting(client, worker, wait=10)
    enqueued_at = time.monotonic()
    job = enqueue(type="report")
    response = waiter.result()
    assert response.status_code == 200
    assert response.get_json()["id"] == job["id"]
    assert response.get_json()["status"] == "running"
    assert waiter.returned_at - enqueued_at < 1.0


def test_waiting_batch_claim_answers_with_a_jobs_list(client, worker, producer):
    waiter = start_waiting(client, worker, wait=10, limit=5)
    response = client.post("/jobs/batch", json={"jobs": [{"type": "email"}, {"type": "email"}]}, headers=producer)
    assert response.status_code == 201
    claimed = waiter.result()
    assert claimed.status_code == 200
    assert 1 <= len(claimed.get_json()["jobs"]) <= 2
    assert all(job["claim_token"] for job in claimed.get_json()["jobs"])


def test_waiting_claim_ignores_jobs_of_other_types(client, worker, enqueue):
    waiter = start_waiting(client, worker, wait=1.5, types=["report"])
    enqueue(type="email")
    response = waiter.result()
    assert response.status_code == 204


def test_waiting_claim_wakes_for_a_released_job(client, worker, other_worker, enqueue, claim):
    job = enqueue()
    held = claim(headers=other_worker)
    waiter = start_waiting(client, worker, wait=10)
    released = client.post(
        f"/jobs/{job['id']}/release", json={"claim_token": held["claim_token"]}, headers=other_worker
    )
    assert released.status_code == 200
    response = waiter.result()
    assert response.status_code == 200
    assert response.get_json()["id"] == job["id"]
    assert response.get_json()["worker_id"] == "worker-a"


def test_waiting_claim_wakes_for_a_failed_job_that_is_requeued(client, worker, other_worker, enqueue, claim):
    job = enqueue()
    held = claim(headers=other_worker)
    waiter = start_waiting(client, worker, wait=10)
    client.post(
        f"/jobs/{job['id']}/fail", json={"claim_token": held["claim_token"], "error": "x"}, headers=other_worker
    )
    response = waiter.result()
    assert response.status_code == 200
    assert response.get_json()["retry_count"] == 1


def test_waiting_claim_takes_a_scheduled_job_when_it_comes_due(client, worker, enqueue):
    run_at = utcnow() + timedelta(seconds=1.5)
    job = enqueue(run_at=rfc3339(run_at))
    response = client.post("/jobs/claim", json={"wait": 8}, headers=worker)
    assert response.status_code == 200
    assert response.get_json()["id"] == job["id"]
    claimed_at = datetime.fromisoformat(response.get_json()["claimed_at"])
    assert run_at <= claimed_at < run_at + timedelta(seconds=2)


def test_a_waiting_claim_that_looked_just_before_a_jobs_run_at_takes_it_when_it_comes_due(
    client, worker, enqueue, monkeypatch
):
    """Its first claim finds nothing just before the job's run_at and answers only after that moment: the claim
    still takes the job then, not at its next recheck (set far off here)."""
    monkeypatch.setattr(wakeup, "LISTENING_RECHECK_SECONDS", 60.0)
    monkeypatch.setattr(wakeup, "POLLING_RECHECK_SECONDS", 60.0)
    run_at = utcnow() + timedelta(seconds=0.5)
    job = enqueue(run_at=rfc3339(run_at))
    claim = queue.claim
    claims = []

    def claim_answering_late(*args, **kwargs):
        rows = claim(*args, **kwargs)
        claims.append(rows)
        if len(claims) == 1:
            time.sleep(max(0.0, (run_at - utcnow()).total_seconds()) + 0.2)
        return rows

    monkeypatch.setattr(queue, "claim", claim_answering_late)
    response = client.post("/jobs/claim", json={"wait": 10}, headers=worker)
    assert response.status_code == 200 and response.get_json()["id"] == job["id"]
    assert claims[0] == []
    claimed_at = datetime.fromisoformat(response.get_json()["claimed_at"])
    assert run_at <= claimed_at < run_at + timedelta(seconds=2)


@pytest.mark.parametrize("wait", [30.5, -1, "5", True, {"seconds": 5}])
def test_claim_wait_must_be_a_number_of_seconds_up_to_30(client, worker, wait):
    response = client.post("/jobs/claim", json={"wait": wait}, headers=worker)
    assert response.status_code == 422
    assert response.get_json()["errors"][0]["pointer"] == "/wait"


def test_claim_wait_of_30_seconds_is_accepted(client, worker, enqueue):
    enqueue()
    response = client.post("/jobs/claim", json={"wait": 30}, headers=worker)
    assert response.status_code == 200


def test_waiting_claim_does_not_block_a_concurrent_enqueue(client, worker, producer):
    waiter = start_waiting(client, worker, wait=2, types=["report"])
    started = time.monotonic()
    response = client.post("/jobs", json={"type": "email"}, headers=producer)
    assert response.status_code == 201
    assert time.monotonic() - started < 1.0
    assert waiter.is_alive()
    assert waiter.result().status_code == 204


#: On PostgreSQL the app under test names its sessions, so the check below sees only the waiting claim's.
APP_SESSIONS = "longpoll-under-test"


@pytest.mark.parametrize(
    "config_overrides",
    [
        {"SQLALCHEMY_ENGINE_OPTIONS": {"connect_args": {"application_name": APP_SESSIONS}}}
        if test_db_kind() == "postgresql"
        else {}
    ],
    indirect=True,
)
def test_waiting_claim_holds_no_transaction_or_lock(client, worker, database_url):
    # Watched for 3 s of its 5 s wait, which takes in its rechecks (a read each second).
    waiter = start_waiting(client, worker, wait=5)
    watch_until = time.monotonic() + 3.0
    if test_db_kind() == "sqlite":
        conn = sqlite3.connect(database_url.removeprefix("sqlite:///"), timeout=10, isolation_level=None)
        try:
            # The request's first writes (its key's last use, its first claim) may still be under way on a
            # busy machine: wait them out once. From then on the lock must be free without waiting at all.
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            conn.execute("PRAGMA busy_timeout = 0")
            while time.monotonic() < watch_until:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("ROLLBACK")
                time.sleep(0.02)
        finally:
            conn.close()
    else:
        engine = create_engine(database_url.replace("postgresql://", "postgresql+psycopg://", 1))
        try:
            with engine.connect() as conn:
                while time.monotonic() < watch_until:
                    held, sessions = _app_transactions_older_than(conn, seconds=1.5)
                    assert held == [], "a transaction (and its locks) held across the wait"
                    assert sessions >= 1, "the app's sessions do not carry its name: this check would see nothing"
                    time.sleep(0.02)
        finally:
            engine.dispose()
    assert waiter.is_alive()
    assert waiter.result().status_code == 204


def _app_transactions_older_than(conn, seconds):
    """The app's sessions inside a transaction that began more than ``seconds`` ago, with the relations they lock.

    A waiting claim that held its transaction (and so its locks) across the wait shows here from its second
    recheck on. Each short read between rechecks does not: it lasts milliseconds. Judging by a transaction's age,
    not by a glance at ``state`` and ``pg_locks``, is what keeps this check exact. Those two views are not read at
    one instant, so a session may be seen idle and holding the lock of a transaction it has just begun. The age
    is measured from this statement's start, which comes before the activity view is read, so it never
    overstates it.
    """
    rows = conn.execute(
        text(
            "SELECT a.pid, a.state, now() - a.xact_start AS age, left(a.query, 200) AS query,"
            " (SELECT string_agg(DISTINCT l.relation::regclass::text, ', ') FROM pg_locks l"
            "  WHERE l.pid = a.pid AND l.relation IS NOT NULL) AS locks"
            " FROM pg_stat_activity a WHERE a.application_name = :app"
        ),
        {"app": APP_SESSIONS},
    ).all()
    conn.rollback()
    old = [row for row in rows if row.age is not None and row.age.total_seconds() > seconds]
    return [(row.pid, row.state, str(row.age), row.query, row.locks) for row in old], len(rows)


def test_waiting_claim_does_not_spin_the_cpu(client, worker):
    before = resource.getrusage(resource.RUSAGE_SELF)
    response = client.post("/jobs/claim", json={"wait": 3}, headers=worker)
    after = resource.getrusage(resource.RUSAGE_SELF)
    assert response.status_code == 204
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu < 0.6, f"{cpu:.2f} s of CPU in a 3 s wait"


# Serial: the bound below is a latency across processes, which the parallel tests beside it could stretch.
@pytest.mark.serial
@pytest.mark.parametrize("enqueue", ["one", "batch"])
def test_long_poll_wakes_when_another_server_process_enqueues(app, database_url, make_key, enqueue):
    """Two servers on one database: a job enqueued through one (alone, or in a batch) wakes a claim waiting in
    the other."""
    env = server_env(database_url)
    threads = ("--threads", "4")
    worker_key, producer_key = make_key("worker", "lp-worker"), make_key("producer", "lp-producer")
    with (
        running_server(env, workers=1, extra_args=threads) as waiting_server,
        running_server(env, workers=1, extra_args=threads) as enqueue_server,
    ):
        import requests

        latencies = []
        for _ in range(3):
            result = {}

            def wait_for_job(result):
                result["response"] = requests.post(
                    waiting_server.url + "/jobs/claim", json={"wait": 10}, headers=bearer(worker_key), timeout=20
                )
                result["at"] = time.monotonic()

            thread = threading.Thread(target=wait_for_job, args=(result,))
            thread.start()
            # Well before the waiting claim's own recheck (LISTENING_RECHECK_SECONDS after it began), so
            # only a wake-up from the other process answers it within the bound below.
            time.sleep(0.2)
            assert thread.is_alive()
            if enqueue == "one":
                answer = requests.post(
                    enqueue_server.url + "/jobs", json={"type": "ok"}, headers=bearer(producer_key), timeout=10
                ).json()
            else:
                [answer] = requests.post(
                    enqueue_server.url + "/jobs/batch",
                    json={"jobs": [{"type": "ok"}]},
                    headers=bearer(producer_key),
                    timeout=10,
                ).json()["jobs"]
            enqueued_at = time.monotonic()
            thread.join(15)
            assert result["response"].status_code == 200
            assert result["response"].json()["id"] == answer["id"]
            latencies.append(result["at"] - enqueued_at)
    # PostgreSQL: NOTIFY wakes it at once; SQLite: a datagram to the other process's wake socket.
    assert max(latencies) < 0.4, latencies


@pytest.mark.skipif(test_db_kind() != "postgresql", reason="LISTEN/NOTIFY is PostgreSQL's; SQLite polls")
def test_listener_reconnects_after_its_connection_is_killed(app, database_url):
    waker = wakeup.waker_for_current_app()
    engine = create_engine(database_url.replace("postgresql://", "postgresql+psycopg://", 1))
    listener_pids = text("SELECT pid FROM pg_stat_activity WHERE application_name = :name")
    try:
        with engine.connect() as conn:

            def pids():
                found = {row.pid for row in conn.execute(listener_pids, {"name": pg_listener.LISTENER_NAME})}
                conn.rollback()
                return found

            killed = wait_until(pids, 5)
            conn.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = :name"),
                {"name": pg_listener.LISTENER_NAME},
            )
            conn.commit()
            wait_until(lambda: pids() and not pids() & killed, 10)
            wait_until(lambda: waker.listening, 5)
            before = waker.generation
            conn.execute(text(f"NOTIFY {pg_listener.CHANNEL}"))  # as another server process's enqueue does
            conn.commit()
            wait_until(lambda: waker.generation > before, 2)
    finally:
        engine.dispose()
