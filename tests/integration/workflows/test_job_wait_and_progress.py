"""Issue 17's contract, continued: waiting for a job's end (GET /jobs/{id}?wait=S) and a handler's progress
(tests/integration/workflows/test_workflows_api.py holds the workflows themselves)."""

from __future__ import annotations

import time

import pytest

from tests.support.factories import assert_problem, pointers

# --- waiting for a job's end ------------------------------------------------------------------------


@pytest.mark.parametrize("wait", ["0", "31", "-1", "abc", "nan", "inf", "1e2", " 5", ""])  # 1e1 is a number in range
def test_wait_out_of_range_is_a_422(client, enqueue, producer, wait):
    job = enqueue()
    assert pointers(client.get(f"/jobs/{job['id']}?wait={wait}", headers=producer)) == {"/query/wait"}


@pytest.mark.parametrize("query", ["=true", "wiat=5", "wait=5&extra=1"])
def test_a_query_parameter_other_than_wait_is_refused_not_ignored(client, enqueue, producer, query):
    job = enqueue()
    response = client.get(f"/jobs/{job['id']}?{query}", headers=producer)
    assert response.status_code == 422
    unknown = query.split("&")[-1].split("=")[0]
    assert pointers(response) == {f"/query/{unknown}"}


def test_wait_on_a_final_job_answers_at_once(client, enqueue, run, producer):
    job = enqueue()
    run(job["id"], result={"ok": True})
    started = time.monotonic()
    shown = client.get(f"/jobs/{job['id']}?wait=5", headers=producer).get_json()
    assert shown["status"] == "completed" and shown["result"] == {"ok": True}
    assert time.monotonic() - started < 1


def test_wait_answers_with_the_current_state_after_the_time(client, enqueue, producer):
    job = enqueue()
    started = time.monotonic()
    shown = client.get(f"/jobs/{job['id']}?wait=0.3", headers=producer).get_json()
    assert shown["status"] == "pending"
    assert 0.3 <= time.monotonic() - started < 2


def test_wait_on_a_job_the_producer_may_not_see_is_a_404(client, enqueue, other_producer):
    job = enqueue()
    assert_problem(client.get(f"/jobs/{job['id']}?wait=1", headers=other_producer), 404)


# --- progress ----------------------------------------------------------------------------------------------


def test_a_heartbeat_stores_progress_the_producer_sees(client, enqueue, claim, worker, producer):
    job = enqueue()
    held = claim()
    report = {"percent": 40, "stage": "resizing", "frames": {"done": 4, "of": 10}}
    response = client.post(
        f"/jobs/{job['id']}/heartbeat", json={"claim_token": held["claim_token"], "progress": report}, headers=worker
    )
    assert response.status_code == 200 and response.get_json()["progress"] == report
    assert client.get(f"/jobs/{job['id']}", headers=producer).get_json()["progress"] == report
    client.post(f"/jobs/{job['id']}/heartbeat", json={"claim_token": held["claim_token"]}, headers=worker)
    assert client.get(f"/jobs/{job['id']}", headers=producer).get_json()["progress"] == report


@pytest.mark.parametrize(
    "progress, pointer", [({"x": "a" * 5000}, "/progress"), ([1, 2], "/progress"), ("half", "/progress")]
)
def test_bad_progress_is_a_422(client, enqueue, claim, worker, progress, pointer):
    job = enqueue()
    held = claim()
    response = client.post(
        f"/jobs/{job['id']}/heartbeat", json={"claim_token": held["claim_token"], "progress": progress}, headers=worker
    )
    assert pointers(response) == {pointer}
