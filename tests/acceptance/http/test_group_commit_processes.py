"""Group commit across real processes: threads of several processes writing one database, and a
gthread server killed with SIGKILL right after its answers: every answered job is there afterwards."""

from __future__ import annotations

import threading
import time

import pytest
import requests

from queuelog import queue
from queuelog.auth.keys import authenticate
from queuelog.database.group_commit import committer_of
from queuelog.extensions import db
from queuelog.queue.enqueueing import NewJob
from tests.support.scale import (
    Processes,
    app_on,
    create_keys,
    event_histories,
    fresh_database_url,
    jobs_by_id,
    server_env,
    session_for,
)
from tests.support.server import running_server

PROCESSES = 3
THREADS = 8
JOBS_PER_THREAD = 25
SERVER_CLIENTS = 8
ANSWERS_BEFORE_KILL = 150


# --- several processes, each with threads ---------------------------------------------------------


def write_from_threads(database_url: str, producer_secret: str, worker_secret: str, process: int) -> dict:
    """In a process of its own: THREADS threads each enqueue, claim and complete JOBS_PER_THREAD jobs."""
    with app_on(database_url, GROUP_COMMIT="on") as app:
        producer, worker = authenticate(producer_secret), authenticate(worker_secret)
        enqueued: list[int] = []
        completed: list[int] = []
        failures: list[str] = []

        def work(thread: int) -> None:
            with app.app_context():
                try:
                    for n in range(JOBS_PER_THREAD):
                        payload = {"process": process, "thread": thread, "n": n}
                        enqueued.append(queue.enqueue(producer, [NewJob("email", payload)])[0].job.id)
                        claimed = queue.claim(worker)
                        for job in claimed:
                            completed.append(queue.complete(worker, job.id, job.claim_token).id)
                except Exception as error:
                    failures.append(repr(error))

        threads = [threading.Thread(target=work, args=(thread,)) for thread in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        stats = committer_of(db.engine).stats
    return {
        "enqueued": enqueued,
        "completed": completed,
        "failures": failures,
        "commits": stats.commits,
        "committed_members": stats.committed_members,
    }


@pytest.fixture(scope="module")
def several_processes(request, tmp_path_factory):
    database_url = fresh_database_url(request, tmp_path_factory.mktemp("group-commit-processes"))
    producer, worker = create_keys(database_url, ("gc-producer", "producer", None), ("gc-worker", "worker", None))
    children = Processes(
        write_from_threads, [(database_url, producer, worker, process) for process in range(PROCESSES)]
    )
    try:
        results = children.results(timeout=240)
    finally:
        children.kill_all()
    return {"results": results, "jobs": jobs_by_id(database_url), "histories": event_histories(database_url)}


def test_every_write_of_every_thread_of_every_process_succeeds(several_processes):
    assert [result["failures"] for result in several_processes["results"]] == [[]] * PROCESSES
    enqueued = [job_id for result in several_processes["results"] for job_id in result["enqueued"]]
    assert len(enqueued) == len(set(enqueued)) == PROCESSES * THREADS * JOBS_PER_THREAD


def test_every_job_is_stored_once_and_completed_once(several_processes):
    completed = [job_id for result in several_processes["results"] for job_id in result["completed"]]
    # A claim may take a job another thread enqueued, so a thread may complete fewer or more than it
    # enqueued; together they complete exactly what was enqueued, the rest is still pending.
    jobs = several_processes["jobs"]
    assert len(jobs) == PROCESSES * THREADS * JOBS_PER_THREAD
    assert len(completed) == len(set(completed))
    assert {job_id for job_id, row in jobs.items() if row.status == "completed"} == set(completed)
    assert {row.status for job_id, row in jobs.items() if job_id not in set(completed)} <= {"pending"}
    for job_id in completed:
        assert [event for event, _, _ in several_processes["histories"][job_id]] == ["enqueued", "claimed", "completed"]


def test_the_threads_of_each_process_shared_commits(several_processes):
    for result in several_processes["results"]:
        assert result["commits"] < result["committed_members"]


# --- a gthread server killed right after its answers ------------------------------------------------


def enqueue_until_stopped(base_url: str, secret: str, client: int, answers: list, stop: threading.Event) -> None:
    """POST /jobs, one job each, until ``stop``; every 201 goes into ``answers``. Errors end the loop."""
    session = session_for(secret)
    n = 0
    while not stop.is_set():
        body = {"type": "email", "payload": {"client": client, "n": n}, "idempotency_key": f"c{client}-{n}"}
        try:
            response = session.post(f"{base_url}/jobs", json=body, timeout=10)
        except requests.RequestException:
            return  # the server is gone
        if response.status_code == 201:
            answers.append(response.json())
        n += 1


@pytest.fixture(scope="module")
def killed_after_answers(request, tmp_path_factory):
    database_url = fresh_database_url(request, tmp_path_factory.mktemp("group-commit-kill"))
    [producer] = create_keys(database_url, ("kill-producer", "producer", None))
    answers: list[dict] = []
    stop = threading.Event()
    env = server_env(database_url, QUEUELOG_GROUP_COMMIT="on")
    with running_server(env, workers=2, extra_args=("--threads", "8")) as server:
        clients = [
            threading.Thread(target=enqueue_until_stopped, args=(server.url, producer, client, answers, stop))
            for client in range(SERVER_CLIENTS)
        ]
        for client in clients:
            client.start()
        deadline = time.monotonic() + 60
        while len(answers) < ANSWERS_BEFORE_KILL and time.monotonic() < deadline:
            time.sleep(0.005)
        server.kill()  # SIGKILL, master and workers, in the middle of the load
        answered_before_kill = len(answers)
        stop.set()
        for client in clients:
            client.join(30)
    return {"answers": list(answers), "answered_before_kill": answered_before_kill, "jobs": jobs_by_id(database_url)}


def test_the_server_was_killed_under_load(killed_after_answers):
    assert killed_after_answers["answered_before_kill"] >= ANSWERS_BEFORE_KILL


def test_every_job_answered_201_is_in_the_database_after_the_kill(killed_after_answers):
    jobs = killed_after_answers["jobs"]
    for answer in killed_after_answers["answers"]:
        row = jobs[answer["id"]]
        assert (row.idempotency_key, row.status, row.type) == (answer["idempotency_key"], "pending", "email")
