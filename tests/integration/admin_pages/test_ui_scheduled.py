"""The Scheduled page (pending jobs not due yet, with "Run now"), the dashboard's due/scheduled split, and a
timed-out job's page."""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest

from queuelog import queue
from queuelog.core.clock import rfc3339, utcnow
from tests.support.ui import ADMIN_NAME, csrf_token, events_of, flashes, text_of

# Each request runs in its own app context, as on a server (tests/support/ui.py).
pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")

RUN_NOW = re.compile(r'action="/admin/jobs/(\d+)/run-now"')


@pytest.fixture
def waiting(make_job):
    """A due job, one scheduled an hour ahead, one waiting out a backoff after its first failed run."""
    now = utcnow()
    return {
        "due": make_job(run_at=now - timedelta(seconds=1)),
        "later": make_job(type="report", run_at=now + timedelta(hours=1)),
        "backoff": make_job(run_at=now + timedelta(minutes=2), retry_count=1, max_retries=3),
    }


def _row(body: str, job_id: int) -> str:
    match = re.search(rf'<tr data-job="{job_id}">(.*?)</tr>', body, re.S)
    assert match, f"job {job_id} is not listed"
    return match.group(1)


def test_the_scheduled_page_lists_pending_jobs_not_due_yet_soonest_first(signed_in, waiting):
    body = text_of(signed_in.get("/admin/scheduled"))

    listed = [int(n) for n in re.findall(r'<tr data-job="(\d+)">', body)]
    assert listed == [waiting["backoff"], waiting["later"]]
    assert "scheduled" in _row(body, waiting["later"])
    assert "backing off after failed run 1 of 4" in _row(body, waiting["backoff"])
    assert "2 pending jobs not due yet" in body


def test_each_scheduled_job_shows_its_due_time(signed_in, waiting, read_job):
    body = text_of(signed_in.get("/admin/scheduled"))

    due = read_job(waiting["later"]).run_at
    row = _row(body, waiting["later"])
    assert f'datetime="{rfc3339(due)}"' in row
    assert f"{due:%Y-%m-%d %H:%M:%S} UTC" in row


def test_run_now_makes_the_job_due_and_logs_the_admin(signed_in, waiting, read_job):
    token = csrf_token(signed_in, "/admin/scheduled")
    assert set(map(int, RUN_NOW.findall(text_of(signed_in.get("/admin/scheduled"))))) == {
        waiting["later"],
        waiting["backoff"],
    }

    response = signed_in.post(
        f"/admin/jobs/{waiting['later']}/run-now", data={"csrf_token": token}, follow_redirects=True
    )

    assert response.status_code == 200
    assert f"Job {waiting['later']} is due now" in " ".join(flashes(response))
    row = read_job(waiting["later"])
    assert row.status == "pending" and row.run_at <= utcnow()
    last = events_of(waiting["later"])[-1]
    assert (last.event, last.actor, last.from_status, last.to_status) == (
        "rescheduled",
        f"admin:{ADMIN_NAME}",
        "pending",
        "pending",
    )
    assert f'data-job="{waiting["later"]}"' not in text_of(response)


def test_run_now_on_a_job_no_longer_pending_says_why(signed_in, make_job, read_job):
    done = make_job(status="completed")
    token = csrf_token(signed_in, "/admin/scheduled")

    response = signed_in.post(f"/admin/jobs/{done}/run-now", data={"csrf_token": token}, follow_redirects=True)

    assert any("it is completed, not pending" in message for message in flashes(response))
    assert read_job(done).status == "completed"


def test_a_scheduled_jobs_own_page_offers_run_now(signed_in, waiting):
    later_page = text_of(signed_in.get(f"/admin/jobs/{waiting['later']}"))
    assert f'action="/admin/jobs/{waiting["later"]}/run-now"' in later_page
    assert "run-now" not in text_of(signed_in.get(f"/admin/jobs/{waiting['due']}"))


def test_the_dashboards_pending_tile_splits_due_from_scheduled(signed_in, waiting):
    body = text_of(signed_in.get("/admin"))

    assert re.search(r'data-figure="pending-due">1 due<', body)
    assert re.search(r'data-figure="pending-scheduled">2 scheduled<', body)


def test_the_scheduled_page_is_in_the_navigation(signed_in):
    assert 'href="/admin/scheduled"' in text_of(signed_in.get("/admin"))


def test_with_nothing_scheduled_the_page_says_so(signed_in):
    assert "every pending job is due now" in text_of(signed_in.get("/admin/scheduled"))


def test_a_job_whose_last_run_timed_out_says_so_on_its_page(signed_in, enqueue, claim, read_job):
    job = enqueue(timeout_seconds=1, max_retries=0)
    claim()
    time.sleep(1.1)
    queue.reap()
    assert read_job(job["id"]).status == "failed"

    body = text_of(signed_in.get(f"/admin/jobs/{job['id']}"))

    assert 'data-reason="timed-out"' in body
    assert "timed out" in body and "1 s after its claim" in body


def test_a_viewer_sees_the_scheduled_jobs_without_run_now_and_is_refused_403(viewer_client, waiting, read_job):
    client = viewer_client
    before = read_job(waiting["later"])

    body = text_of(client.get("/admin/scheduled"))
    refused = client.post(f"/admin/jobs/{waiting['later']}/run-now", data={"csrf_token": csrf_token(client, "/admin")})

    assert f'data-job="{waiting["later"]}"' in body and not RUN_NOW.search(body)
    assert refused.status_code == 403
    assert read_job(waiting["later"]) == before


def test_a_job_the_worker_gave_up_on_at_its_timeout_says_timed_out(signed_in, failed_job, read_job):
    job_id = failed_job(
        error="TimeoutError: timed out: the handler did not finish within the job's timeout_seconds", timeout_seconds=5
    )

    body = text_of(signed_in.get(f"/admin/jobs/{job_id}"))

    assert 'data-reason="timed-out"' in body and "5 s after its claim" in body


def test_reap_now_says_what_it_expired(signed_in, make_job):
    make_job(expires_at=utcnow() - timedelta(seconds=1))
    token = csrf_token(signed_in, "/admin")

    response = signed_in.post("/admin/reap", data={"csrf_token": token}, follow_redirects=True)

    assert "Cancelled 1 pending job no worker claimed before its expires_at." in flashes(response)
