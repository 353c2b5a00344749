"""The worker-facing batch routes and release, as issue 6 specifies them.

- POST /jobs/complete: up to 100 acknowledgements, each checked like a single complete,
  one outcome per item in order, HTTP 200 overall;
- POST /jobs/claim with ``limit`` (1-100): {"jobs": [...]} or 204;
- POST /jobs/batch: up to 500 jobs, all-or-nothing, idempotency per item;
- POST /jobs/{id}/release: the holding worker gives a job back without counting a failure.
"""

from __future__ import annotations

import pytest


def complete_many(client, headers, items):
    return client.post("/jobs/complete", json={"jobs": items}, headers=headers)


def events_of(client, admin, job_id):
    return [e["event"] for e in client.get(f"/jobs/{job_id}/events", headers=admin).get_json()["events"]]


# --- POST /jobs/complete ---------------------------------------------------------------------------


def test_batch_complete_answers_each_item_in_order(client, worker, enqueue, claim, read_job):
    first, stale, second = enqueue(), enqueue(), enqueue()
    held = {job["id"]: job["claim_token"] for job in claim(limit=3)["jobs"]}
    response = complete_many(
        client,
        worker,
        [
            {"id": first["id"], "claim_token": held[first["id"]], "result": {"sent": True}},
            {"id": stale["id"], "claim_token": "a-stale-token"},
            {"id": 999_999, "claim_token": "whatever"},
            {"id": second["id"], "claim_token": held[second["id"]]},
        ],
    )
    assert response.status_code == 200
    results = response.get_json()["results"]
    assert [(r["id"], r["status"]) for r in results] == [
        (first["id"], 200),
        (stale["id"], 409),
        (999_999, 404),
        (second["id"], 200),
    ]
    assert results[0]["job"]["status"] == "completed"
    assert results[0]["job"]["result"] == {"sent": True}
    assert results[3]["job"]["result"] is None
    assert read_job(stale["id"]).status == "running"


def test_batch_complete_of_one_claim_keeps_each_jobs_own_result(client, worker, enqueue, claim, read_job, admin):
    jobs = [enqueue() for _ in range(5)]
    held = claim(limit=5)["jobs"]
    results = [
        {"n": 1},
        None,
        {"text": 'a "quoted" \\ back-slashed ✓ line\nbreak'},
        {"n": 1},
        {"nested": {"list": [1, None]}},
    ]
    items = [
        {"id": job["id"], "claim_token": job["claim_token"], **({"result": r} if r is not None else {})}
        for job, r in zip(held, results, strict=True)
    ]
    response = complete_many(client, worker, items)
    assert [r["status"] for r in response.get_json()["results"]] == [200] * 5
    for job, expected in zip(held, results, strict=True):
        assert client.get(f"/jobs/{job['id']}", headers=admin).get_json()["result"] == expected
        assert read_job(job["id"]).status == "completed"
    assert {job["id"] for job in held} == {job["id"] for job in jobs}


def test_batch_complete_refusals_are_problem_documents(client, worker, enqueue, claim):
    job = enqueue()
    claim()
    results = complete_many(
        client, worker, [{"id": job["id"], "claim_token": "stale"}, {"id": 424242, "claim_token": "x"}]
    ).get_json()["results"]
    conflict, missing = results[0]["problem"], results[1]["problem"]
    assert conflict["status"] == 409 and conflict["title"] == "Conflict" and conflict["job_status"] == "running"
    assert conflict["type"].endswith("/conflict") and "cannot complete job" in conflict["detail"]
    assert missing["status"] == 404 and missing["detail"] == "job 424242 does not exist"
    assert set(results[0]) == {"id", "status", "problem"}


def test_batch_complete_refused_item_does_not_undo_the_others(client, worker, enqueue, claim, read_job):
    done, refused = enqueue(), enqueue()
    held = {job["id"]: job["claim_token"] for job in claim(limit=2)["jobs"]}
    complete_many(
        client,
        worker,
        [{"id": refused["id"], "claim_token": "wrong"}, {"id": done["id"], "claim_token": held[done["id"]]}],
    )
    assert read_job(done["id"]).status == "completed"
    assert read_job(refused["id"]).status == "running"
    assert read_job(refused["id"]).claim_token == held[refused["id"]]


def test_batch_complete_refuses_another_workers_job(client, worker, other_worker, enqueue, claim, read_job):
    job = enqueue()
    held = claim(headers=other_worker)
    results = complete_many(client, worker, [{"id": job["id"], "claim_token": held["claim_token"]}])
    assert results.get_json()["results"][0]["status"] == 409
    assert read_job(job["id"]).status == "running"


def test_batch_complete_twice_in_one_batch_completes_once(client, worker, admin, enqueue, claim):
    job = enqueue()
    token = claim()["claim_token"]
    results = complete_many(client, worker, [{"id": job["id"], "claim_token": token}] * 2).get_json()["results"]
    assert [r["status"] for r in results] == [200, 409]
    assert events_of(client, admin, job["id"]).count("completed") == 1


