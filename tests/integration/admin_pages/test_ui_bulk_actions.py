"""Bulk cancel and delete (and retry) on the jobs page: a confirmation page naming the count first, only the
jobs the state machine lets the action take, and a report of what changed and what was left alone and why."""

from __future__ import annotations

import logging
import re

import pytest
from sqlalchemy import insert

from queuelog.extensions import db
from queuelog.models import JobDependency
from tests.support.ui import ADMIN_NAME, csrf_token, events_of, flashes, post_form, text_of

# Each request runs in its own app context, as on a server (tests/support/ui.py).
pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")


def ask(client, **form):
    """Send the jobs page's bulk form without confirming: the answer is the confirmation page."""
    return post_form(client, "/admin/jobs/bulk", form, page="/admin/jobs")


def confirm(client, **form):
    """Send it confirmed, and return the flash messages of the page it leads back to."""
    response = post_form(client, "/admin/jobs/bulk", {**form, "confirmed": "yes"}, page="/admin/jobs")
    assert response.status_code == 302, text_of(response)[:1000]
    return flashes(client.get(response.headers["Location"]))


def question(response) -> str:
    assert response.status_code == 200, text_of(response)[:1000]
    return re.search(r'<h1 id="confirm-title">(.*?)</h1>', text_of(response)).group(1)


@pytest.fixture
def jobs(make_job):
    """Two jobs in each status, by status."""
    return {
        status: [make_job(status=status), make_job(status=status)]
        for status in ("pending", "running", "completed", "failed", "cancelled")
    }


def every(jobs) -> list[int]:
    return sorted(job_id for ids in jobs.values() for job_id in ids)


# --- asking first ------------------------------------------------------------------------------------


def test_cancel_selected_asks_first_naming_the_count_and_changes_nothing(signed_in, jobs, read_job):
    response = ask(signed_in, do="cancel-selected", job_id=every(jobs))
    assert question(response) == "Cancel 2 jobs?"
    body = text_of(response)
    assert (
        "Left alone: 2 cancelled, 2 completed, 2 failed, 2 running (only waiting or pending jobs can be cancelled)."
    ) in body
    assert ">Cancel 2 jobs</button>" in body and 'name="confirmed" value="yes"' in body
    assert all(read_job(job_id).status == "pending" for job_id in jobs["pending"])


def test_delete_all_matching_asks_naming_the_count_of_the_filter(signed_in, jobs):
    response = ask(signed_in, do="delete-matching", status="failed")
    assert question(response) == "Delete 2 jobs?"
    body = text_of(response)
    assert "Filter: status = failed." in body
    assert "This cannot be undone." in body
    assert re.search(r'name="up_to" value="\d+"', body)


def test_the_confirmation_carries_the_ticks_and_filters_it_was_asked_with(signed_in, jobs):
    body = text_of(ask(signed_in, do="cancel-selected", job_id=jobs["pending"], type="email"))
    for job_id in jobs["pending"]:
        assert f'name="job_id" value="{job_id}"' in body
    assert 'name="type" value="email"' in body and 'name="do" value="cancel-selected"' in body


def test_nothing_to_act_on_says_so_and_offers_only_the_way_back(signed_in, jobs):
    response = ask(signed_in, do="delete-selected", job_id=jobs["running"])
    assert question(response) == "Nothing to delete"
    body = text_of(response)
    assert "None of the ticked jobs can be deleted: 2 running (only completed, failed or cancelled jobs" in body
    assert 'name="confirmed"' not in body


# --- acting, once confirmed ----------------------------------------------------------------------------


def test_cancel_selected_cancels_the_pending_ones_and_reports_the_rest(signed_in, jobs, read_job):
    messages = confirm(signed_in, do="cancel-selected", job_id=every(jobs))
    assert messages == [
        "Cancelled 2 jobs. Left alone 8: 2 cancelled, 2 completed, 2 failed, 2 running "
        "(only waiting or pending jobs can be cancelled)."
    ]
    assert [read_job(j).status for j in jobs["pending"]] == ["cancelled", "cancelled"]
    assert [read_job(j).status for j in jobs["running"]] == ["running", "running"]
    assert events_of(jobs["pending"][0])[-1].actor == f"admin:{ADMIN_NAME}"
    assert events_of(jobs["pending"][0])[-1].event == "cancelled"


