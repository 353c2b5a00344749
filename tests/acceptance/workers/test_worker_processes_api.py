"""Worker processes over the API: register, beat, deregister; quiet and stop; claims that name their process."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from queuelog.auth.keys import authenticate
from queuelog.core.clock import utcnow
from queuelog.extensions import db
from queuelog.models import WorkerProcess
from queuelog.queue.worker_processes import GONE_AFTER, PRUNE_AFTER, NewProcess, ProcessLimitReached
from queuelog.queue.worker_processes import register as register_process
from tests.support.api import bearer
from tests.support.factories import assert_problem

PROCESS = {"host": "box-1", "pid": 4242, "version": "queuelog-worker/0.1", "concurrency": 4, "types": ["email"]}


@pytest.fixture
def register(client, worker):
    """register(headers=worker, **overrides) → the new process's JSON, asserting the 201."""

    def _register(headers: dict | None = None, **overrides):
        response = client.post("/workers", json={**PROCESS, **overrides}, headers=headers or worker)
        assert response.status_code == 201, response.get_json()
        return response.get_json()

    return _register


def _age(process_id: int, by: timedelta) -> None:
    """Move the process's last beat back in time."""
    with db.engine.begin() as conn:
        conn.execute(
            update(WorkerProcess.__table__)
            .where(WorkerProcess.__table__.c.id == process_id)
            .values(heartbeat_at=utcnow() - by)
        )


def test_register_answers_the_id_the_command_and_the_beat_interval(client, register):
    body = register()
    assert body["command"] == "run" and body["online"] is True and body["key"] == "worker-a"
    assert {k: body[k] for k in PROCESS} == PROCESS
    assert body["heartbeat_seconds"] >= 1
    assert client.get(f"/workers/{body['id']}", headers={}).status_code == 401


def test_every_bad_registration_field_is_named_at_once(client, worker):
    body = {
        "host": "",
        "pid": "12",
        "version": "v1",
        "concurrency": 0,
        "types": ["email", "not-configured"],
        "colour": "red",
    }
    response = client.post("/workers", json=body, headers=worker)
    assert response.status_code == 422 and response.content_type == "application/problem+json"
    assert {e["pointer"] for e in response.get_json()["errors"]} == {
        "/host",
        "/pid",
        "/concurrency",
        "/types/1",
        "/colour",
    }


def test_registration_without_required_fields_lists_each(client, worker):
    response = client.post("/workers", json={}, headers=worker)
    assert response.status_code == 422
    assert {e["pointer"] for e in response.get_json()["errors"]} == {"/host", "/pid", "/version", "/concurrency"}


def test_malformed_registration_is_400(client, worker):
    response = client.post("/workers", data="{", headers={**worker, "Content-Type": "application/json"})
    assert response.status_code == 400 and response.content_type == "application/problem+json"


def test_heartbeat_answers_run_and_brings_a_gone_process_back(client, worker, register):
    process = register()
    _age(process["id"], GONE_AFTER * 2)
    assert client.get(f"/workers/{process['id']}", headers=worker).get_json()["online"] is False
    beat = client.post(f"/workers/{process['id']}/heartbeat", headers=worker)
    assert beat.status_code == 200
    assert beat.get_json()["command"] == "run" and beat.get_json()["online"] is True


def test_v_another_keys_process_is_404_to_beat_read_and_delete(client, other_worker, register):
    process_id = register()["id"]
    for method, path in (
        ("post", f"/workers/{process_id}/heartbeat"),
        ("get", f"/workers/{process_id}"),
        ("delete", f"/workers/{process_id}"),
    ):
        response = getattr(client, method)(path, headers=other_worker)
        assert response.status_code == 404, (method, path)
        assert response.content_type == "application/problem+json"


def test_unknown_and_oversized_ids_are_404(client, worker):
    assert client.post("/workers/999/heartbeat", headers=worker).status_code == 404
    assert client.post(f"/workers/{2**40}/heartbeat", headers=worker).status_code == 404


