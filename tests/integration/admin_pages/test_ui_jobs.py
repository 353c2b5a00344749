"""The jobs table: filters, lookup, cursor pages, and retrying failed jobs in bulk."""

from __future__ import annotations

import html
import re

import pytest

from tests.support.ui import ADMIN_NAME, events_of, flashes, post_form, text_of

# Each request runs in its own app context, as on a server (tests/support/ui.py).
pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")


def listed(response) -> list[int]:
    """Job ids in the table, in the order shown."""
    assert response.status_code == 200, text_of(response)[:500]
    body = text_of(response)
    table = body[body.index('<table class="data jobs">') : body.index("</table>")]
    return [int(n) for n in re.findall(r'<a class="job-link" href="/admin/jobs/(\d+)">', table)]


def test_jobs_are_listed_newest_first(signed_in, make_job):
    ids = [make_job() for _ in range(3)]
    assert listed(signed_in.get("/admin/jobs")) == ids[::-1]


def test_jobs_filter_by_status_type_priority_and_worker(signed_in, make_job):
    jobs = {
        "failed-email": make_job(status="failed", type="email"),
        "pending-report": make_job(status="pending", type="report"),
        "high": make_job(status="pending", priority=20),
        "held-by-b": make_job(status="running", worker_id="worker-b"),
        "held-by-a": make_job(status="running", worker_id="worker-a"),
    }
    for query, wanted in (
        ("status=failed", {"failed-email"}),
        ("type=report", {"pending-report"}),
        ("priority=high", {"high"}),
        ("worker=worker-b", {"held-by-b"}),
        ("status=failed&type=report", set()),
    ):
        assert set(listed(signed_in.get(f"/admin/jobs?{query}"))) == {jobs[name] for name in wanted}, query


def test_jobs_filter_by_concurrency_key(signed_in, make_job):
    tenant = [make_job(concurrency_key="tenant-42"), make_job(status="failed", concurrency_key="tenant-42")]
    make_job(concurrency_key="tenant-7")
    make_job()
    assert listed(signed_in.get("/admin/jobs?key=tenant-42")) == tenant[::-1]
    assert listed(signed_in.get("/admin/jobs?key=tenant-42&status=failed")) == [tenant[1]]
    assert 'name="key" placeholder="any key" size="14" type="text" value="tenant-42"' in text_of(
        signed_in.get("/admin/jobs?key=tenant-42")
    )


def test_retry_all_matching_a_concurrency_key_takes_only_its_failed_jobs(signed_in, make_job, read_job):
    mine = make_job(status="failed", concurrency_key="tenant-42")
    other = make_job(status="failed", concurrency_key="tenant-7")
    response = post_form(
        signed_in, "/admin/jobs/retry", {"scope": "matching", "key": "tenant-42"}, page="/admin/jobs?key=tenant-42"
    )
    assert response.headers["Location"] == "/admin/jobs?key=tenant-42"
    assert (read_job(mine).status, read_job(other).status) == ("pending", "failed")


def test_the_apis_worker_id_filter_name_works_too(signed_in, make_job):
    held = make_job(status="running", worker_id="worker-b")
    make_job(status="running", worker_id="worker-a")
    assert listed(signed_in.get("/admin/jobs?worker_id=worker-b")) == [held]


def test_the_filter_form_keeps_what_was_chosen(signed_in):
    body = text_of(signed_in.get("/admin/jobs?status=failed&type=report&worker=w-1&priority=high"))
    assert '<option selected value="failed">' in body
    assert '<option selected value="high">' in body
    assert 'name="type" placeholder="any type" size="14" type="text" value="report"' in body
    assert 'value="w-1"' in body


def test_search_finds_a_job_by_id(signed_in, make_job):
    wanted = make_job()
    make_job()
    assert listed(signed_in.get(f"/admin/jobs?q={wanted}")) == [wanted]
    assert listed(signed_in.get(f"/admin/jobs?q=%23{wanted}")) == [wanted]


