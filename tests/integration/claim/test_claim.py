"""POST /jobs/claim: order, due time, type filters, leases, batches, and many claimers at once (V-06)."""

from __future__ import annotations

import multiprocessing
import queue as stdlib_queue
import threading
from collections import Counter
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from queuelog.core.clock import rfc3339, utcnow
from queuelog.extensions import db
from queuelog.models import JobEvent
from tests.support.api import bearer
from tests.support.claimers import claim_until_empty
from tests.support.database import app_config
from tests.support.factories import assert_problem, pointers, when

CONCURRENT_JOBS = 300


@pytest.fixture
def any_priority(make_key):
    """A producer allowed every priority."""
    return bearer(make_key("producer", "producer-critical", max_priority="critical"))


def test_claim_answers_the_job_running_with_its_lease_and_token(client, worker, enqueue):
    job = enqueue(payload={"to": "a"})
    before = utcnow()
    response = client.post("/jobs/claim", headers=worker)
    assert response.status_code == 200
    claimed = response.get_json()
    assert claimed["id"] == job["id"]
    assert claimed["status"] == "running"
    assert claimed["worker_id"] == "worker-a"
    assert claimed["payload"] == {"to": "a"}
    assert isinstance(claimed["claim_token"], str) and len(claimed["claim_token"]) >= 16
    claimed_at = when(claimed["claimed_at"])
    assert before <= claimed_at <= utcnow()
    assert when(claimed["lease_expires_at"]) - claimed_at == timedelta(seconds=300)


def test_claim_with_no_body_and_with_an_empty_object_both_work(client, worker, enqueue):
    enqueue()
    enqueue()
    assert client.post("/jobs/claim", headers=worker).status_code == 200
    assert client.post("/jobs/claim", json={}, headers=worker).status_code == 200


def test_claim_answers_204_with_no_body_when_nothing_is_claimable(client, worker):
    response = client.post("/jobs/claim", headers=worker)
    assert response.status_code == 204
    assert response.data == b""


def test_claim_order_is_priority_first_then_oldest(client, any_priority, enqueue, claim):
    ids = {}
    for name, priority in [
        ("low-1", "low"),
        ("high-1", "high"),
        ("medium-1", "medium"),
        ("high-2", "high"),
        ("critical-1", "critical"),
        ("low-2", "low"),
    ]:
        ids[enqueue(headers=any_priority, priority=priority)["id"]] = name
    order = [ids[claim()["id"]] for _ in range(len(ids))]
    assert order == ["critical-1", "high-1", "high-2", "medium-1", "low-1", "low-2"]


def test_a_job_whose_run_at_is_in_the_future_is_not_claimable(client, worker, enqueue, read_job):
    job = enqueue(run_at=rfc3339(utcnow() + timedelta(minutes=5)))
    assert client.post("/jobs/claim", headers=worker).status_code == 204
    assert read_job(job["id"]).status == "pending"


def test_a_due_job_is_claimed_before_a_higher_priority_one_that_is_not_due(client, any_priority, enqueue, claim):
    enqueue(headers=any_priority, priority="critical", run_at=rfc3339(utcnow() + timedelta(minutes=5)))
    due = enqueue(priority="low", run_at=rfc3339(utcnow() - timedelta(seconds=1)))
    assert claim()["id"] == due["id"]


def test_a_job_becomes_claimable_when_its_run_at_comes(client, worker, make_job, claim):
    job_id = make_job(run_at=utcnow() - timedelta(milliseconds=1))
    assert claim()["id"] == job_id


@pytest.mark.parametrize("status", ["running", "completed", "failed", "cancelled"])
def test_only_pending_jobs_are_claimable(client, worker, make_job, status):
    make_job(status=status)
    assert client.post("/jobs/claim", headers=worker).status_code == 204


def test_types_filter_claims_only_those_types(client, worker, enqueue, claim):
    enqueue(type="email")
    report = enqueue(type="report")
    assert claim(types=["report", "noop"])["id"] == report["id"]
    assert client.post("/jobs/claim", json={"types": ["report"]}, headers=worker).status_code == 204


@pytest.mark.parametrize("types", [[], "email", [5], ["bad type"], ["x" * 101]])
def test_bad_types_filter_is_422(client, worker, types):
    assert pointers(client.post("/jobs/claim", json={"types": types}, headers=worker)) == {"/types"}


def test_a_worker_key_limited_by_types_claims_only_those(client, make_key, enqueue, claim):
    limited = bearer(make_key("worker", "report-worker", types=["report"]))
    enqueue(type="email")
    report = enqueue(type="report")
    assert claim(headers=limited)["id"] == report["id"]
    assert client.post("/jobs/claim", headers=limited).status_code == 204


def test_a_worker_key_limited_by_types_may_not_ask_for_others(client, make_key, enqueue, read_job):
    limited = bearer(make_key("worker", "report-worker", types=["report"]))
    job = enqueue(type="email")
    assert_problem(client.post("/jobs/claim", json={"types": ["email"]}, headers=limited), 403)
    assert_problem(client.post("/jobs/claim", json={"types": ["report", "email"]}, headers=limited), 403)
    assert read_job(job["id"]).status == "pending"


@pytest.mark.parametrize("seconds", [1, 86400])
def test_lease_seconds_at_the_bounds_is_accepted(client, enqueue, claim, seconds):
    enqueue()
    claimed = claim(lease_seconds=seconds)
    assert when(claimed["lease_expires_at"]) - when(claimed["claimed_at"]) == timedelta(seconds=seconds)


@pytest.mark.parametrize("seconds", [0, -5, 86401, "60", 1.5, True])
def test_lease_seconds_out_of_bounds_is_422_and_claims_nothing(client, worker, enqueue, read_job, seconds):
    job = enqueue()
    assert pointers(client.post("/jobs/claim", json={"lease_seconds": seconds}, headers=worker)) == {"/lease_seconds"}
    assert read_job(job["id"]).status == "pending"