def test_delete_selected_removes_only_finished_jobs_never_a_running_one(signed_in, jobs, read_job):
    messages = confirm(signed_in, do="delete-selected", job_id=every(jobs))
    assert messages == [
        "Deleted 6 jobs. Left alone 4: 2 pending, 2 running (only completed, failed or cancelled jobs can be deleted)."
    ]
    for status in ("completed", "failed", "cancelled"):
        assert all(read_job(j) is None and events_of(j) == [] for j in jobs[status])
    assert all(read_job(j).status == "running" for j in jobs["running"])
    assert all(read_job(j).status == "pending" for j in jobs["pending"])


def test_delete_never_removes_a_finished_job_that_a_waiting_job_still_depends_on(signed_in, make_job, read_job):
    parent, other_parent = make_job(status="completed", has_dependents=True), make_job(status="running")
    child = make_job(status="waiting", run_when="completed")
    with db.engine.begin() as conn:
        conn.execute(
            insert(JobDependency.__table__),
            [{"child_id": child, "parent_id": parent}, {"child_id": child, "parent_id": other_parent}],
        )
    confirm(signed_in, do="delete-selected", job_id=[parent])
    assert read_job(parent).status == "completed"
    assert read_job(child).status == "waiting"


def test_the_server_log_records_who_deleted_each_job(signed_in, jobs, caplog):
    # The job's own history goes with it, so the log line is where the admin's name stays.
    caplog.set_level(logging.INFO, logger="queuelog")
    confirm(signed_in, do="delete-selected", job_id=jobs["failed"])
    deleted = [
        r.queuelog_fields
        for r in caplog.records
        if getattr(r, "queuelog_fields", None) and r.getMessage().startswith("job_deleted")
    ]
    assert sorted((f["job_id"], f["status"], f["actor"]) for f in deleted) == [
        (job_id, "failed", f"admin:{ADMIN_NAME}") for job_id in jobs["failed"]
    ]


def test_cancel_all_matching_takes_the_pending_jobs_of_the_filter_only(signed_in, make_job, read_job):
    email = [make_job(type="email") for _ in range(3)]
    report = make_job(type="report")
    held = make_job(type="email", status="running")
    messages = confirm(signed_in, do="cancel-matching", type="email", up_to=10**6)
    assert messages == [
        "Cancelled 3 matching jobs. Left alone: 1 running (only waiting or pending jobs can be cancelled)."
    ]
    assert [read_job(j).status for j in email] == ["cancelled"] * 3
    assert (read_job(report).status, read_job(held).status) == ("pending", "running")


def test_all_matching_leaves_jobs_that_arrived_after_the_question(signed_in, make_job, read_job):
    asked = make_job(status="completed")
    body = text_of(ask(signed_in, do="delete-matching", status="completed"))
    up_to = int(re.search(r'name="up_to" value="(\d+)"', body).group(1))
    later = make_job(status="completed")
    assert confirm(signed_in, do="delete-matching", status="completed", up_to=up_to) == ["Deleted 1 matching job."]
    assert read_job(asked) is None and read_job(later).status == "completed"


def test_delete_all_matching_with_a_status_it_cannot_take_deletes_nothing(signed_in, jobs, read_job):
    response = ask(signed_in, do="delete-matching", status="running")
    assert question(response) == "Nothing to delete"
    assert confirm(signed_in, do="delete-matching", status="running", up_to=10**6) == [
        "Deleted 0 matching jobs. Left alone: 2 running (only completed, failed or cancelled jobs can be deleted)."
    ]
    assert all(read_job(j).status == "running" for j in jobs["running"])


def test_retry_through_the_bulk_form_asks_and_retries(signed_in, jobs, read_job):
    assert question(ask(signed_in, do="retry-matching")) == "Retry 2 jobs?"  # failed ones, as retry-all always did
    assert confirm(signed_in, do="retry-matching", up_to=10**6) == [
        "Retried 2 matching jobs. Left alone: 2 cancelled, 2 completed, 2 pending, 2 running "
        "(only failed or cancelled jobs can be retried)."
    ]
    assert [read_job(j).status for j in jobs["failed"]] == ["pending", "pending"]


