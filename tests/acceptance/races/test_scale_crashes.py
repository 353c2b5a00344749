"""Proofs with SIGKILL: a worker dies holding jobs; the server dies in the middle of an enqueue load."""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime, timedelta

import pytest

from queuelog import queue
from tests.support.scale import (
    CTX,
    Processes,
    app_on,
    claim_and_hang,
    create_keys,
    enqueue_batches,
    enqueue_through_crashes,
    event_histories,
    flask_command,
    fresh_database_url,
    jobs_by_id,
    read_rows,
    server_env,
    session_for,
)
from tests.support.server import running_server

HELD = 5
LEASE_SECONDS = 2
CLIENTS = 6
JOBS_PER_CLIENT = 40


# --- a worker killed while holding jobs ------------------------------------------------------------


@pytest.fixture(scope="module")
def dead_worker(request, tmp_path_factory):
    """The whole story, once: a worker process claims HELD jobs with a 2 s lease and is SIGKILLed;
    reaping is tried before and after the lease ends; another worker claims the jobs; the dead worker's
    late ``complete`` arrives while they are held and again after they are completed."""
    database_url = fresh_database_url(request, tmp_path_factory.mktemp("dead-worker"))
    producer, doomed, rescuer_key = create_keys(
        database_url,
        ("crash-producer", "producer", None),
        ("doomed-worker", "worker", None),
        ("rescue-worker", "worker", None),
    )
    env = server_env(database_url)
    story = {}
    with running_server(env, workers=4) as server:
        story["ids"] = enqueue_batches(
            server.url, producer, [{"type": "resize-image", "payload": {"n": n}} for n in range(HELD)]
        )
        report = CTX.Queue()
        worker = CTX.Process(target=claim_and_hang, args=(server.url, doomed, HELD, LEASE_SECONDS, report))
        worker.start()
        try:
            story["held"] = report.get(timeout=30)
        finally:
            os.kill(worker.pid, signal.SIGKILL)
            worker.join(timeout=10)
        story["exitcode"] = worker.exitcode
        lease_end = max(datetime.fromisoformat(job["lease_expires_at"].replace("Z", "+00:00")) for job in story["held"])
        with app_on(database_url):
            story["reaped_early"] = queue.reap(now=lease_end - timedelta(seconds=0.5))

        _sleep_until(lease_end + timedelta(seconds=0.2))
        story["flask_reap"] = flask_command(env, "reap")

        rescuer, ghost = session_for(rescuer_key), session_for(doomed)
        claimed = rescuer.post(f"{server.url}/jobs/claim", json={"limit": HELD}, timeout=30)
        story["rescue_claim"] = claimed.status_code
        rescued = claimed.json()["jobs"]
        story["late_while_held"] = [_complete(ghost, server.url, job) for job in story["held"]]
        story["holders_after_late"] = {
            row.id: row.worker_id for row in read_rows(database_url, "SELECT id, worker_id FROM jobs")
        }
        story["rescue_completes"] = [_complete(rescuer, server.url, job) for job in rescued]
        story["late_after_done"] = [_complete(ghost, server.url, job) for job in story["held"]]
    story["histories"] = event_histories(database_url)
    return story


def _complete(session, url: str, job: dict):
    response = session.post(f"{url}/jobs/{job['id']}/complete", json={"claim_token": job["claim_token"]}, timeout=30)
    return response.status_code, response.headers.get("Content-Type"), response.json()


def test_the_killed_worker_held_its_jobs_when_it_died(dead_worker):
    assert dead_worker["exitcode"] == -signal.SIGKILL
    assert sorted(job["id"] for job in dead_worker["held"]) == sorted(dead_worker["ids"])
    assert {job["status"] for job in dead_worker["held"]} == {"running"}


def test_reaping_before_the_lease_ends_leaves_the_jobs_alone(dead_worker):
    assert dead_worker["reaped_early"].total == 0


def test_after_the_lease_flask_reap_requeues_them(dead_worker):
    reaped = dead_worker["flask_reap"]
    assert reaped.returncode == 0, reaped.stderr
    assert reaped.stdout.strip() == f"reaped {HELD} jobs: {HELD} requeued, 0 failed, 0 quarantined"