def test_search_finds_a_job_by_idempotency_key(signed_in, enqueue, make_job):
    job = enqueue(type="email", idempotency_key="invoice-42")
    enqueue(type="email", idempotency_key="invoice-43")
    keyless = make_job(idempotency_key="made-without-a-producer")
    assert listed(signed_in.get("/admin/jobs?q=invoice-42")) == [job["id"]]
    assert listed(signed_in.get("/admin/jobs?q=made-without-a-producer")) == [keyless]


def test_search_with_no_match_says_so(signed_in, make_job):
    make_job()
    response = signed_in.get("/admin/jobs?q=no-such-key")
    assert listed(response) == []
    assert "No jobs match these filters." in text_of(response)


def test_pages_follow_a_cursor_without_overlap(signed_in, make_job):
    ids = [make_job() for _ in range(5)]
    first = signed_in.get("/admin/jobs?limit=2&status=pending")
    assert listed(first) == [ids[4], ids[3]]
    older = re.search(r'href="(/admin/jobs\?cursor=[^"]+)">Older', text_of(first)).group(1)
    older = html.unescape(older)
    assert "status=pending" in older  # the filter travels with the cursor
    second = signed_in.get(older + "&limit=2")
    assert listed(second) == [ids[2], ids[1]]
    third_link = html.unescape(re.search(r'href="(/admin/jobs\?cursor=[^"]+)">Older', text_of(second)).group(1))
    third = signed_in.get(third_link + "&limit=2")
    assert listed(third) == [ids[0]]
    assert "Older" not in text_of(third) and "← Newest" in text_of(third)


def test_a_bad_cursor_shows_the_newest_jobs_with_a_note(signed_in, make_job):
    job = make_job()
    response = signed_in.get("/admin/jobs?cursor=not-a-cursor")
    assert listed(response) == [job]
    assert "That page link is not valid any more" in text_of(response)


def test_bad_filters_are_a_readable_400(signed_in):
    for query, message in (
        ("status=exploded", "Status: Not a valid choice"),
        ("priority=urgent", "Priority: Not a valid choice"),
        ("q=" + "x" * 201, "Job id or idempotency key: Field cannot be longer than 200 characters."),
    ):
        response = signed_in.get(f"/admin/jobs?{query}")
        assert response.status_code == 400, query
        assert message in html.unescape(text_of(response)), query


def test_every_job_but_a_running_one_has_a_checkbox(signed_in, make_job):
    # Retry takes failed and cancelled jobs, cancel pending ones, delete completed, failed and cancelled ones.
    ticked = {make_job(status=status) for status in ("failed", "cancelled", "pending", "completed")}
    running = make_job(status="running")
    body = text_of(signed_in.get("/admin/jobs"))
    boxes = {int(n) for n in re.findall(r'name="job_id" value="(\d+)"', body)}
    assert boxes == ticked
    assert running not in boxes


def test_retry_selected_puts_the_ticked_jobs_back_in_the_queue(signed_in, make_job, read_job):
    first, second, untouched = (make_job(status="failed", retry_count=3) for _ in range(3))
    response = post_form(
        signed_in, "/admin/jobs/retry", {"scope": "selected", "job_id": [first, second]}, page="/admin/jobs"
    )
    assert response.status_code == 302
    assert [read_job(j).status for j in (first, second, untouched)] == ["pending", "pending", "failed"]
    assert read_job(first).retry_count == 0
    assert events_of(first)[-1].actor == f"admin:{ADMIN_NAME}"
    assert flashes(signed_in.get("/admin/jobs")) == ["Retried 2 jobs."]


def test_retry_selected_leaves_jobs_that_are_not_failed_and_says_so(signed_in, make_job, read_job):
    failed, running = make_job(status="failed"), make_job(status="running")
    post_form(signed_in, "/admin/jobs/retry", {"scope": "selected", "job_id": [failed, running]}, page="/admin/jobs")
    assert read_job(failed).status == "pending" and read_job(running).status == "running"
    assert flashes(signed_in.get("/admin/jobs")) == [
        "Retried 1 job. 1 of the selected jobs was no longer failed or cancelled and left as is."
    ]