def test_batch_complete_records_a_completed_event_per_job(client, worker, admin, enqueue, claim):
    jobs = [enqueue(), enqueue()]
    held = claim(limit=2)["jobs"]
    complete_many(client, worker, [{"id": j["id"], "claim_token": j["claim_token"]} for j in held])
    for job in jobs:
        assert events_of(client, admin, job["id"]) == ["enqueued", "claimed", "completed"]


@pytest.mark.parametrize(
    "body, pointer",
    [
        ({"jobs": []}, "/jobs"),
        ({"jobs": [{"id": 1, "claim_token": "t"}] * 101}, "/jobs"),
        ({"jobs": [{"claim_token": "t"}]}, "/jobs/0/id"),
        ({"jobs": [{"id": "1", "claim_token": "t"}]}, "/jobs/0/id"),
        ({"jobs": [{"id": 1}]}, "/jobs/0/claim_token"),
        ({"jobs": [{"id": 1, "claim_token": "t", "result": [1]}]}, "/jobs/0/result"),
        ({"jobs": [{"id": 1, "claim_token": "t", "status": "completed"}]}, "/jobs/0/status"),
        ({"jobs": ["1"]}, "/jobs/0"),
        ({"jobs": [{"id": 1, "claim_token": "t"}], "extra": 1}, "/extra"),
    ],
)
def test_batch_complete_validates_the_whole_body_first(client, worker, enqueue, claim, read_job, body, pointer):
    job = enqueue()
    token = claim()["claim_token"]
    if body["jobs"]:  # a valid item next to the bad one must not be completed either
        body = {**body, "jobs": body["jobs"] + [{"id": job["id"], "claim_token": token}]}
    response = client.post("/jobs/complete", json=body, headers=worker)
    assert response.status_code == 422
    assert pointer in [e["pointer"] for e in response.get_json()["errors"]]
    assert read_job(job["id"]).status == "running"


def test_batch_complete_accepts_100_items(client, worker, enqueue, claim):
    response = complete_many(client, worker, [{"id": n, "claim_token": "t"} for n in range(1, 101)])
    assert response.status_code == 200
    assert [r["status"] for r in response.get_json()["results"]] == [404] * 100


def test_batch_complete_is_for_worker_keys(client, producer, admin):
    for headers in (producer, admin):
        assert complete_many(client, headers, [{"id": 1, "claim_token": "t"}]).status_code == 403
    assert client.post("/jobs/complete", json={"jobs": [{"id": 1, "claim_token": "t"}]}).status_code == 401


def test_batch_complete_route_does_not_shadow_the_single_complete(client, worker, enqueue, claim):
    job = enqueue()
    token = claim()["claim_token"]
    response = client.post(f"/jobs/{job['id']}/complete", json={"claim_token": token}, headers=worker)
    assert response.status_code == 200 and response.get_json()["status"] == "completed"
    assert client.get("/jobs/complete", headers=worker).status_code == 405


# --- POST /jobs/claim with limit -------------------------------------------------------------------


def test_batch_claim_takes_up_to_limit_jobs_in_claim_order(client, worker, make_job):
    low = [make_job(priority=0) for _ in range(3)]
    high = make_job(priority=20)
    response = client.post("/jobs/claim", json={"limit": 3}, headers=worker)
    assert response.status_code == 200
    jobs = response.get_json()["jobs"]
    assert [j["id"] for j in jobs] == [high, low[0], low[1]]
    assert all(j["status"] == "running" and j["claim_token"] and j["worker_id"] == "worker-a" for j in jobs)


def test_batch_claim_of_one_is_still_a_list(client, worker, enqueue):
    enqueue()
    assert len(client.post("/jobs/claim", json={"limit": 1}, headers=worker).get_json()["jobs"]) == 1


def test_batch_claim_with_nothing_due_answers_204(client, worker):
    response = client.post("/jobs/claim", json={"limit": 10}, headers=worker)
    assert response.status_code == 204 and response.data == b""


@pytest.mark.parametrize("limit", [0, 101, "5", 2.5])
def test_batch_claim_limit_is_1_to_100(client, worker, limit):
    response = client.post("/jobs/claim", json={"limit": limit}, headers=worker)
    assert response.status_code == 422
    assert response.get_json()["errors"][0]["pointer"] == "/limit"


# --- POST /jobs/batch ------------------------------------------------------------------------------


def test_batch_enqueue_creates_up_to_500_jobs(client, producer):
    response = client.post(
        "/jobs/batch", json={"jobs": [{"type": "email", "payload": {"n": n}} for n in range(500)]}, headers=producer
    )
    assert response.status_code == 201
    jobs = response.get_json()["jobs"]
    assert [j["payload"]["n"] for j in jobs] == list(range(500))
    assert all(j["created"] and j["status"] == "pending" for j in jobs)


