"""The Top errors page: failed jobs grouped by their error's cause, the masking rules, the stored group
written by every way of failing, and each group's links and actions."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from urllib.parse import urlencode

import pytest
from sqlalchemy import select

from queuelog.core.clock import utcnow
from queuelog.core.error_groups import ERROR_GROUP_CHARS, error_group
from queuelog.extensions import db
from queuelog.models import Job
from tests.support.ui import ADMIN_NAME, events_of, flashes, post_form, shows_age, text_of

# Each request runs in its own app context, as on a server (tests/support/ui.py).
pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")


# --- the masking rules -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "group"),
    [
        ("Timeout after 30s talking to 10.0.0.7", "Timeout after <n>s talking to <ip>"),
        ("Timeout after 12s talking to 10.0.0.9:5432", "Timeout after <n>s talking to <ip>"),
        ("KeyError: 'customer_42'", "KeyError: <str>"),
        ('ValueError: bad value "abc" in field `name`', "ValueError: bad value <str> in field <str>"),
        ("job 123e4567-e89b-12d3-a456-426614174000 not found", "job <uuid> not found"),
        ("segfault at 0x7fff12ab in worker", "segfault at <hex> in worker"),
        ("commit deadbeef01 is missing", "commit <hex> is missing"),
        ("mail to bob@example.com bounced", "mail to <email> bounced"),
        (
            "SMTPRecipientsRefused: 550 5.1.1 <bob@example.com>: rejected",
            "SMTPRecipientsRefused: <n> <n> <email>: rejected",
        ),
        ("balance -2.50 below zero", "balance <n> below zero"),
        ("utf8 codec over HTTP2 failed", "utf8 codec over HTTP2 failed"),  # digits glued to a word stay
        ("Error10 in step abc123", "Error10 in step abc123"),
        ("deadline   exceeded\tnow", "deadline exceeded now"),
        ("first line 1\nsecond line 2", "first line <n>"),
        ("\n\n  card declined 402  \n", "card declined <n>"),
        (
            'Traceback (most recent call last):\n  File "w.py", line 3\nZeroDivisionError: division by zero',
            "ZeroDivisionError: division by zero",
        ),
        ("", "(no error message)"),
        (None, "(no error message)"),
    ],
)
def test_an_errors_group_masks_what_changes_from_job_to_job(error, group):
    assert error_group(error) == group


def test_a_long_error_group_is_cut_to_the_column(app):
    assert len(error_group("x" * 1000)) == ERROR_GROUP_CHARS


# --- the stored group, written by every way of failing ---------------------------------------------------


def stored_group(job_id: int) -> str | None:
    with db.engine.connect() as conn:
        return conn.execute(select(Job.error_group).where(Job.id == job_id)).scalar_one()


def test_failing_a_job_stores_its_group(failed_job):
    job_id = failed_job(error="Timeout after 30s talking to 10.0.0.7")
    assert stored_group(job_id) == "Timeout after <n>s talking to <ip>"


def test_a_failed_attempt_with_retries_left_stores_its_group_too(client, worker, enqueue, claim):
    job = enqueue(max_retries=3)
    claimed = claim()
    response = client.post(
        f"/jobs/{job['id']}/fail",
        headers=worker,
        json={"claim_token": claimed["claim_token"], "error": "HTTP 503 from 10.1.2.3"},
    )
    assert response.get_json()["status"] == "pending"
    assert stored_group(job["id"]) == "HTTP <n> from <ip>"


def test_a_reaped_job_stores_the_reapers_reason_as_its_group(app, make_job):
    from queuelog import queue

    job_id = make_job(status="running", max_retries=0, lease_expires_at=utcnow() - timedelta(minutes=5))
    queue.reap()
    assert stored_group(job_id) == "worker worker-a stopped heartbeating and no retries are left"


# --- the page --------------------------------------------------------------------------------------------


def groups_shown(response) -> list[tuple[str, int]]:
    """(group, failed count) per row, in the order shown."""
    assert response.status_code == 200, text_of(response)[:1000]
    rows = re.findall(
        r'<tr data-group="([^"]*)">.*?<td class="num n-failed"><a [^>]*>([\d,]+)</a>', text_of(response), re.S
    )
    return [(html.unescape(group), int(count.replace(",", ""))) for group, count in rows]


def test_the_page_groups_failed_jobs_by_cause_largest_first(signed_in, failed_job):
    for seconds, host in ((30, "10.0.0.7"), (12, "10.0.0.9"), (5, "10.0.0.1")):
        failed_job(error=f"Timeout after {seconds}s talking to {host}")
    failed_job(error="KeyError: 'customer_42'", type="report")
    failed_job(error="KeyError: 'customer_43'", type="email")
    failed_job(error="card declined")
    assert groups_shown(signed_in.get("/admin/errors")) == [
        ("Timeout after <n>s talking to <ip>", 3),
        ("KeyError: <str>", 2),
        ("card declined", 1),
    ]


def test_each_group_says_which_types_and_when_first_and_last_seen(signed_in, make_job):
    now = utcnow()
    for job_type, minutes in (("report", 90), ("email", 5), ("report", 30)):
        make_job(
            status="failed",
            type=job_type,
            error="boom",
            error_group="boom",
            updated_at=now - timedelta(minutes=minutes),
        )
    body = text_of(signed_in.get("/admin/errors"))
    row = re.search(r'<tr data-group="boom">(.*?)</tr>', body, re.S).group(1)
    assert "<td>email, report</td>" in row
    first_seen, last_seen = re.findall(r">(\d+[hm] \d+[ms]) ago<", row)
    assert shows_age(first_seen, timedelta(minutes=90), since=now)
    assert shows_age(last_seen, timedelta(minutes=5), since=now)


def test_only_failed_jobs_are_counted(signed_in, make_job):
    make_job(status="failed", error="boom", error_group="boom")
    make_job(status="pending", error="boom", error_group="boom")  # waiting for another try
    make_job(status="completed", error="boom", error_group="boom")  # failed once, then succeeded
    assert groups_shown(signed_in.get("/admin/errors")) == [("boom", 1)]


def test_the_count_links_to_the_jobs_of_the_group(signed_in, failed_job):
    wanted = failed_job(error="Timeout after 30s talking to 10.0.0.7")
    failed_job(error="card declined")
    body = text_of(signed_in.get("/admin/errors"))
    link = html.unescape(re.search(r'<td class="num n-failed"><a href="([^"]+)"', body).group(1))
    assert link == "/admin/jobs?" + urlencode({"status": "failed", "group": "Timeout after <n>s talking to <ip>"})
    listed = text_of(signed_in.get(link))
    assert re.findall(r'<a class="job-link" href="/admin/jobs/(\d+)">', listed) == [str(wanted)]
    assert 'Error group: <span class="mono">Timeout after &lt;n&gt;s talking to &lt;ip&gt;</span>' in listed


def test_no_failed_jobs_says_so(signed_in, make_job):
    make_job()
    assert "No failed jobs." in text_of(signed_in.get("/admin/errors"))


def test_the_page_refreshes_in_place(signed_in, failed_job):
    failed_job(error="boom")
    response = signed_in.get("/admin/errors?partial=1")
    assert response.headers["X-Queuelog-Partial"] == "1" and "<html" not in text_of(response)
    assert groups_shown(response) == [("boom", 1)]


def test_the_nav_links_to_the_page(signed_in):
    assert '<a href="/admin/errors">Top errors</a>' in text_of(signed_in.get("/admin"))
    assert '<a href="/admin/errors" aria-current="page">Top errors</a>' in text_of(signed_in.get("/admin/errors"))


# --- retry all, cancel all in a group ----------------------------------------------------------------


def test_retry_all_in_a_group_asks_naming_the_count_then_retries_only_that_group(signed_in, failed_job, read_job):
    group = [failed_job(error=f"Timeout after {n}s talking to 10.0.0.{n}") for n in (1, 2)]
    other = failed_job(error="card declined")
    form = {"do": "retry-matching", "status": "failed", "group": "Timeout after <n>s talking to <ip>"}
    asked = post_form(signed_in, "/admin/jobs/bulk", form, page="/admin/errors")
    assert '<h1 id="confirm-title">Retry 2 jobs?</h1>' in text_of(asked)
    assert read_job(group[0]).status == "failed"
    up_to = re.search(r'name="up_to" value="(\d+)"', text_of(asked)).group(1)
    post_form(signed_in, "/admin/jobs/bulk", {**form, "confirmed": "yes", "up_to": up_to}, page="/admin/errors")
    assert [read_job(j).status for j in group] == ["pending", "pending"]
    assert read_job(other).status == "failed"
    assert events_of(group[0])[-1].actor == f"admin:{ADMIN_NAME}"
    assert groups_shown(signed_in.get("/admin/errors")) == [("card declined", 1)]


def test_cancel_all_in_a_group_stops_its_jobs_waiting_for_another_try(signed_in, make_job, read_job):
    make_job(status="failed", error="HTTP 503", error_group="HTTP <n>")
    waiting = [make_job(status="pending", error="HTTP 502", error_group="HTTP <n>") for _ in range(2)]
    unrelated = make_job(status="pending")
    body = text_of(signed_in.get("/admin/errors"))
    assert 'value="cancel-matching"' in body and "Stop the 2 pending jobs" in body
    form = {"do": "cancel-matching", "status": "pending", "group": "HTTP <n>"}
    asked = post_form(signed_in, "/admin/jobs/bulk", form, page="/admin/errors")
    assert '<h1 id="confirm-title">Cancel 2 jobs?</h1>' in text_of(asked)
    response = post_form(
        signed_in, "/admin/jobs/bulk", {**form, "confirmed": "yes", "up_to": 10**6}, page="/admin/errors"
    )
    assert flashes(signed_in.get(response.headers["Location"])) == ["Cancelled 2 matching jobs."]
    assert [read_job(j).status for j in waiting] == ["cancelled", "cancelled"]
    assert read_job(unrelated).status == "pending"


def test_a_group_with_nothing_waiting_offers_no_cancel(signed_in, failed_job):
    failed_job(error="boom")
    body = text_of(signed_in.get("/admin/errors"))
    assert 'value="cancel-matching"' not in body and "none waiting to retry" in body


def test_a_viewer_sees_the_groups_but_no_action(viewer_client, failed_job):
    failed_job(error="boom")
    response = viewer_client.get("/admin/errors")
    assert groups_shown(response) == [("boom", 1)]
    assert 'method="post" action="/admin/jobs/bulk"' not in text_of(response)
    assert "Retry all in this group" not in text_of(response)