@pytest.mark.parametrize("config_overrides", [{"LEASE_SECONDS": 45}])
def test_the_default_lease_is_the_configured_one(client, enqueue, claim, config_overrides):
    enqueue()
    claimed = claim()
    assert when(claimed["lease_expires_at"]) - when(claimed["claimed_at"]) == timedelta(seconds=45)


def test_batch_claim_takes_up_to_limit_jobs_in_claim_order(client, worker, any_priority, enqueue, read_job):
    ids = [enqueue()["id"] for _ in range(4)]
    urgent = enqueue(headers=any_priority, priority="high")["id"]
    first = client.post("/jobs/claim", json={"limit": 3}, headers=worker)
    assert first.status_code == 200
    assert [job["id"] for job in first.get_json()["jobs"]] == [urgent, ids[0], ids[1]]
    assert all(job["status"] == "running" and job["claim_token"] for job in first.get_json()["jobs"])
    second = client.post("/jobs/claim", json={"limit": 3}, headers=worker).get_json()
    assert [job["id"] for job in second["jobs"]] == [ids[2], ids[3]]
    assert client.post("/jobs/claim", json={"limit": 3}, headers=worker).status_code == 204
    assert {read_job(i).status for i in ids + [urgent]} == {"running"}


def test_each_job_of_a_batch_claim_can_be_completed_with_its_token(client, worker, enqueue):
    for _ in range(3):
        enqueue()
    jobs = client.post("/jobs/claim", json={"limit": 3}, headers=worker).get_json()["jobs"]
    for job in jobs:
        done = client.post(f"/jobs/{job['id']}/complete", json={"claim_token": job["claim_token"]}, headers=worker)
        assert done.get_json()["status"] == "completed"


@pytest.mark.parametrize("limit", [0, 101, "3"])
def test_batch_claim_limit_out_of_bounds_is_422(client, worker, limit):
    assert pointers(client.post("/jobs/claim", json={"limit": limit}, headers=worker)) == {"/limit"}


# --- V-06: many claimers at once ------------------------------------------------------------------


def _fill_queue(client, headers, count: int) -> set[int]:
    ids: set[int] = set()
    for start in range(0, count, 500):
        batch = [{"type": "noop", "payload": {"n": n}} for n in range(start, min(count, start + 500))]
        response = client.post("/jobs/batch", json={"jobs": batch}, headers=headers)
        assert response.status_code == 201
        ids.update(job["id"] for job in response.get_json()["jobs"])
    return ids


def _claimed_events_per_job() -> Counter:
    events = JobEvent.__table__
    with db.engine.connect() as conn:
        rows = conn.execute(
            select(events.c.job_id, func.count()).where(events.c.event == "claimed").group_by(events.c.job_id)
        ).all()
    return Counter({job_id: count for job_id, count in rows})


def _assert_claimed_exactly_once(all_ids: set[int], per_claimer: list[list[int]]) -> None:
    claimed = [job_id for ids in per_claimer for job_id in ids]
    duplicates = [job_id for job_id, n in Counter(claimed).items() if n > 1]
    assert duplicates == [], f"claimed twice: {duplicates[:10]}"
    assert set(claimed) == all_ids, f"never claimed: {sorted(all_ids - set(claimed))[:10]}"
    events = _claimed_events_per_job()
    assert set(events) == all_ids and set(events.values()) == {1}, "the log must show one claim per job"
    assert sum(1 for ids in per_claimer if ids) > 1, "the claimers did not overlap; the test proved nothing"


@pytest.mark.parametrize("limit", [None, 5])
def test_v06_many_threads_claim_every_job_exactly_once(app, client, producer, make_key, limit):
    all_ids = _fill_queue(client, producer, CONCURRENT_JOBS)
    secrets = [make_key("worker", f"thread-worker-{n}") for n in range(8)]
    start = threading.Barrier(len(secrets))
    per_claimer: list[list[int]] = []
    failures: list[str] = []

    def claimer(secret: str):
        own = app.test_client()
        ids: list[int] = []
        start.wait(timeout=30)
        body = {"limit": limit} if limit else {}
        for _ in range(CONCURRENT_JOBS + 1):
            response = own.post("/jobs/claim", json=body, headers=bearer(secret))
            if response.status_code == 204:
                break
            if response.status_code != 200:
                failures.append(f"{response.status_code}: {response.data[:200]!r}")
                break
            data = response.get_json()
            if limit:
                ids.extend(job["id"] for job in data["jobs"])
            else:
                ids.append(data["id"])
        per_claimer.append(ids)

    threads = [threading.Thread(target=claimer, args=(secret,)) for secret in secrets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
    _assert_claimed_exactly_once(all_ids, per_claimer)


def test_v06_many_processes_claim_every_job_exactly_once(app, client, producer, make_key, database_url):
    all_ids = _fill_queue(client, producer, CONCURRENT_JOBS)
    secrets = [make_key("worker", f"process-worker-{n}") for n in range(4)]
    # spawn: each process starts clean and builds its own app and engine on the same database.
    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(len(secrets)), context.Queue()
    config = app_config(database_url)
    processes = [context.Process(target=claim_until_empty, args=(config, secret, start, results)) for secret in secrets]
    for process in processes:
        process.start()
    try:
        outcomes = [results.get(timeout=60) for _ in processes]
    except stdlib_queue.Empty:
        pytest.fail("a claimer process did not report within 60 s")
    finally:
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
    errors = [text for kind, text in outcomes if kind == "error"]
    assert errors == []
    _assert_claimed_exactly_once(all_ids, [ids for _, ids in outcomes])