def test_a_job_that_moved_on_between_question_and_answer_is_reported(signed_in, make_job, read_job, claim):
    waiting = make_job()
    body = text_of(ask(signed_in, do="cancel-selected", job_id=[waiting]))
    assert "Cancel 1 job?" in body
    claim()  # a worker takes it before the admin confirms
    assert confirm(signed_in, do="cancel-selected", job_id=[waiting]) == [
        "Cancelled 0 jobs. Left alone 1: 1 running (only waiting or pending jobs can be cancelled)."
    ]
    assert read_job(waiting).status == "running"


def test_a_deleted_job_is_reported_as_gone(signed_in, make_job):
    gone = make_job(status="completed")
    confirm(signed_in, do="delete-selected", job_id=[gone])
    assert confirm(signed_in, do="delete-selected", job_id=[gone]) == [
        "Deleted 0 jobs. Left alone 1: 1 no longer exists."
    ]


# --- refusals ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "form",
    [
        {"do": "explode-selected", "job_id": [1]},
        {"do": "cancel-selected", "job_id": ["x"]},
        {"do": "cancel-selected", "job_id": [2**63]},
        {"do": "delete-matching", "up_to": "-1"},
        {"do": "delete-matching", "path": "a..b", "value": "1"},
    ],
)
def test_a_malformed_bulk_request_changes_nothing_and_says_so(signed_in, jobs, read_job, form):
    before = {job_id: read_job(job_id) for job_id in every(jobs)}
    response = post_form(signed_in, "/admin/jobs/bulk", {**form, "confirmed": "yes"}, page="/admin/jobs")
    assert response.status_code == 302
    assert flashes(signed_in.get("/admin/jobs")) == ["That request was not understood; nothing was changed."]
    assert {job_id: read_job(job_id) for job_id in every(jobs)} == before


def test_nothing_ticked_explains(signed_in):
    post_form(signed_in, "/admin/jobs/bulk", {"do": "cancel-selected", "confirmed": "yes"}, page="/admin/jobs")
    assert flashes(signed_in.get("/admin/jobs")) == ["Tick the jobs to cancel first."]


def test_a_bulk_action_without_a_csrf_token_changes_nothing(signed_in, jobs, read_job):
    response = signed_in.post("/admin/jobs/bulk", data={"do": "delete-matching", "confirmed": "yes", "up_to": 10**6})
    assert response.status_code == 400
    assert read_job(jobs["completed"][0]).status == "completed"


def test_a_viewer_is_refused_bulk_actions_with_403(viewer_client, jobs, read_job):
    token = csrf_token(viewer_client, "/admin")
    for do in ("cancel-matching", "delete-matching", "retry-matching"):
        response = viewer_client.post(
            "/admin/jobs/bulk", data={"do": do, "confirmed": "yes", "up_to": 10**6, "csrf_token": token}
        )
        assert response.status_code == 403
        response = viewer_client.post("/admin/jobs/bulk", data={"do": do, "csrf_token": token})
        assert response.status_code == 403  # not even the question
    assert read_job(jobs["completed"][0]).status == "completed"
    assert read_job(jobs["pending"][0]).status == "pending"


# --- the jobs page's buttons ---------------------------------------------------------------------------------


def test_the_jobs_page_offers_cancel_and_delete_for_ticked_and_matching_jobs(signed_in, jobs):
    body = text_of(signed_in.get("/admin/jobs"))
    for do in ("cancel-selected", "delete-selected", "cancel-matching", "delete-matching"):
        assert re.search(rf'formaction="/admin/jobs/bulk" name="do" value="{do}"', body), do


def test_the_matching_buttons_follow_the_status_filter(signed_in, jobs):
    running = text_of(signed_in.get("/admin/jobs?status=running"))
    assert 'value="cancel-matching"' not in running and 'value="delete-matching"' not in running
    completed = text_of(signed_in.get("/admin/jobs?status=completed"))
    assert 'value="cancel-matching"' not in completed and 'value="delete-matching"' in completed
    pending = text_of(signed_in.get("/admin/jobs?status=pending"))
    assert 'value="cancel-matching"' in pending and 'value="delete-matching"' not in pending
