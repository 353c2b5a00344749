"""Job-level time limits (issue 16): dedupe windows (unique_for), expiry (expires_at) and run timeouts
(timeout_seconds), through the API on a real database; the concurrency proofs are in
test_job_time_concurrency.py, the worker's side in test_job_time_worker.py.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from sqlalchemy import update

from queuelog import queue
from queuelog.core.clock import rfc3339, utcnow
from queuelog.extensions import db
from queuelog.models import UniqueSlot
from tests.support.factories import assert_problem, count_jobs, event_rows, pointers, set_job, when

slots = UniqueSlot.__table__


def _post(client, headers, **body):
    body.setdefault("type", "email")
    return client.post("/jobs", json=body, headers=headers)


def _window_passes(seconds: float) -> None:
    """Every dedupe window began ``seconds`` earlier, as if that much time had passed."""
    with db.engine.begin() as conn:
        conn.execute(update(slots).values(enqueued_at=utcnow() - timedelta(seconds=seconds)))


# --- validation: each field's errors are 422 with a pointer --------------------------------------------


@pytest.mark.parametrize(
    "body, pointer",
    [
        ({"unique_for": 0}, "/unique_for"),
        ({"unique_for": 604_801}, "/unique_for"),
        ({"unique_for": "60"}, "/unique_for"),
        ({"unique_for": 1.5}, "/unique_for"),
        ({"unique_for": 60, "unique_key": ""}, "/unique_key"),
        ({"unique_for": 60, "unique_key": "x" * 201}, "/unique_key"),
        ({"unique_for": 60, "unique_key": "tab\there"}, "/unique_key"),
        ({"unique_for": 60, "unique_key": 7}, "/unique_key"),
        ({"unique_key": "alone"}, "/unique_key"),
        ({"expires_at": "tomorrow"}, "/expires_at"),
        ({"expires_at": "2030-01-01T00:00:00"}, "/expires_at"),
        ({"expires_at": "2020-01-01T00:00:00Z"}, "/expires_at"),
        ({"run_at": "2030-01-02T00:00:00Z", "expires_at": "2030-01-01T00:00:00Z"}, "/expires_at"),
        ({"timeout_seconds": 0}, "/timeout_seconds"),
        ({"timeout_seconds": 86_401}, "/timeout_seconds"),
        ({"timeout_seconds": True}, "/timeout_seconds"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_a_bad_time_limit_is_422_pointing_at_it(client, producer, body, pointer):
    response = _post(client, producer, **body)

    assert pointers(response) == {pointer}
    assert count_jobs() == 0


def test_a_bad_time_limit_in_a_batch_points_at_its_item(client, producer):
    response = client.post(
        "/jobs/batch", json={"jobs": [{"type": "email"}, {"type": "email", "timeout_seconds": -1}]}, headers=producer
    )

    assert pointers(response) == {"/jobs/1/timeout_seconds"}


def test_the_limits_at_their_bounds_are_taken_and_shown_on_the_job(client, producer):
    expires = utcnow() + timedelta(days=1)
    response = _post(
        client, producer, unique_for=604_800, unique_key="k", expires_at=rfc3339(expires), timeout_seconds=86_400
    )

    assert response.status_code == 201
    job = response.get_json()
    assert (job["unique_key"], job["timeout_seconds"], job["timeout_at"]) == ("k", 86_400, None)
    assert when(job["expires_at"]) == expires
    assert "deduplicated" not in job


# --- dedupe windows --------------------------------------------------------------------------------------


def test_an_enqueue_within_the_window_returns_the_first_job_with_200(client, producer):
    first = _post(client, producer, payload={"a": 1}, unique_for=60)
    second = _post(client, producer, payload={"a": 1}, unique_for=60)

    assert first.status_code == 201 and "deduplicated" not in first.get_json()
    assert second.status_code == 200
    assert second.get_json()["deduplicated"] is True
    assert second.get_json()["id"] == first.get_json()["id"]
    assert count_jobs() == 1


def test_the_default_key_is_type_and_payload_so_another_payload_is_another_job(client, producer):
    assert _post(client, producer, payload={"a": 1}, unique_for=60).status_code == 201
    assert _post(client, producer, payload={"a": 2}, unique_for=60).status_code == 201
    # The same payload with its keys in another order is the same payload.
    assert _post(client, producer, payload={"b": 1, "c": 2}, unique_for=60).status_code == 201
    assert _post(client, producer, payload={"c": 2, "b": 1}, unique_for=60).status_code == 200


def test_the_window_is_per_type(client, producer):
    assert _post(client, producer, type="email", unique_for=60, unique_key="k").status_code == 201
    assert _post(client, producer, type="report", unique_for=60, unique_key="k").status_code == 201


def test_a_unique_key_dedupes_whatever_the_payload(client, producer):
    first = _post(client, producer, payload={"n": 1}, unique_for=60, unique_key="invoice-7")
    second = _post(client, producer, payload={"n": 2}, unique_for=60, unique_key="invoice-7")

    assert second.status_code == 200 and second.get_json()["id"] == first.get_json()["id"]
    assert second.get_json()["payload"] == {"n": 1}


def test_the_window_is_per_producer_not_shared_by_default(client, producer, other_producer):
    # Each key has its own windows, as it has its own idempotency keys
    # (tests/integration/jobs/test_unique_scope.py: the rest).
    first = _post(client, producer, unique_for=60, unique_key="k")
    second = _post(client, other_producer, unique_for=60, unique_key="k")

    assert second.status_code == 201
    assert second.get_json()["id"] != first.get_json()["id"]
    assert count_jobs() == 2


def test_an_enqueue_after_the_window_makes_a_new_job(client, producer):
    first = _post(client, producer, unique_for=60).get_json()
    _window_passes(60)

    second = _post(client, producer, unique_for=60)

    assert second.status_code == 201 and second.get_json()["id"] != first["id"]
    # …and the new job holds the window now.
    third = _post(client, producer, unique_for=60)
    assert third.status_code == 200 and third.get_json()["id"] == second.get_json()["id"]


def test_the_window_is_the_new_requests_unique_for(client, producer):
    _post(client, producer, unique_for=600)
    _window_passes(30)

    assert _post(client, producer, unique_for=60).status_code == 200
    assert _post(client, producer, unique_for=10).status_code == 201


def test_an_enqueue_after_the_first_job_finished_makes_a_new_job(client, producer, worker, claim):
    first = _post(client, producer, unique_for=600).get_json()
    held = claim()
    client.post(f"/jobs/{first['id']}/complete", json={"claim_token": held["claim_token"]}, headers=worker)

    second = _post(client, producer, unique_for=600)

    assert second.status_code == 201 and second.get_json()["id"] != first["id"]


@pytest.mark.parametrize("status", ["running", "pending"])
def test_a_job_not_yet_finished_still_holds_its_window(client, producer, status, claim):
    first = _post(client, producer, unique_for=600).get_json()
    if status == "running":
        claim()

    second = _post(client, producer, unique_for=600)

    assert second.status_code == 200 and second.get_json()["id"] == first["id"]
    assert second.get_json()["status"] == status


def test_a_cancelled_job_frees_its_window(client, producer):
    first = _post(client, producer, unique_for=600).get_json()
    client.post(f"/jobs/{first['id']}/cancel", headers=producer)

    assert _post(client, producer, unique_for=600).status_code == 201


def test_a_job_without_unique_for_neither_holds_nor_meets_a_window(client, producer):
    assert _post(client, producer).status_code == 201
    assert _post(client, producer, unique_for=60).status_code == 201
    assert _post(client, producer).status_code == 201
    assert count_jobs() == 3


def test_a_deduplicated_enqueue_stores_nothing_and_logs_nothing(client, producer):
    first = _post(client, producer, unique_for=60).get_json()
    _post(client, producer, unique_for=60)

    assert [row.event for row in event_rows(first["id"])] == ["enqueued"]


def test_a_replayed_idempotency_key_answers_first_and_is_not_flagged_deduplicated(client, producer):
    first = _post(client, producer, unique_for=60, idempotency_key="once")
    again = _post(client, producer, unique_for=60, idempotency_key="once")

    assert again.status_code == 200 and again.get_json()["id"] == first.get_json()["id"]
    assert "deduplicated" not in again.get_json()


def test_a_new_idempotency_key_inside_a_window_is_deduplicated(client, producer):
    first = _post(client, producer, unique_for=60, idempotency_key="a")
    other = _post(client, producer, unique_for=60, idempotency_key="b")

    assert other.status_code == 200 and other.get_json()["deduplicated"] is True
    assert other.get_json()["id"] == first.get_json()["id"]


def test_a_batch_item_that_dedupes_answers_with_the_existing_job_in_its_slot(client, producer):
    existing = _post(client, producer, payload={"n": 0}, unique_for=60).get_json()

    response = client.post(
        "/jobs/batch",
        headers=producer,
        json={
            "jobs": [
                {"type": "email", "payload": {"n": 1}},
                {"type": "email", "payload": {"n": 0}, "unique_for": 60},
                {"type": "email", "payload": {"n": 2}, "unique_for": 60},
                {"type": "email", "payload": {"n": 2}, "unique_for": 60},
            ]
        },
    )

    assert response.status_code == 201
    jobs = response.get_json()["jobs"]
    assert [(job["created"], job.get("deduplicated", False)) for job in jobs] == [
        (True, False),
        (False, True),
        (True, False),
        (False, True),
    ]
    assert jobs[1]["id"] == existing["id"]
    assert jobs[3]["id"] == jobs[2]["id"]
    assert count_jobs() == 3


def test_a_batch_that_only_dedupes_answers_200(client, producer):
    _post(client, producer, unique_for=60)

    response = client.post("/jobs/batch", headers=producer, json={"jobs": [{"type": "email", "unique_for": 60}]})

    assert response.status_code == 200
    assert response.get_json()["jobs"][0]["deduplicated"] is True


def test_a_purged_job_frees_its_window(client, producer, runner, worker, claim):
    first = _post(client, producer, unique_for=600).get_json()
    held = claim()
    client.post(f"/jobs/{first['id']}/complete", json={"claim_token": held["claim_token"]}, headers=worker)
    set_job(first["id"], updated_at=utcnow() - timedelta(days=30))
    assert runner.invoke(args=["purge", "--older-than", "1d"]).exit_code == 0

    assert _post(client, producer, unique_for=600).status_code == 201


# --- expiry ------------------------------------------------------------------------------------------


def test_an_expired_job_is_never_claimed_and_the_reaper_cancels_it(client, producer, worker, read_job):
    job = _post(client, producer, expires_at=rfc3339(utcnow() + timedelta(seconds=1))).get_json()
    time.sleep(1.1)

    assert client.post("/jobs/claim", headers=worker).status_code == 204
    report = queue.reap()

    assert report.expired == [job["id"]]
    assert read_job(job["id"]).status == "cancelled"
    last = event_rows(job["id"])[-1]
    assert (last.event, last.from_status, last.to_status, last.actor) == ("expired", "pending", "cancelled", "reaper")


def test_a_job_claimed_before_it_expires_runs_and_is_not_expired(client, producer, worker, claim, read_job):
    job = _post(client, producer, expires_at=rfc3339(utcnow() + timedelta(seconds=60))).get_json()
    held = claim()
    set_job(job["id"], expires_at=utcnow() - timedelta(seconds=1))

    assert queue.reap().expired == []
    done = client.post(f"/jobs/{job['id']}/complete", json={"claim_token": held["claim_token"]}, headers=worker)
    assert done.status_code == 200


def test_an_expired_job_is_passed_over_for_the_next(client, producer, claim):
    stale = _post(client, producer, priority="medium", expires_at=rfc3339(utcnow() + timedelta(seconds=60))).get_json()
    fresh = _post(client, producer, priority="low").get_json()
    set_job(stale["id"], expires_at=utcnow() - timedelta(seconds=1))

    assert claim()["id"] == fresh["id"]


def test_a_batch_claim_under_flow_control_passes_over_expired_jobs(client, producer, admin, claim):
    client.patch("/types/email", json={"concurrency_limit": 5}, headers=admin)
    stale = _post(client, producer, expires_at=rfc3339(utcnow() + timedelta(seconds=60))).get_json()
    fresh = _post(client, producer).get_json()
    set_job(stale["id"], expires_at=utcnow() - timedelta(seconds=1))

    claimed = claim(limit=5)["jobs"]

    assert [job["id"] for job in claimed] == [fresh["id"]]


def test_expired_jobs_count_in_metrics(client, producer, admin):
    job = _post(client, producer, expires_at=rfc3339(utcnow() + timedelta(seconds=60))).get_json()
    set_job(job["id"], expires_at=utcnow() - timedelta(seconds=1))
    before = _metric(client, admin, "queuelog_jobs_expired_total")

    queue.reap()

    assert _metric(client, admin, "queuelog_jobs_expired_total") == before + 1


def _metric(client, admin, name: str) -> float:
    text = client.get("/metrics", headers=admin).get_data(as_text=True)
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def test_flask_reap_says_how_many_expired(client, producer, runner):
    job = _post(client, producer, expires_at=rfc3339(utcnow() + timedelta(seconds=60))).get_json()
    set_job(job["id"], expires_at=utcnow() - timedelta(seconds=1))

    result = runner.invoke(args=["reap"])

    assert result.exit_code == 0
    assert "reaped 0 jobs: 0 requeued, 0 failed, 0 quarantined; 1 expired" in result.output.splitlines()


# --- run timeouts ---------------------------------------------------------------------------------------


def test_the_claim_answer_carries_timeout_at(client, producer, claim):
    _post(client, producer, timeout_seconds=30)
    _post(client, producer)

    timed, plain = claim(), claim()

    assert when(timed["timeout_at"]) == when(timed["claimed_at"]) + timedelta(seconds=30)
    assert when(timed["lease_expires_at"]) <= when(timed["timeout_at"])
    assert plain["timeout_at"] is None


def test_a_lease_never_reaches_past_timeout_at(client, producer, worker, claim):
    _post(client, producer, timeout_seconds=5)
    held = claim(lease_seconds=300)

    beat = client.post(
        f"/jobs/{held['id']}/heartbeat",
        json={"claim_token": held["claim_token"], "lease_seconds": 3600},
        headers=worker,
    )

    assert beat.status_code == 200
    assert when(held["lease_expires_at"]) == when(held["timeout_at"])
    assert when(beat.get_json()["lease_expires_at"]) == when(held["timeout_at"])


def test_a_run_past_its_timeout_is_reaped_while_heartbeating_and_retried(client, producer, worker, claim, read_job):
    job = _post(client, producer, timeout_seconds=1, max_retries=2).get_json()
    held = claim(lease_seconds=300)
    token = {"claim_token": held["claim_token"]}
    assert client.post(f"/jobs/{job['id']}/heartbeat", json=token, headers=worker).status_code == 200
    time.sleep(1.1)

    report = queue.reap()

    assert report.requeued == [job["id"]] and report.timed_out == [job["id"]]
    row = read_job(job["id"])
    assert (row.status, row.retry_count, row.stall_count, row.timeout_at) == ("pending", 1, 0, None)
    last = event_rows(job["id"])[-1]
    assert (last.event, last.to_status, last.actor) == ("timed_out", "pending", "reaper")
    assert "timed out" in last.error
    again = claim()
    assert again["id"] == job["id"] and again["timeout_at"] is not None


def test_a_timed_out_run_with_no_retries_left_fails(client, producer, claim, read_job):
    job = _post(client, producer, timeout_seconds=1, max_retries=0).get_json()
    claim()
    time.sleep(1.1)

    assert queue.reap().failed == [job["id"]]
    row = read_job(job["id"])
    assert row.status == "failed" and row.error.startswith("timed out")


@pytest.mark.parametrize(
    "action, body",
    [
        ("complete", {"result": {"late": True}}),
        ("fail", {"error": "late"}),
        ("heartbeat", {}),
    ],
)
def test_a_late_answer_after_the_timeout_is_refused_409(client, producer, worker, claim, read_job, action, body):
    job = _post(client, producer, timeout_seconds=1).get_json()
    held = claim()
    time.sleep(1.1)

    late = client.post(f"/jobs/{job['id']}/{action}", json={"claim_token": held["claim_token"], **body}, headers=worker)

    problem = assert_problem(late, 409)
    assert problem["job_status"] == "running"
    assert "timed out" in problem["detail"]
    assert read_job(job["id"]).status == "running"  # the reaper moves it, as a timed-out attempt


def test_a_late_complete_after_the_reaper_is_refused_409(client, producer, worker, claim):
    job = _post(client, producer, timeout_seconds=1).get_json()
    held = claim()
    time.sleep(1.1)
    queue.reap()

    late = client.post(f"/jobs/{job['id']}/complete", json={"claim_token": held["claim_token"]}, headers=worker)

    assert assert_problem(late, 409)["job_status"] == "pending"


def test_a_run_within_its_timeout_completes(client, producer, worker, claim):
    job = _post(client, producer, timeout_seconds=60).get_json()
    held = claim()

    done = client.post(f"/jobs/{job['id']}/complete", json={"claim_token": held["claim_token"]}, headers=worker)

    assert done.status_code == 200 and done.get_json()["status"] == "completed"
    assert queue.reap().total == 0


def test_metrics_count_timed_out_runs(client, producer, admin, claim):
    _post(client, producer, timeout_seconds=1)
    claim()
    time.sleep(1.1)
    before = _metric(client, admin, "queuelog_jobs_timed_out_total")

    queue.reap()

    assert _metric(client, admin, "queuelog_jobs_timed_out_total") == before + 1