def test_deregister_removes_the_process(client, worker, register):
    process_id = register()["id"]
    assert client.delete(f"/workers/{process_id}", headers=worker).status_code == 204
    assert client.get(f"/workers/{process_id}", headers=worker).status_code == 404


def test_deregister_gives_back_a_job_still_running_under_the_process(
    client, worker, admin, enqueue, read_job, register
):
    """A runner deregisters once it holds nothing; a job left running under it is one whose claim answer it
    never read (its long-poll was cut short by the shutdown), so nobody would run it until the reaper."""
    process_id = register()["id"]
    job = enqueue()
    assert client.post("/jobs/claim", json={"process_id": process_id}, headers=worker).status_code == 200
    assert client.delete(f"/workers/{process_id}", headers=worker).status_code == 204
    row = read_job(job["id"])
    assert (row.status, row.retry_count, row.worker_id, row.claim_token) == ("pending", 0, None, None)
    events = client.get(f"/jobs/{job['id']}/events", headers=admin).get_json()["events"]
    assert [(e["event"], e["actor"]) for e in events][-1] == ("released", "server")
    assert client.post("/jobs/claim", json={}, headers=worker).get_json()["id"] == job["id"]


def test_deregister_leaves_jobs_of_other_processes_and_finished_jobs_alone(client, worker, enqueue, read_job, register):
    leaving, staying = register()["id"], register()["id"]
    done, held = enqueue(), enqueue()
    first = client.post("/jobs/claim", json={"process_id": leaving}, headers=worker).get_json()
    client.post(f"/jobs/{first['id']}/complete", json={"claim_token": first["claim_token"]}, headers=worker)
    assert client.post("/jobs/claim", json={"process_id": staying}, headers=worker).status_code == 200
    assert client.delete(f"/workers/{leaving}", headers=worker).status_code == 204
    assert read_job(done["id"]).status == "completed"
    assert read_job(held["id"]).status == "running"


def test_a_worker_key_lists_its_own_an_admin_all_but_revoked_keys(
    client, worker, other_worker, admin, register, make_key
):
    mine = register()["id"]
    theirs = register(headers=other_worker)["id"]
    retired = bearer(make_key("worker", "retired"))
    register(headers=retired)
    client.application.test_cli_runner().invoke(args=["keys", "revoke", "retired"])
    assert [p["id"] for p in client.get("/workers", headers=worker).get_json()["workers"]] == [mine]
    assert {p["id"] for p in client.get("/workers", headers=admin).get_json()["workers"]} == {mine, theirs}


def test_quiet_then_stop_reach_the_process_by_its_heartbeat(client, worker, admin, register):
    process_id = register()["id"]
    quiet = client.post(f"/workers/{process_id}/quiet", headers=admin)
    assert quiet.status_code == 200 and quiet.get_json()["command"] == "quiet"
    assert client.post(f"/workers/{process_id}/heartbeat", headers=worker).get_json()["command"] == "quiet"
    assert client.post(f"/workers/{process_id}/stop", headers=admin).get_json()["command"] == "stop"
    assert client.post(f"/workers/{process_id}/heartbeat", headers=worker).get_json()["command"] == "stop"


def test_stop_is_never_undone_by_quiet(client, admin, register):
    process_id = register()["id"]
    client.post(f"/workers/{process_id}/stop", headers=admin)
    response = client.post(f"/workers/{process_id}/quiet", headers=admin)
    assert response.status_code == 409 and response.get_json()["command"] == "stop"


def test_a_gone_process_cannot_be_commanded(client, admin, register):
    process_id = register()["id"]
    _age(process_id, GONE_AFTER * 2)
    assert client.post(f"/workers/{process_id}/stop", headers=admin).status_code == 409


def test_a_process_gone_for_a_day_is_deleted_by_the_next_registration(client, worker, admin, register):
    old, recent = register()["id"], register()["id"]
    _age(old, GONE_AFTER + PRUNE_AFTER + timedelta(minutes=1))
    _age(recent, GONE_AFTER * 2)
    register()
    listed = {p["id"] for p in client.get("/workers", headers=admin).get_json()["workers"]}
    assert old not in listed and recent in listed


