"""The Schedules pages: the list (next run, last job and its status, paused or not), create and edit with
readable errors, pause / resume / run now / delete; viewers look without any action; a scheduled job's page
links to its schedule."""

from __future__ import annotations

import html
import re

import pytest

from queuelog import schedules
from tests.support.ui import flashes, post_form, text_of

pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")

FORM = {
    "name": "nightly-report",
    "cron": "0 3 * * *",
    "every_seconds": "",
    "timezone": "Europe/Berlin",
    "job_type": "report",
    "payload": '{"kind": "daily"}',
    "priority": "high",
    "max_retries": "5",
    "catch_up": "one",
}


@pytest.fixture
def nightly(app):
    return schedules.create_schedule(
        {
            "name": "nightly-report",
            "cron": "0 3 * * *",
            "timezone": "Europe/Berlin",
            "job": {"type": "report", "payload": {"kind": "daily"}},
        }
    )


def page(client, path="/admin/schedules"):
    response = client.get(path)
    assert response.status_code == 200, response.status_code
    return html.unescape(text_of(response))


def test_the_nav_links_to_the_schedules_page(signed_in):
    assert 'href="/admin/schedules"' in text_of(signed_in.get("/admin"))


def test_the_list_shows_timing_zone_next_run_last_job_with_its_status_and_state(signed_in, nightly):
    job = schedules.run_now("nightly-report", "test")
    body = page(signed_in)
    row = re.search(r'<tr data-schedule="nightly-report">.*?</tr>', body, re.S).group(0)
    assert "0 3 * * *" in row and "Europe/Berlin" in row and "report" in row
    assert nightly.next_run_at.strftime("%Y-%m-%d %H:%M:%S UTC") in row
    assert f'href="/admin/jobs/{job.id}"' in row and '<span class="badge status-pending">pending</span>' in row
    assert "active" in row
    for action in ("Pause", "Run now", "Edit"):
        assert f">{action}<" in row


def test_creating_from_the_form_makes_the_schedule(signed_in):
    response = post_form(signed_in, "/admin/schedules", FORM, page="/admin/schedules")
    assert response.status_code == 302 and response.headers["Location"].endswith("/admin/schedules/nightly-report")
    state = schedules.get_schedule("nightly-report")
    assert state.spec.timing.cron == "0 3 * * *" and state.spec.job.payload == {"kind": "daily"}
    assert state.spec.job.max_retries == 5


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"cron": "61 * * * *"}, "is not a valid cron expression: bad minute"),
        ({"cron": "", "every_seconds": ""}, "give a cron expression or an interval"),
        ({"every_seconds": "5"}, "give either a cron expression or an interval, not both"),
        ({"timezone": "Nowhere/Town"}, "unknown timezone 'Nowhere/Town'"),
        ({"timezone": "right/UTC"}, "'right/UTC' means different things on different hosts; use 'UTC'"),
        ({"payload": "{not json"}, "not valid JSON"),
        ({"payload": "[1, 2]"}, "must be a JSON object"),
        ({"name": "has space"}, "1-100 characters: letters, digits, '_', '.', ':' or '-'"),
    ],
)
def test_a_bad_field_is_shown_readably_beside_it(signed_in, change, message):
    response = post_form(signed_in, "/admin/schedules", {**FORM, **change}, page="/admin/schedules")
    assert response.status_code == 400
    body = html.unescape(text_of(response))
    assert '<span class="field-error">' in body and message in body
    assert schedules.list_schedules() == []


def test_a_name_in_use_is_shown_on_the_form(signed_in, nightly):
    response = post_form(signed_in, "/admin/schedules", FORM, page="/admin/schedules")
    assert response.status_code == 409
    assert "a schedule named 'nightly-report' already exists" in html.unescape(text_of(response))


def test_editing_changes_the_schedule_and_errors_stay_on_the_page(signed_in, nightly):
    path = "/admin/schedules/nightly-report"
    body = page(signed_in, path)
    assert 'value="0 3 * * *"' in body and "Europe/Berlin" in body
    response = post_form(
        signed_in, path, {**FORM, "cron": "", "every_seconds": "30", "priority": "critical"}, page=path
    )
    assert response.status_code == 302
    state = schedules.get_schedule("nightly-report")
    assert state.spec.timing.every_seconds == 30 and state.spec.job.priority == 30
    response = post_form(signed_in, path, {**FORM, "cron": "61 * * * *"}, page=path)
    assert response.status_code == 400 and "is not a valid cron expression" in html.unescape(text_of(response))


def test_pause_resume_run_now_and_delete(signed_in, nightly):
    response = post_form(signed_in, "/admin/schedules/nightly-report/pause", page="/admin/schedules")
    assert response.status_code == 302 and schedules.get_schedule("nightly-report").spec.paused
    assert ">Resume<" in page(signed_in)
    post_form(signed_in, "/admin/schedules/nightly-report/resume", page="/admin/schedules")
    assert not schedules.get_schedule("nightly-report").spec.paused
    response = post_form(
        signed_in, "/admin/schedules/nightly-report/run", page="/admin/schedules", follow_redirects=True
    )
    job_id = schedules.get_schedule("nightly-report").last_job_id
    assert job_id is not None and f"Job {job_id} enqueued for schedule nightly-report." in flashes(response)
    post_form(signed_in, "/admin/schedules/nightly-report/delete", page="/admin/schedules")
    assert schedules.list_schedules() == []


def test_an_unknown_schedule_is_a_404_page(signed_in):
    response = signed_in.get("/admin/schedules/nope")
    assert response.status_code == 404 and "schedule 'nope' does not exist" in html.unescape(text_of(response))


def test_a_scheduled_jobs_page_links_to_its_schedule(signed_in, nightly):
    job = schedules.run_now("nightly-report", "test")
    body = page(signed_in, f"/admin/jobs/{job.id}")
    assert 'href="/admin/schedules/nightly-report">nightly-report</a>' in body


# --- viewers ------------------------------------------------------------------------------------------


@pytest.fixture
def viewer(viewer_client):
    """The test client signed in as a viewer (tests/support/ui.py)."""
    return viewer_client


@pytest.mark.parametrize("path", ["/admin/schedules", "/admin/schedules/nightly-report"])
def test_a_viewer_sees_the_schedules_without_any_action(viewer, nightly, path):
    body = page(viewer, path)
    assert "nightly-report" in body
    assert not re.search(r'<form[^>]*method="post"[^>]*action="(?!/admin/logout")', body)
    for control in (">Pause<", ">Run now<", ">Edit<", "Create a schedule", ">Delete<"):
        assert control not in body


@pytest.mark.parametrize(
    "action",
    [
        "",
        "/nightly-report",
        "/nightly-report/pause",
        "/nightly-report/resume",
        "/nightly-report/run",
        "/nightly-report/delete",
    ],
)
def test_a_viewers_post_is_refused_with_403(viewer, nightly, action):
    response = post_form(viewer, "/admin/schedules" + action, FORM, page="/admin/schedules")
    assert response.status_code == 403
    state = schedules.get_schedule("nightly-report")
    assert not state.spec.paused and state.last_job_id is None
