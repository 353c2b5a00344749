"""The Types page: every configured type with its pause, limits and figures; pause, resume and limit it
through the same function as PATCH /types; bad limits are readable messages; who changed what."""

from __future__ import annotations

import re

import pytest

from tests.support.database import JOB_TYPES
from tests.support.ui import ADMIN_NAME, api_type, cells, field_errors, flashes, history_rows, post_form, text_of

# Each request runs in its own app context, as on a server (tests/support/ui.py).
pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")

NO_LIMITS = {"concurrency_limit": "", "rate_jobs": "", "rate_seconds": "", "key_concurrency_limit": ""}


def set_limits(client, job_type: str = "email", **fields):
    return post_form(
        client, f"/admin/types/{job_type}/limits", {**NO_LIMITS, **fields}, page=f"/admin/types/{job_type}"
    )


# --- the list ----------------------------------------------------------------------------------


def test_the_list_shows_every_configured_type_with_its_figures_and_no_limits(signed_in, make_job):
    for status in ("pending", "pending", "running", "completed"):
        make_job(type="report", status=status)
    body = text_of(signed_in.get("/admin/types"))
    assert re.findall(r'<tr data-type="([^"]+)">', body) == JOB_TYPES
    assert cells(body, "report") == {
        "state": "active",
        "pending": "2",
        "running": "1",
        "concurrency_limit": "none",
        "rate_limit": "none",
        "key_concurrency_limit": "none",
        "unique_scope": "per producer",
    }
    assert cells(body, "email")["pending"] == "0"


def test_the_list_shows_a_pause_and_the_limits_set_through_the_api(signed_in, client, admin):
    client.patch(
        "/types/email",
        headers=admin,
        json={
            "paused": True,
            "concurrency_limit": 3,
            "rate_limit": {"jobs": 20, "per_seconds": 2},
            "key_concurrency_limit": 1,
        },
    )
    row = cells(text_of(signed_in.get("/admin/types")), "email")
    assert row == {
        "state": "paused",
        "pending": "0",
        "running": "0",
        "concurrency_limit": "3",
        "rate_limit": "20 per 2 s",
        "key_concurrency_limit": "1",
        "unique_scope": "per producer",
    }


def test_the_header_links_to_the_types_page(signed_in):
    body = text_of(signed_in.get("/admin/types"))
    nav = re.search(r'<nav class="mainnav".*?</nav>', body, re.S).group(0)
    assert "Types" in re.findall(r">(\w[\w ]*)</a>", nav)
    assert '<a href="/admin/types" aria-current="page">Types</a>' in nav


# --- pause and resume --------------------------------------------------------------------------


def test_pause_on_the_list_pauses_the_type_and_no_worker_claims_its_jobs(signed_in, client, admin, worker, enqueue):
    enqueue(type="email")
    response = post_form(signed_in, "/admin/types/email/pause?from=list", page="/admin/types")
    assert response.status_code == 302 and response.headers["Location"] == "/admin/types"
    assert api_type(client, admin)["paused"] is True
    assert client.post("/jobs/claim", headers=worker, json={"types": ["email"]}).status_code == 204
    page = signed_in.get("/admin/types")
    assert cells(text_of(page), "email")["state"] == "paused"
    assert (
        "Paused email: no worker will claim its jobs until it is resumed. "
        "Enqueueing still works, and running jobs finish."
    ) in flashes(page)


def test_resume_on_the_types_own_page_lets_its_jobs_be_claimed(signed_in, client, admin, worker, enqueue):
    job = enqueue(type="report")
    post_form(signed_in, "/admin/types/report/pause", page="/admin/types/report")
    response = post_form(signed_in, "/admin/types/report/resume", page="/admin/types/report")
    assert response.status_code == 302 and response.headers["Location"] == "/admin/types/report"
    assert api_type(client, admin, "report")["paused"] is False
    claimed = client.post("/jobs/claim", headers=worker, json={"types": ["report"]})
    assert claimed.status_code == 200 and claimed.get_json()["id"] == job["id"]
    assert "Resumed report: its jobs can be claimed again." in flashes(signed_in.get("/admin/types/report"))


def test_the_list_offers_resume_for_a_paused_type_and_pause_for_the_others(signed_in):
    post_form(signed_in, "/admin/types/email/pause", page="/admin/types")
    body = text_of(signed_in.get("/admin/types"))
    assert 'action="/admin/types/email/resume?from=list"' in body
    assert 'action="/admin/types/email/pause?from=list"' not in body
    assert 'action="/admin/types/report/pause?from=list"' in body


def test_a_pause_without_a_csrf_token_changes_nothing(signed_in, client, admin):
    response = signed_in.post("/admin/types/email/pause")
    assert response.status_code == 400
    assert "security token is missing or has expired" in text_of(response)
    assert api_type(client, admin)["paused"] is False


# --- limits ------------------------------------------------------------------------------------