def test_only_admin_keys_command_processes(client, worker, register):
    process_id = register()["id"]
    assert client.post(f"/workers/{process_id}/stop", headers=worker).status_code == 403


def test_a_claim_naming_its_process_is_recorded_on_the_job(client, worker, enqueue, read_job, register):
    process_id = register()["id"]
    job = enqueue()
    claimed = client.post("/jobs/claim", json={"process_id": process_id}, headers=worker)
    assert claimed.status_code == 200 and claimed.get_json()["id"] == job["id"]
    assert read_job(job["id"]).process_id == process_id


def test_a_quiet_process_is_given_nothing(client, worker, admin, enqueue, register):
    process_id = register()["id"]
    enqueue()
    client.post(f"/workers/{process_id}/quiet", headers=admin)
    assert client.post("/jobs/claim", json={"process_id": process_id}, headers=worker).status_code == 204
    assert client.post("/jobs/claim", json={}, headers=worker).status_code == 200


def test_v_a_claim_cannot_name_another_keys_process(client, other_worker, enqueue, register):
    process_id = register()["id"]
    enqueue()
    response = client.post("/jobs/claim", json={"process_id": process_id}, headers=other_worker)
    assert response.status_code == 404
    assert response.mimetype == "application/problem+json"


# --- at most QUEUELOG_MAX_WORKER_PROCESSES_PER_KEY online per key ----------------------------------------

LIMIT_TYPE = "https://queuelog.dev/problems/max-worker-processes-reached"
three_at_most = pytest.mark.parametrize("config_overrides", [{"MAX_WORKER_PROCESSES_PER_KEY": 3}])


def _processes() -> int:
    with db.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(WorkerProcess.__table__)).scalar_one()


@three_at_most
def test_registering_past_the_limit_of_online_processes_is_a_429_with_retry_after(client, worker, register):
    for _ in range(3):
        register()
    response = client.post("/workers", json=PROCESS, headers=worker)
    body = assert_problem(response, 429)
    assert body["type"] == LIMIT_TYPE and body["title"] == "Too many worker processes"
    assert (body["limit"], body["online"]) == (3, 3)
    assert "may have at most 3" in body["detail"]
    assert 1 <= int(response.headers["Retry-After"]) <= GONE_AFTER.total_seconds()
    assert _processes() == 3


@three_at_most
def test_beating_at_the_limit_is_never_refused_not_even_a_gone_process_coming_back(client, worker, register):
    first, *others = [register()["id"] for _ in range(3)]
    _age(first, GONE_AFTER * 2)
    register()  # the gone one's place
    for process_id in [first, *others]:
        beat = client.post(f"/workers/{process_id}/heartbeat", headers=worker)
        assert (beat.status_code, beat.get_json()["online"]) == (200, True)
    assert len([p for p in client.get("/workers", headers=worker).get_json()["workers"] if p["online"]]) == 4


@three_at_most
def test_a_process_gone_or_deregistered_frees_its_place(client, worker, register):
    first, second, _ = [register()["id"] for _ in range(3)]
    _age(first, GONE_AFTER + timedelta(seconds=1))
    register()
    assert client.delete(f"/workers/{second}", headers=worker).status_code == 204
    register()
    assert client.post("/workers", json=PROCESS, headers=worker).status_code == 429


@three_at_most
def test_other_keys_processes_do_not_count(client, other_worker, register):
    for _ in range(3):
        register()
    register(headers=other_worker)


@three_at_most
def test_concurrent_registrations_never_pass_the_limit(app, make_key):
    """Eight registrations of one key at once (threads, each with its own connection): three get in."""
    caller = authenticate(make_key("worker", name="racing"))
    barrier, outcomes = threading.Barrier(8), []

    def one() -> None:
        with app.app_context():
            barrier.wait(timeout=30)
            try:
                register_process(caller, NewProcess("box", 1, "v", 1, ()))
                outcomes.append(201)
            except ProcessLimitReached:
                outcomes.append(429)

    threads = [threading.Thread(target=one) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcomes) == [201] * 3 + [429] * 5
    assert _processes() == 3
