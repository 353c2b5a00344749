"""How a job ended, as its page tells it: why a failed job was not retried, attempts counted as runs, and
what stands in for a result the job will never have."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest

from queuelog.core.clock import utcnow
from tests.support.factories import set_job
from tests.support.ui import post_form, text_of

# Each request runs in its own app context, as on a server (tests/support/ui.py).
pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")


def page_of(client, job_id: int) -> str:
    return html.unescape(text_of(client.get(f"/admin/jobs/{job_id}")))


def reason_on(body: str) -> tuple[str, str] | None:
    """(kind, sentence) of the page's "Not retried" line, or None when the page has none."""
    match = re.search(
        r'<p class="reason" data-reason="([a-z-]+)">'
        r"<strong>Not retried: ([a-z ]+)\.</strong> ([^<]+)</p>",
        body,
    )
    if match is None:
        return None
    assert match.group(1) == match.group(2).replace(" ", "-")
    return match.group(2), match.group(3)


def attempts_cell(body: str, job_id: int) -> str:
    row = re.search(rf'<tr class="row-\w+">(?:(?!</tr>).)*?href="/admin/jobs/{job_id}".*?</tr>', body, re.S).group(0)
    return re.search(r'<td class="num nowrap" title="[^"]*">([^<]+)</td>', row).group(1)


@pytest.fixture
def run_and_fail(client, worker, enqueue, claim):
    """run_and_fail(max_retries, retryable, times) → id of a job whose worker failed it ``times`` times."""

    def _run(max_retries: int = 3, retryable: bool = True, times: int = 1) -> int:
        job = enqueue(max_retries=max_retries)
        for _ in range(times):
            claimed = claim()
            assert claimed["id"] == job["id"]
            response = client.post(
                f"/jobs/{job['id']}/fail",
                headers=worker,
                json={"claim_token": claimed["claim_token"], "error": "boom", "retryable": retryable},
            )
            assert response.status_code == 200, response.get_json()
        return job["id"]

    return _run


@pytest.fixture
def worker_dies_holding(signed_in, enqueue, claim):
    """worker_dies_holding(max_retries, stalls_before) → id of a job the reaper took from a dead worker."""

    def _die(max_retries: int = 0, stalls_before: int = 0) -> int:
        job = enqueue(max_retries=max_retries)
        assert claim()["id"] == job["id"]
        set_job(job["id"], lease_expires_at=utcnow() - timedelta(minutes=1), stall_count=stalls_before)
        assert post_form(signed_in, "/admin/reap", page="/admin").status_code == 302
        return job["id"]

    return _die


# --- why a failed job was not retried ----------------------------------------------------------


def test_a_job_its_worker_failed_as_permanent_says_not_retryable(signed_in, run_and_fail, read_job):
    job = run_and_fail(max_retries=3, retryable=False)
    assert read_job(job).status == "failed"
    assert reason_on(page_of(signed_in, job)) == (
        "not retryable",
        "Its worker reported run 1 of 4 as a permanent failure, so the 3 retries left were not used.",
    )


def test_a_job_that_failed_every_run_it_was_allowed_says_retries_spent(signed_in, run_and_fail, read_job):
    job = run_and_fail(max_retries=1, times=2)
    assert read_job(job).status == "failed"
    assert reason_on(page_of(signed_in, job)) == ("retries spent", "All 2 runs it was allowed (max_retries 1) failed.")


def test_a_job_allowed_no_retry_that_failed_once_says_retries_spent(signed_in, run_and_fail):
    job = run_and_fail(max_retries=0)
    assert reason_on(page_of(signed_in, job)) == ("retries spent", "All 1 run it was allowed (max_retries 0) failed.")


def test_a_job_whose_worker_stopped_heartbeating_on_its_last_run_says_timed_out(
    signed_in, worker_dies_holding, read_job
):
    job = worker_dies_holding(max_retries=0)
    assert read_job(job).status == "failed"
    assert reason_on(page_of(signed_in, job)) == (
        "timed out",
        "Its worker stopped heartbeating on run 1 of 1, the last one its retries allow, and the lease ran out.",
    )


def test_a_job_whose_workers_kept_dying_says_quarantined(signed_in, worker_dies_holding, read_job):
    job = worker_dies_holding(max_retries=5, stalls_before=2)  # MAX_STALLS is 3: this death is the third
    assert read_job(job).status == "failed"
    kind, sentence = reason_on(page_of(signed_in, job))
    assert kind == "quarantined"
    assert sentence.startswith("Its workers died 3 times while holding it")


@pytest.mark.parametrize("status", ["pending", "running", "completed", "cancelled"])
def test_a_job_that_did_not_fail_gives_no_reason(signed_in, make_job, status):
    assert reason_on(page_of(signed_in, make_job(status=status, error="an earlier run failed"))) is None


def test_a_failed_job_without_its_failing_event_is_judged_by_its_record(signed_in, make_job):
    spent = make_job(status="failed", retry_count=3, max_retries=3, error="boom")
    permanent = make_job(status="failed", retry_count=0, max_retries=3, error="boom")
    assert reason_on(page_of(signed_in, spent))[0] == "retries spent"
    assert reason_on(page_of(signed_in, permanent))[0] == "not retryable"


def test_a_failed_job_with_no_error_text_still_says_why(signed_in, make_job):
    body = page_of(signed_in, make_job(status="failed", retry_count=3, max_retries=3))
    assert reason_on(body)[0] == "retries spent"
    assert "Its worker gave no error message." in body


# --- attempts are runs -------------------------------------------------------------------------


def test_a_job_that_failed_on_its_first_run_shows_one_attempt_not_none(signed_in, run_and_fail):
    job = run_and_fail(max_retries=3, retryable=False)
    assert attempts_cell(text_of(signed_in.get("/admin/jobs")), job) == "1 of 4"
    assert "1 of 4 runs used" in page_of(signed_in, job)


def test_attempts_count_each_run_a_job_has_had(signed_in, make_job, run_and_fail):
    failed_twice = run_and_fail(max_retries=3, times=2)  # back in the queue for a third run
    never_run = make_job(status="pending", run_at=utcnow() + timedelta(hours=1))
    running = make_job(status="running", retry_count=2)
    body = text_of(signed_in.get("/admin/jobs"))
    assert attempts_cell(body, never_run) == "0 of 4"
    assert attempts_cell(body, failed_twice) == "2 of 4"
    assert attempts_cell(body, running) == "3 of 4"


def test_an_admins_retry_starts_the_count_again(signed_in, run_and_fail):
    job = run_and_fail(max_retries=0)
    assert attempts_cell(text_of(signed_in.get("/admin/jobs")), job) == "1 of 1"
    post_form(signed_in, f"/admin/jobs/{job}/retry", page="/admin")
    assert attempts_cell(text_of(signed_in.get("/admin/jobs")), job) == "0 of 1"


# --- a result the job will never have ----------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "says"),
    [
        ("failed", "No result: the job failed."),
        ("cancelled", "No result: the job was cancelled."),
        ("completed", "No result: its worker returned none."),
        ("pending", "No result yet."),
        ("running", "No result yet."),
    ],
)
def test_a_job_without_a_result_says_why(signed_in, make_job, status, says):
    body = page_of(signed_in, make_job(status=status))
    assert re.search(r'<p class="muted" data-field="result">([^<]+)</p>', body).group(1) == says
    if status in ("failed", "cancelled", "completed"):
        assert "No result yet." not in body