def test_the_limits_form_sets_all_three_limits_as_the_api_shows_them(signed_in, client, admin):
    response = set_limits(signed_in, concurrency_limit="3", rate_jobs="20", rate_seconds="2", key_concurrency_limit="1")
    assert response.status_code == 302 and response.headers["Location"] == "/admin/types/email"
    assert api_type(client, admin) == {
        "type": "email",
        "paused": False,
        "concurrency_limit": 3,
        "rate_limit": {"jobs": 20, "per_seconds": 2},
        "key_concurrency_limit": 1,
        "unique_scope": "producer",
        "push": None,
        "pending": 0,
        "running": 0,
    }
    page = signed_in.get("/admin/types/email")
    assert "Limits of email saved: concurrency limit 3, rate limit 20 per 2 s, key concurrency limit 1." in flashes(
        page
    )


def test_the_types_page_shows_its_limits_in_the_form_ready_to_change(signed_in):
    set_limits(signed_in, concurrency_limit="3", rate_jobs="20", rate_seconds="2")
    body = text_of(signed_in.get("/admin/types/email"))
    for name, value in (
        ("concurrency_limit", "3"),
        ("rate_jobs", "20"),
        ("rate_seconds", "2"),
        ("key_concurrency_limit", ""),
    ):
        assert re.search(rf'name="{name}"[^>]*value="{value}"', body), name


def test_emptying_a_field_removes_that_limit_and_keeps_the_others(signed_in, client, admin):
    set_limits(signed_in, concurrency_limit="3", rate_jobs="20", rate_seconds="2")
    set_limits(signed_in, rate_jobs="20", rate_seconds="2")
    shown = api_type(client, admin)
    assert shown["concurrency_limit"] is None and shown["rate_limit"] == {"jobs": 20, "per_seconds": 2}


def test_remove_every_limit_clears_all_three_and_leaves_a_pause(signed_in, client, admin):
    client.patch(
        "/types/email", headers=admin, json={"paused": True, "concurrency_limit": 3, "key_concurrency_limit": 2}
    )
    response = post_form(signed_in, "/admin/types/email/clear", page="/admin/types/email")
    assert response.status_code == 302
    assert api_type(client, admin) == {
        "type": "email",
        "paused": True,
        "concurrency_limit": None,
        "rate_limit": None,
        "key_concurrency_limit": None,
        "unique_scope": "producer",
        "push": None,
        "pending": 0,
        "running": 0,
    }
    assert "Removed every limit of email." in flashes(signed_in.get("/admin/types/email"))


@pytest.mark.parametrize(
    "fields, field, message",
    [
        (
            {"concurrency_limit": "0"},
            "concurrency_limit",
            "must be a whole number of jobs from 1 to 1,000,000, or empty for no limit, not '0'",
        ),
        (
            {"concurrency_limit": "three"},
            "concurrency_limit",
            "must be a whole number of jobs from 1 to 1,000,000, or empty for no limit, not 'three'",
        ),
        (
            {"key_concurrency_limit": "-1"},
            "key_concurrency_limit",
            "must be a whole number of jobs from 1 to 1,000,000, or empty for no limit, not '-1'",
        ),
        (
            {"key_concurrency_limit": "2.5"},
            "key_concurrency_limit",
            "must be a whole number of jobs from 1 to 1,000,000, or empty for no limit, not '2.5'",
        ),
        (
            {"rate_jobs": "0", "rate_seconds": "2"},
            "rate_jobs",
            "N must be a whole number of claims from 1 to 1,000,000, not '0'",
        ),
        (
            {"rate_jobs": "20", "rate_seconds": "0"},
            "rate_seconds",
            "S (seconds) must be a whole number from 1 to 86,400, not '0'",
        ),
        (
            {"rate_jobs": "20", "rate_seconds": "86401"},
            "rate_seconds",
            "S (seconds) must be a whole number from 1 to 86,400, not '86401'",
        ),
        ({"rate_jobs": "20"}, "rate_seconds", "give S too, or empty N for no rate limit"),
        ({"rate_seconds": "2"}, "rate_jobs", "give N too, or empty S for no rate limit"),
        ({"concurrency_limit": "1" * 31}, "concurrency_limit", "Field cannot be longer than 30 characters."),
    ],
)
def test_a_bad_limit_is_a_readable_400_on_its_field_and_changes_nothing(
    signed_in, client, admin, fields, field, message
):
    response = set_limits(signed_in, **fields)
    assert response.status_code == 400
    body = text_of(response)
    label = re.search(rf'<label>(?:(?!</label>).)*name="{field}"(?:(?!</label>).)*</label>', body, re.S).group(0)
    assert message in field_errors(label)
    assert 'aria-invalid="true"' in label
    assert api_type(client, admin) == {
        "type": "email",
        "paused": False,
        "concurrency_limit": None,
        "rate_limit": None,
        "key_concurrency_limit": None,
        "unique_scope": "producer",
        "push": None,
        "pending": 0,
        "running": 0,
    }
    assert history_rows(body) == []


