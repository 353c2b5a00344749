"""Workflows as issue 17's contract states them: depends_on and run_when, the waiting status, batch DAGs by ref,
parents on a claim, depends_on/dependents on a job, an admin's retry of a failed parent, purge (?wait and
progress: test_job_wait_and_progress.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from openapi_schema_validator import OAS31Validator

from queuelog import queue
from queuelog.auth.keys import authenticate
from queuelog.core.clock import utcnow
from queuelog.core.errors import InvalidRequest
from tests.support.factories import assert_problem, count_jobs, event_rows, pointers, set_job


def validator(client, name):
    document = client.get("/openapi.json").get_json()
    return OAS31Validator({"$ref": f"#/components/schemas/{name}", "components": document["components"]})


def status_of(client, admin, job_id: int) -> str:
    return client.get(f"/jobs/{job_id}", headers=admin).get_json()["status"]


def events_of(job_id: int) -> list[str]:
    return [row.event for row in event_rows(job_id)]


def batch(client, headers, *items) -> list[dict]:
    response = client.post("/jobs/batch", json={"jobs": list(items)}, headers=headers)
    assert response.status_code == 201, response.get_json()
    return response.get_json()["jobs"]


# --- depends_on and the waiting status ------------------------------------------------------------


def test_a_job_with_an_unfinished_parent_waits_and_is_never_claimed(client, enqueue, worker):
    parent = enqueue(run_at=(utcnow() + timedelta(hours=1)).isoformat())
    child = enqueue(depends_on=[parent["id"]])
    assert (child["status"], child["run_when"], child["depends_on"]) == ("waiting", "completed", [parent["id"]])
    assert client.post("/jobs/claim", json={}, headers=worker).status_code == 204


def test_completing_the_parent_makes_the_child_pending_in_the_same_step(client, enqueue, run, admin):
    parent = enqueue()
    child = enqueue(depends_on=[parent["id"]])
    run(parent["id"])
    assert status_of(client, admin, child["id"]) == "pending"
    assert events_of(child["id"]) == ["enqueued", "dependencies_met"]


def test_a_child_of_two_parents_waits_for_both(client, enqueue, run, admin):
    first, second = enqueue(), enqueue()
    child = enqueue(depends_on=[first["id"], second["id"]])
    run(first["id"])
    assert status_of(client, admin, child["id"]) == "waiting"
    run(second["id"])
    assert status_of(client, admin, child["id"]) == "pending"


def test_a_failed_parent_cancels_a_child_that_needs_it_completed_naming_the_parent(
    client, enqueue, run, producer, admin
):
    parent = enqueue()
    child = enqueue(depends_on=[parent["id"]])
    grandchild = enqueue(depends_on=[child["id"]])
    run(parent["id"], fail=True)
    assert status_of(client, admin, child["id"]) == "cancelled"
    assert status_of(client, admin, grandchild["id"]) == "cancelled"
    last = client.get(f"/jobs/{child['id']}/events", headers=producer).get_json()["events"][-1]
    assert (last["event"], last["from_status"], last["to_status"]) == ("dependency_failed", "waiting", "cancelled")
    assert last["error"] == f"parent job {parent['id']} failed"
    last = client.get(f"/jobs/{grandchild['id']}/events", headers=producer).get_json()["events"][-1]
    assert (last["event"], last["error"]) == ("dependency_failed", f"parent job {child['id']} cancelled")


def test_run_when_finished_runs_after_a_failed_parent_too(client, enqueue, run, admin):
    parent = enqueue()
    cleanup = enqueue(depends_on=[parent["id"]], run_when="finished")
    run(parent["id"], fail=True)
    assert status_of(client, admin, cleanup["id"]) == "pending"


def test_a_cancelled_parent_cancels_its_children(client, enqueue, producer, admin):
    parent = enqueue()
    child = enqueue(depends_on=[parent["id"]])
    assert client.post(f"/jobs/{parent['id']}/cancel", headers=producer).status_code == 200
    assert status_of(client, admin, child["id"]) == "cancelled"
    assert events_of(child["id"])[-1] == "dependency_failed"


def test_a_waiting_job_can_be_cancelled_and_its_own_children_follow(client, enqueue, producer, admin):
    parent = enqueue()
    child = enqueue(depends_on=[parent["id"]])
    grandchild = enqueue(depends_on=[child["id"]])
    response = client.post(f"/jobs/{child['id']}/cancel", headers=producer)
    assert response.status_code == 200 and response.get_json()["status"] == "cancelled"
    assert event_rows(child["id"])[-1].from_status == "waiting"
    assert status_of(client, admin, grandchild["id"]) == "cancelled"
    assert status_of(client, admin, parent["id"]) == "pending"


def test_parents_already_final_at_enqueue_decide_the_job_at_once(enqueue, run):
    done, failed = enqueue(), enqueue()
    run(done["id"])
    run(failed["id"], fail=True)
    assert enqueue(depends_on=[done["id"]])["status"] == "pending"
    assert enqueue(depends_on=[failed["id"]])["status"] == "cancelled"
    assert enqueue(depends_on=[done["id"], failed["id"]], run_when="finished")["status"] == "pending"


@pytest.mark.parametrize(
    "body, pointer",
    [
        ({"depends_on": [999999]}, "/depends_on/0"),
        ({"depends_on": [1, "x"]}, "/depends_on/1"),
        ({"depends_on": []}, "/depends_on"),
        ({"depends_on": "1"}, "/depends_on"),
        ({"depends_on": list(range(1, 102))}, "/depends_on"),
        ({"depends_on": [1], "run_when": "sometimes"}, "/run_when"),
        ({"run_when": "finished"}, "/run_when"),
        ({"ref": "a"}, "/ref"),
    ],
)
def test_bad_depends_on_is_a_422_with_a_pointer(client, producer, enqueue, body, pointer):
    enqueue()  # job 1 exists
    assert pointer in pointers(client.post("/jobs", json={"type": "email", **body}, headers=producer))


def test_depending_on_a_job_the_producer_may_not_see_is_a_422(client, enqueue, other_producer):
    theirs = enqueue()
    response = client.post("/jobs", json={"type": "email", "depends_on": [theirs["id"]]}, headers=other_producer)
    assert pointers(response) == {"/depends_on/0"}
    assert "does not exist" in response.get_json()["errors"][0]["detail"]


def test_an_admin_may_depend_on_any_job(enqueue, admin):
    theirs = enqueue()
    assert enqueue(headers=admin, depends_on=[theirs["id"]])["status"] == "waiting"


def test_waiting_jobs_are_listed_and_counted_like_other_statuses(client, enqueue, producer, admin):
    parent = enqueue()
    child = enqueue(depends_on=[parent["id"]])
    listed = client.get("/jobs?status=waiting", headers=producer).get_json()["jobs"]
    assert [job["id"] for job in listed] == [child["id"]]
    metrics = client.get("/metrics", headers=admin).get_data(as_text=True)
    assert 'queuelog_jobs{priority="low",status="waiting",type="email"} 1.0' in metrics


# --- batch DAGs -------------------------------------------------------------------------------------


def test_a_batch_is_a_whole_dag_by_ref(client, producer, admin):
    jobs = batch(
        client,
        producer,
        {"type": "resize-image", "ref": "resize"},
        {"type": "email", "ref": "mail", "depends_on": ["resize"]},
        {"type": "report", "depends_on": ["resize", "mail"], "run_when": "finished"},
    )
    resize, mail, report = jobs
    assert [job["status"] for job in jobs] == ["pending", "waiting", "waiting"]
    assert report["depends_on"] == [resize["id"], mail["id"]] and report["run_when"] == "finished"
    assert resize["dependents"] == [mail["id"], report["id"]]


def test_a_batch_item_may_mix_refs_and_existing_ids(client, producer, enqueue):
    earlier = enqueue()
    _, child = batch(
        client, producer, {"type": "email", "ref": "a"}, {"type": "email", "depends_on": ["a", earlier["id"]]}
    )
    assert child["status"] == "waiting" and sorted(child["depends_on"]) == sorted([earlier["id"], child["id"] - 1])


def test_a_batch_child_of_a_ref_answered_by_an_earlier_finished_job_is_decided_at_once(client, producer, enqueue, run):
    done = enqueue(idempotency_key="nightly-export")
    run(done["id"])
    replay, child, grandchild = batch(
        client,
        producer,
        {"type": "email", "ref": "export", "idempotency_key": "nightly-export"},
        {"type": "email", "ref": "mail", "depends_on": ["export"]},
        {"type": "email", "depends_on": ["mail"]},
    )
    assert replay["id"] == done["id"] and replay["created"] is False
    assert child["status"] == "pending" and grandchild["status"] == "waiting"


@pytest.mark.parametrize(
    "items, pointer",
    [
        ([{"type": "email", "ref": "a"}, {"type": "email", "ref": "a"}], "/jobs/1/ref"),
        ([{"type": "email", "depends_on": ["nope"]}], "/jobs/0/depends_on/0"),
        ([{"type": "email", "ref": "a", "depends_on": ["a"]}], "/jobs/0/depends_on/0"),
        (
            [
                {"type": "email", "ref": "a", "depends_on": ["c"]},
                {"type": "email", "ref": "b", "depends_on": ["a"]},
                {"type": "email", "ref": "c", "depends_on": ["b"]},
            ],
            "/jobs/0/depends_on/0",
        ),
        ([{"type": "email"}, {"type": "email", "depends_on": [999999]}], "/jobs/1/depends_on/0"),
        ([{"type": "email", "ref": "bad ref"}], "/jobs/0/ref"),
    ],
)
def test_a_bad_batch_graph_is_a_422_with_a_pointer_and_stores_nothing(client, producer, admin, items, pointer):
    response = client.post("/jobs/batch", json={"jobs": items}, headers=producer)
    assert pointer in pointers(response)
    assert client.get("/jobs", headers=admin).get_json()["jobs"] == []


def test_a_cycle_is_refused_as_a_cycle(client, producer):
    items = [{"type": "email", "ref": "a", "depends_on": ["b"]}, {"type": "email", "ref": "b", "depends_on": ["a"]}]
    body = assert_problem(client.post("/jobs/batch", json={"jobs": items}, headers=producer), 422)
    assert "cycle" in body["errors"][0]["detail"]


def test_the_queue_itself_refuses_a_cycle_that_did_not_come_through_the_api(make_key):
    producer = authenticate(make_key("producer"))
    jobs = [
        queue.NewJob("email", {}, ref="a", depends_on=("b",)),
        queue.NewJob("email", {}, ref="b", depends_on=("a",)),
    ]
    with pytest.raises(InvalidRequest) as refused:
        queue.enqueue(producer, jobs, batch=True)
    assert refused.value.errors == [
        {"pointer": "/jobs/0/depends_on/0", "detail": "depending on 'b' makes a cycle: a workflow must be a DAG"}
    ]
    assert count_jobs() == 0


def test_a_workflow_batch_may_hold_1000_jobs_and_a_plain_one_500(client, producer):
    plain = [{"type": "email"}] * 501
    assert pointers(client.post("/jobs/batch", json={"jobs": plain}, headers=producer)) == {"/jobs"}
    fan = [{"type": "email", "ref": "root"}] + [{"type": "email", "depends_on": ["root"]}] * 999
    assert client.post("/jobs/batch", json={"jobs": fan}, headers=producer).status_code == 201
    assert pointers(client.post("/jobs/batch", json={"jobs": fan + [{"type": "email"}]}, headers=producer)) == {"/jobs"}


# --- what a claim, a job and its page show ------------------------------------------------------------------


def test_a_claimed_child_carries_its_parents_and_their_results(client, producer, run, claim):
    a, b, child = batch(
        client,
        producer,
        {"type": "email", "ref": "a"},
        {"type": "email", "ref": "b"},
        {"type": "email", "depends_on": ["a", "b"]},
    )
    run(a["id"], result={"width": 640})
    run(b["id"], result=None)
    claimed = claim()
    assert claimed["id"] == child["id"]
    assert claimed["parents"] == [
        {"id": a["id"], "type": "email", "status": "completed", "result": {"width": 640}},
        {"id": b["id"], "type": "email", "status": "completed", "result": None},
    ]
    validator(client, "ClaimedJob").validate(claimed)


def test_a_claim_of_a_job_without_parents_has_no_parents_field(enqueue, claim):
    enqueue()
    assert "parents" not in claim()


def test_get_job_shows_depends_on_and_dependents(client, producer, enqueue):
    parent = enqueue()
    child = enqueue(depends_on=[parent["id"]])
    shown = client.get(f"/jobs/{parent['id']}", headers=producer).get_json()
    assert (shown["depends_on"], shown["dependents"]) == ([], [child["id"]])
    shown = client.get(f"/jobs/{child['id']}", headers=producer).get_json()
    assert (shown["depends_on"], shown["dependents"]) == ([parent["id"]], [])
    validator(client, "Job").validate(shown)


def test_a_producer_sees_only_its_own_jobs_among_the_links(client, enqueue, producer, other_producer, admin):
    parent = enqueue()
    theirs = enqueue(headers=admin, depends_on=[parent["id"]])
    mine = enqueue(depends_on=[parent["id"]])
    shown = client.get(f"/jobs/{parent['id']}", headers=producer).get_json()
    assert shown["dependents"] == [mine["id"]]
    assert client.get(f"/jobs/{parent['id']}", headers=admin).get_json()["dependents"] == [theirs["id"], mine["id"]]


# --- an admin's retry; purge ----------------------------------------------------------------------------


def test_an_admin_retry_of_a_failed_parent_revives_its_cancelled_subtree(client, enqueue, run, admin):
    parent = enqueue()
    child = enqueue(depends_on=[parent["id"]])
    grandchild = enqueue(depends_on=[child["id"]])
    run(parent["id"], fail=True)
    assert client.post(f"/jobs/{parent['id']}/retry", headers=admin).status_code == 200
    for job in (child, grandchild):
        assert status_of(client, admin, job["id"]) == "waiting"
        assert events_of(job["id"])[-2:] == ["dependency_failed", "dependency_retried"]
    run(parent["id"])
    assert status_of(client, admin, child["id"]) == "pending"


def test_a_retry_does_not_revive_a_child_another_failed_parent_still_dooms(client, enqueue, run, admin):
    first, second = enqueue(), enqueue()
    child = enqueue(depends_on=[first["id"], second["id"]])
    run(first["id"], fail=True)
    run(second["id"], fail=True)
    client.post(f"/jobs/{first['id']}/retry", headers=admin)
    assert status_of(client, admin, child["id"]) == "cancelled"
    assert events_of(child["id"])[-1] == "dependency_failed"


def test_a_retry_leaves_a_child_cancelled_by_hand_alone(client, enqueue, run, producer, admin):
    parent = enqueue()
    child = enqueue(depends_on=[parent["id"]])
    client.post(f"/jobs/{child['id']}/cancel", headers=producer)
    run(parent["id"], fail=True)
    client.post(f"/jobs/{parent['id']}/retry", headers=admin)
    assert status_of(client, admin, child["id"]) == "cancelled"


def test_purge_never_removes_a_job_a_live_job_depends_on(runner, enqueue, run, read_job):
    parent, other = enqueue(), enqueue()
    enqueue(depends_on=[parent["id"]], run_when="finished", run_at=(utcnow() + timedelta(days=1)).isoformat())
    run(parent["id"])
    run(other["id"])
    for job_id in (parent["id"], other["id"]):
        set_job(job_id, updated_at=utcnow() - timedelta(days=30))
    result = runner.invoke(args=["purge", "--older-than", "7d"])
    assert result.exit_code == 0, result.output
    assert read_job(parent["id"]) is not None
    assert read_job(other["id"]) is None


def test_purge_removes_a_parent_once_its_children_are_final(runner, enqueue, run, read_job):
    parent = enqueue()
    child = enqueue(depends_on=[parent["id"]])
    run(parent["id"])
    run(child["id"])
    set_job(parent["id"], updated_at=utcnow() - timedelta(days=30))
    assert runner.invoke(args=["purge", "--older-than", "7d"]).exit_code == 0
    assert read_job(parent["id"]) is None
    assert read_job(child["id"]) is not None
