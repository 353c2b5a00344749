"""A job's page says where it stands now: stalled (as the dashboard says), scheduled or backing off (in the
Scheduled page's words, with the due time), due since when, or waiting for which parents."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest

from queuelog.core.clock import rfc3339, utcnow
from tests.support.ui import text_of

pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")

STANDING = re.compile(r'<p class="standing[^"]*" data-standing="([a-z-]+)">(.*?)</p>', re.S)


@pytest.fixture
def config_overrides():
    """A real backoff (at least 5 minutes), so a failed run's retry is not due yet."""
    return {"RETRY_BACKOFF_BASE": 600}


def standing(client, job_id: int) -> tuple[str, str]:
    """The job page's standing line: (its kind, its text with tags dropped and spaces collapsed)."""
    match = STANDING.search(text_of(client.get(f"/admin/jobs/{job_id}")))
    assert match, f"job {job_id}'s page has no standing line"
    return match.group(1), " ".join(html.unescape(re.sub(r"<[^>]+>", "", match.group(2))).split())


def test_a_stalled_jobs_page_says_when_its_lease_ran_out(signed_in, make_job, read_job):
    job = make_job(status="running", worker_id="mailer-7", lease_expires_at=utcnow() - timedelta(minutes=3))
    ran_out = read_job(job).lease_expires_at

    kind, text = standing(signed_in, job)

    assert kind == "stalled"
    assert f"its lease ran out {ran_out:%Y-%m-%d %H:%M:%S} UTC (3m" in text and "ago)" in text
    assert "mailer-7 stopped heartbeating" in text
    assert '<span class="badge stalled">stalled</span>' in text_of(signed_in.get(f"/admin/jobs/{job}"))


def test_a_running_job_whose_lease_is_live_is_not_called_stalled(signed_in, make_job):
    job = make_job(status="running", lease_expires_at=utcnow() + timedelta(minutes=4))

    kind, text = standing(signed_in, job)

    assert kind == "running" and "(in 3m" in text
    assert "badge stalled" not in text_of(signed_in.get(f"/admin/jobs/{job}"))


def test_a_scheduled_jobs_page_gives_its_due_time_in_utc_and_from_now_and_links_the_scheduled_page(
    signed_in, enqueue, read_job
):
    job = enqueue(run_at=rfc3339(utcnow() + timedelta(hours=1)))["id"]
    due = read_job(job).run_at

    kind, text = standing(signed_in, job)

    assert kind == "scheduled"
    assert text.startswith(f"Scheduled: due {due:%Y-%m-%d %H:%M:%S} UTC (in 59m")
    assert 'href="/admin/scheduled">Every job not due yet</a>' in text_of(signed_in.get(f"/admin/jobs/{job}"))


def test_a_backing_off_job_is_called_what_the_scheduled_page_calls_it(signed_in, client, worker, enqueue, claim):
    job = enqueue(max_retries=3)["id"]
    claimed = claim()
    client.post(f"/jobs/{job}/fail", headers=worker, json={"claim_token": claimed["claim_token"]})

    kind, text = standing(signed_in, job)
    row = re.search(
        rf'<tr data-job="{job}">.*?data-reason="([a-z-]+)">([^<]+)</td>',
        text_of(signed_in.get("/admin/scheduled")),
        re.S,
    )

    assert kind == "backing-off" == row.group(1)
    assert text.startswith("Backing off after failed run 1 of 4: due ")
    assert row.group(2) == "backing off after failed run 1 of 4"


def test_a_due_job_says_since_when_it_has_been_due(signed_in, make_job):
    became_due = utcnow() - timedelta(minutes=2)
    job = make_job(created_at=became_due - timedelta(hours=1), run_at=became_due, retry_count=1)

    kind, text = standing(signed_in, job)

    assert kind == "due"
    assert text.startswith(f"Due since {became_due:%Y-%m-%d %H:%M:%S} UTC (2m")
    assert "(retry after failed run 1 of 4)" in text


def test_a_waiting_job_names_the_parents_it_still_waits_for(signed_in, client, producer, enqueue):
    parent = enqueue()["id"]
    child = client.post("/jobs", headers=producer, json={"type": "email", "depends_on": [parent]}).get_json()["id"]

    kind, text = standing(signed_in, child)

    assert kind == "waiting"
    assert f"every parent has completed; 1 of 1 not finished yet (#{parent} pending)" in text


def test_a_due_job_past_its_expires_at_says_no_worker_will_claim_it(signed_in, make_job):
    job = make_job(run_at=utcnow() - timedelta(minutes=5), expires_at=utcnow() - timedelta(seconds=1))

    kind, text = standing(signed_in, job)

    assert kind == "due" and text.endswith("Its expires_at has passed, so no worker will: the reaper cancels it.")


def test_a_viewer_is_told_a_job_is_stalled_without_being_sent_to_reap_it(viewer_client, make_job):
    job = make_job(status="running", lease_expires_at=utcnow() - timedelta(minutes=3))

    kind, text = standing(viewer_client, job)

    assert kind == "stalled" and "The reaper (flask reap) gives it back" in text and "Reap now" not in text