def test_a_refused_form_keeps_what_was_typed(signed_in):
    body = text_of(set_limits(signed_in, concurrency_limit="3", rate_jobs="20", rate_seconds="0"))
    assert re.search(r'name="concurrency_limit"[^>]*value="3"', body)
    assert re.search(r'name="rate_jobs"[^>]*value="20"', body)


def test_the_largest_window_is_accepted(signed_in, client, admin):
    assert set_limits(signed_in, rate_jobs="1", rate_seconds="86400").status_code == 302
    assert api_type(client, admin)["rate_limit"] == {"jobs": 1, "per_seconds": 86400}


# --- who changed what --------------------------------------------------------------------------


def test_the_history_shows_who_changed_what_from_the_page_and_the_api_newest_first(signed_in, client, admin):
    set_limits(signed_in, concurrency_limit="3")
    client.patch(
        "/types/email", headers=admin, json={"concurrency_limit": 5, "rate_limit": {"jobs": 20, "per_seconds": 2}}
    )
    post_form(signed_in, "/admin/types/email/pause", page="/admin/types/email")
    rows = history_rows(text_of(signed_in.get("/admin/types/email")))
    api_history = client.get("/types/email/history", headers=admin).get_json()["history"]
    assert [entry["actor"] for entry in api_history] == [f"admin:{ADMIN_NAME}", "key:admin-a", f"admin:{ADMIN_NAME}"]
    assert len(rows) == 3
    assert rows[0].endswith(f"admin:{ADMIN_NAME} state: active → paused")
    assert rows[1].endswith("key:admin-a concurrency limit: 3 → 5 rate limit: none → 20 per 2 s")
    assert rows[2].endswith(f"admin:{ADMIN_NAME} concurrency limit: none → 3")
    assert rows[0].startswith(api_history[0]["at"][:10])


def test_a_type_without_changes_says_so(signed_in):
    assert "No change yet" in text_of(signed_in.get("/admin/types/report"))


def test_saving_the_same_limits_again_writes_no_history(signed_in):
    set_limits(signed_in, concurrency_limit="3")
    set_limits(signed_in, concurrency_limit="3")
    assert len(history_rows(text_of(signed_in.get("/admin/types/email")))) == 1


# --- types that do not exist -------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/admin/types/parcel",
        "/admin/types/parcel/pause",
        "/admin/types/parcel/resume",
        "/admin/types/parcel/limits",
        "/admin/types/parcel/clear",
    ],
)
def test_a_type_not_configured_is_a_404_page(signed_in, path):
    if path.endswith("parcel"):
        response = signed_in.get(path)
    else:
        response = post_form(signed_in, path, NO_LIMITS, page="/admin/types")
    assert response.status_code == 404
    assert "job type &#39;parcel&#39; is not on this server&#39;s QUEUELOG_JOB_TYPES" in text_of(response)


# --- the dashboard and the job page ------------------------------------------------------------


def by_type_row(body: str, job_type: str) -> str | None:
    match = re.search(rf'<tr>\s*<th scope="row"><a href="/admin/jobs\?type={re.escape(job_type)}">.*?</tr>', body, re.S)
    return match.group(0) if match else None


def test_the_dashboard_marks_a_paused_type_in_words_and_links_to_its_page(signed_in, client, admin, make_job):
    make_job(type="email")
    make_job(type="report")
    client.patch("/types/email", headers=admin, json={"paused": True})
    for page in ("/admin", "/admin?partial=1"):
        body = text_of(signed_in.get(page))
        assert '<a class="badge type-paused" href="/admin/types/email"' in by_type_row(body, "email")
        assert ">paused</a>" in by_type_row(body, "email")
        assert "paused" not in by_type_row(body, "report")


def test_the_dashboard_lists_a_paused_type_that_has_no_jobs(signed_in, client, admin, make_job):
    make_job(type="email")
    client.patch("/types/noop", headers=admin, json={"paused": True})
    row = by_type_row(text_of(signed_in.get("/admin")), "noop")
    assert row is not None and ">paused</a>" in row


def test_a_resumed_type_is_no_longer_marked(signed_in, client, admin, make_job):
    make_job(type="email")
    client.patch("/types/email", headers=admin, json={"paused": True})
    client.patch("/types/email", headers=admin, json={"paused": False})
    assert "type-paused" not in text_of(signed_in.get("/admin"))


def test_the_job_page_shows_the_jobs_concurrency_key_linking_to_its_jobs(signed_in, enqueue):
    job = enqueue(type="email", concurrency_key="tenant-42")
    body = text_of(signed_in.get(f"/admin/jobs/{job['id']}"))
    assert (
        '<dt>concurrency key</dt><dd class="mono" data-field="concurrency_key">'
        '<a href="/admin/jobs?key=tenant-42" title="Every job with this concurrency key">tenant-42</a></dd>'
    ) in body


def test_a_job_without_a_concurrency_key_shows_no_such_field(signed_in, enqueue):
    job = enqueue(type="email")
    assert "concurrency key" not in text_of(signed_in.get(f"/admin/jobs/{job['id']}"))