def test_batch_enqueue_refuses_501_jobs(client, producer, admin):
    response = client.post("/jobs/batch", json={"jobs": [{"type": "email"}] * 501}, headers=producer)
    assert response.status_code == 422
    assert client.get("/jobs", headers=admin).get_json()["jobs"] == []


def test_batch_enqueue_is_all_or_nothing(client, producer, admin):
    response = client.post("/jobs/batch", json={"jobs": [{"type": "email"}, {"type": "not-allowed"}]}, headers=producer)
    assert response.status_code == 422
    assert response.get_json()["errors"][0]["pointer"] == "/jobs/1/type"
    assert client.get("/jobs", headers=admin).get_json()["jobs"] == []


def test_batch_enqueue_replays_each_idempotency_key(client, producer):
    first = client.post("/jobs/batch", json={"jobs": [{"type": "email", "idempotency_key": "a"}]}, headers=producer)
    again = client.post(
        "/jobs/batch",
        json={"jobs": [{"type": "email", "idempotency_key": "a"}, {"type": "email", "idempotency_key": "b"}]},
        headers=producer,
    )
    assert again.status_code == 201
    replayed, created = again.get_json()["jobs"]
    assert replayed["id"] == first.get_json()["jobs"][0]["id"] and replayed["created"] is False
    assert created["created"] is True
    only_replay = client.post(
        "/jobs/batch", json={"jobs": [{"type": "email", "idempotency_key": "b"}]}, headers=producer
    )
    assert only_replay.status_code == 200
    assert only_replay.get_json()["jobs"][0]["id"] == created["id"]


def test_batch_enqueue_key_reused_for_another_request_refuses_the_whole_batch(client, producer, admin):
    client.post("/jobs", json={"type": "email", "idempotency_key": "k"}, headers=producer)
    response = client.post(
        "/jobs/batch", json={"jobs": [{"type": "email"}, {"type": "report", "idempotency_key": "k"}]}, headers=producer
    )
    assert response.status_code == 422
    assert len(client.get("/jobs", headers=admin).get_json()["jobs"]) == 1


# --- POST /jobs/{id}/release -----------------------------------------------------------------------


def test_release_gives_the_job_back_without_counting_a_failure(client, worker, admin, enqueue, claim, read_job):
    job = enqueue()
    token = claim()["claim_token"]
    response = client.post(f"/jobs/{job['id']}/release", json={"claim_token": token}, headers=worker)
    assert response.status_code == 200
    body = response.get_json()
    assert (body["status"], body["retry_count"], body["worker_id"], body["lease_expires_at"]) == (
        "pending",
        0,
        None,
        None,
    )
    row = read_job(job["id"])
    assert (row.status, row.retry_count, row.claim_token, row.stall_count) == ("pending", 0, None, 0)
    assert events_of(client, admin, job["id"])[-1] == "released"


def test_released_job_can_be_claimed_again(client, worker, other_worker, enqueue, claim):
    job = enqueue()
    token = claim()["claim_token"]
    client.post(f"/jobs/{job['id']}/release", json={"claim_token": token}, headers=worker)
    again = claim(headers=other_worker)
    assert again["id"] == job["id"] and again["claim_token"] != token


def test_release_with_a_stale_token_is_refused(client, worker, enqueue, claim, read_job):
    job = enqueue()
    claim()
    response = client.post(f"/jobs/{job['id']}/release", json={"claim_token": "stale"}, headers=worker)
    assert response.status_code == 409
    assert read_job(job["id"]).status == "running"


def test_release_by_another_worker_is_refused(client, worker, other_worker, enqueue, claim, read_job):
    job = enqueue()
    token = claim()["claim_token"]
    response = client.post(f"/jobs/{job['id']}/release", json={"claim_token": token}, headers=other_worker)
    assert response.status_code == 409
    assert read_job(job["id"]).status == "running"


def test_release_of_a_job_that_is_not_running_is_refused(client, worker, enqueue):
    job = enqueue()
    response = client.post(f"/jobs/{job['id']}/release", json={"claim_token": "x"}, headers=worker)
    assert response.status_code == 409
    assert client.post("/jobs/987654/release", json={"claim_token": "x"}, headers=worker).status_code == 404


def test_release_needs_the_claim_token_and_a_worker_key(client, worker, producer, enqueue, claim):
    job = enqueue()
    token = claim()["claim_token"]
    missing = client.post(f"/jobs/{job['id']}/release", json={}, headers=worker)
    assert missing.status_code == 422
    assert missing.get_json()["errors"][0]["pointer"] == "/claim_token"
    assert client.post(f"/jobs/{job['id']}/release", json={"claim_token": token}, headers=producer).status_code == 403