def test_retry_selected_with_nothing_ticked_explains(signed_in):
    post_form(signed_in, "/admin/jobs/retry", {"scope": "selected"}, page="/admin/jobs")
    assert flashes(signed_in.get("/admin/jobs")) == [
        "Tick the failed jobs to retry first (or use “retry all matching”)."
    ]


def test_retry_selected_refuses_more_than_a_page_of_ids(signed_in, make_job, read_job):
    failed = make_job(status="failed")
    post_form(
        signed_in,
        "/admin/jobs/retry",
        {"scope": "selected", "job_id": [failed, *range(10**6, 10**6 + 200)]},
        page="/admin/jobs",
    )
    assert read_job(failed).status == "failed"
    assert flashes(signed_in.get("/admin/jobs")) == [
        "Tick at most 200 jobs at a time (or use “retry all matching”); nothing was changed."
    ]


def test_retry_all_matching_takes_only_the_failed_jobs_of_the_filter(signed_in, make_job, read_job):
    reports = [make_job(status="failed", type="report") for _ in range(3)]
    other_type = make_job(status="failed", type="email")
    cancelled = make_job(status="cancelled", type="report")
    response = post_form(
        signed_in, "/admin/jobs/retry", {"scope": "matching", "type": "report"}, page="/admin/jobs?type=report"
    )
    assert response.headers["Location"] == "/admin/jobs?type=report"
    assert [read_job(j).status for j in reports] == ["pending"] * 3
    assert read_job(other_type).status == "failed"
    assert read_job(cancelled).status == "cancelled"  # stopped on purpose: only retried when asked for
    assert flashes(signed_in.get("/admin/jobs")) == ["Retried 3 matching jobs."]


def test_retry_all_matching_cancelled_jobs_when_the_filter_says_cancelled(signed_in, make_job, read_job):
    cancelled = make_job(status="cancelled")
    failed = make_job(status="failed")
    post_form(signed_in, "/admin/jobs/retry", {"scope": "matching", "status": "cancelled"}, page="/admin/jobs")
    assert read_job(cancelled).status == "pending" and read_job(failed).status == "failed"


def test_the_retry_all_button_says_how_many_jobs_match(signed_in, make_job):
    for _ in range(2):
        make_job(status="failed", type="report")
    make_job(status="failed", type="email")
    body = text_of(signed_in.get("/admin/jobs?type=report"))
    assert re.search(r'value="matching"[^>]*>\s*Retry all 2\s+failed jobs matching this filter', body)
    assert 'value="matching"' not in text_of(signed_in.get("/admin/jobs?status=pending"))


def test_retry_all_matching_in_batches_reaches_every_job(signed_in, make_job, read_job, monkeypatch):
    from queuelog.ui import job_routes

    monkeypatch.setattr(job_routes, "RETRY_BATCH", 2)  # several batches, without making hundreds of jobs
    jobs = [make_job(status="failed") for _ in range(5)]
    post_form(signed_in, "/admin/jobs/retry", {"scope": "matching", "status": "failed"}, page="/admin/jobs")
    assert [read_job(j).status for j in jobs] == ["pending"] * 5


def test_retry_without_a_csrf_token_changes_nothing(signed_in, make_job, read_job):
    failed = make_job(status="failed")
    response = signed_in.post("/admin/jobs/retry", data={"scope": "selected", "job_id": [failed]})
    assert response.status_code == 400
    assert read_job(failed).status == "failed"


def test_a_malformed_retry_request_changes_nothing(signed_in, make_job, read_job):
    failed = make_job(status="failed")
    post_form(signed_in, "/admin/jobs/retry", {"scope": "everything", "job_id": [failed]}, page="/admin/jobs")
    assert read_job(failed).status == "failed"
    assert flashes(signed_in.get("/admin/jobs")) == ["That retry request was not understood; nothing was changed."]


def test_the_table_can_be_fetched_alone_for_auto_refresh(signed_in, make_job):
    job = make_job(status="failed")
    response = signed_in.get("/admin/jobs?status=failed&partial=1")
    assert response.headers["X-Queuelog-Partial"] == "1"
    assert "<form" not in text_of(response).split("<table")[0].replace('<form class="inline"', "")
    assert listed(response) == [job]