def test_another_worker_claims_and_completes_them(dead_worker):
    assert dead_worker["rescue_claim"] == 200
    assert [status for status, _, _ in dead_worker["rescue_completes"]] == [200] * HELD
    for job_id in dead_worker["ids"]:
        assert [(event, actor) for event, _, actor in dead_worker["histories"][job_id]] == [
            ("enqueued", "key:crash-producer"),
            ("claimed", "key:doomed-worker"),
            ("reaped", "reaper"),
            ("claimed", "key:rescue-worker"),
            ("completed", "key:rescue-worker"),
        ]


def test_the_dead_workers_late_complete_gets_409_while_another_worker_holds_the_job(dead_worker):
    assert [(status, kind) for status, kind, _ in dead_worker["late_while_held"]] == [
        (409, "application/problem+json")
    ] * HELD
    assert set(dead_worker["holders_after_late"].values()) == {"rescue-worker"}


def test_the_dead_workers_late_complete_gets_409_after_the_job_is_completed(dead_worker):
    assert [status for status, _, _ in dead_worker["late_after_done"]] == [409] * HELD
    assert {body["job_status"] for _, _, body in dead_worker["late_after_done"]} == {"completed"}


def _sleep_until(moment: datetime) -> None:
    remaining = (moment - datetime.now(moment.tzinfo)).total_seconds()
    if remaining > 0:
        time.sleep(remaining)


# --- the server killed during an enqueue load ------------------------------------------------------


@pytest.fixture(scope="module")
def crashed_during_load(request, tmp_path_factory):
    """Six client processes enqueue 40 jobs each; a third of the way in, the whole server is SIGKILLed
    and restarted. Clients retry unanswered requests with the same idempotency key."""
    database_url = fresh_database_url(request, tmp_path_factory.mktemp("server-crash"))
    [producer] = create_keys(database_url, ("steady-producer", "producer", None))
    acknowledged = CTX.Value("i", 0)
    with running_server(server_env(database_url), workers=4) as server:
        deadline = time.monotonic() + 120
        clients = Processes(
            enqueue_through_crashes,
            [(server.url, producer, client, JOBS_PER_CLIENT, acknowledged, deadline) for client in range(CLIENTS)],
        )
        try:
            while acknowledged.value < CLIENTS * JOBS_PER_CLIENT // 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            acknowledged_before_kill = acknowledged.value
            killed = time.monotonic()
            server.kill()
            time.sleep(0.5)
            server.start()
            restarted = time.monotonic()
            results = clients.results(timeout=150)
        finally:
            clients.kill_all()
        after_restart = {}
        reader = session_for(producer)
        for result in results:
            for _, job in result["answers"]:
                after_restart[job["id"]] = reader.get(f"{server.url}/jobs/{job['id']}", timeout=30)
    replays = sum(1 for result in results for status, _ in result["answers"] if status == 200)
    print(
        f"\n[server crash] killed after {acknowledged_before_kill} acknowledgements, back in "
        f"{restarted - killed:.1f} s; {sum(r['dropped'] for r in results)} tries unanswered, {replays} answered "
        f"by replay (committed before the crash, answer lost)"
    )
    return {
        "results": results,
        "after_restart": after_restart,
        "killed_at": acknowledged_before_kill,
        "jobs": jobs_by_id(database_url),
    }


def test_the_crash_interrupted_the_load(crashed_during_load):
    assert 0 < crashed_during_load["killed_at"] < CLIENTS * JOBS_PER_CLIENT
    assert sum(result["dropped"] for result in crashed_during_load["results"]) > 0


def test_every_job_acknowledged_with_201_exists_unchanged_after_restart(crashed_during_load):
    created = [job for result in crashed_during_load["results"] for status, job in result["answers"] if status == 201]
    assert len(created) > CLIENTS * JOBS_PER_CLIENT // 2
    for job in created:
        now = crashed_during_load["after_restart"][job["id"]]
        assert now.status_code == 200
        assert now.json() == job
        row = crashed_during_load["jobs"][job["id"]]
        assert (row.type, row.status, row.idempotency_key) == (job["type"], "pending", job["idempotency_key"])


def test_every_request_ends_as_exactly_one_job(crashed_during_load):
    answers = [(status, job) for result in crashed_during_load["results"] for status, job in result["answers"]]
    assert len(answers) == CLIENTS * JOBS_PER_CLIENT
    assert {status for status, _ in answers} <= {200, 201}
    # A request that committed just before the crash is answered 200 on its retry, with the same job.
    assert len({job["id"] for _, job in answers}) == CLIENTS * JOBS_PER_CLIENT
    assert len(crashed_during_load["jobs"]) == CLIENTS * JOBS_PER_CLIENT
