"""One job's page: every field, payload and result, the error, the event log, and the actions that fit."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest

from queuelog.core.clock import utcnow
from tests.support.ui import ADMIN_NAME, events_of, flashes, post_form, text_of

# Each request runs in its own app context, as on a server (tests/support/ui.py).
pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")

ACTIONS = {"retry": "Retry", "cancel": "Cancel", "release": "Give back to the queue"}


def actions_on(body: str) -> set[str]:
    return set(re.findall(r'action="/admin/jobs/\d+/(retry|cancel|release)"', body))


def test_the_job_page_shows_every_field(signed_in, make_job):
    now = utcnow()
    job = make_job(
        status="running",
        type="report",
        priority=20,
        retry_count=1,
        max_retries=5,
        idempotency_key="monthly-2026-11",
        producer="billing",
        worker_id="reports-1",
        payload={"account": 7, "format": "pdf"},
    )
    body = html.unescape(text_of(signed_in.get(f"/admin/jobs/{job}")))
    for label in (
        "id",
        "type",
        "status",
        "priority",
        "retries used",
        "stalls",
        "idempotency key",
        "producer",
        "worker",
        "claim",
        "created",
        "run at",
        "claimed",
        "last heartbeat",
        "lease expires",
        "completed",
        "updated",
    ):
        assert f"<dt>{label}</dt>" in body
    assert "monthly-2026-11" in body and "billing" in body and "reports-1" in body
    assert "high" in body and "1 of 5" in body
    assert f"{now:%Y-%m-%d}" in body
    assert "token-a" not in body  # the claim token is the worker's credential: never on a page


def test_payload_and_result_are_pretty_printed(signed_in, make_job):
    job = make_job(status="completed", payload={"to": "a@example.com", "items": [1, 2]}, result='{"sent":true,"ms":42}')
    body = html.unescape(text_of(signed_in.get(f"/admin/jobs/{job}")))
    assert '"items": [\n    1,\n    2\n  ],\n  "to": "a@example.com"' in body
    assert '{\n  "ms": 42,\n  "sent": true\n}' in body


def test_the_last_error_is_shown_in_full(signed_in, failed_job):
    error = 'Traceback (most recent call last):\n  File "send.py", line 3\nSMTPError: 550 mailbox unavailable'
    job = failed_job(error=error)
    body = html.unescape(text_of(signed_in.get(f"/admin/jobs/{job}")))
    assert "Why it failed" in body
    assert error in body


def test_the_event_log_shows_every_attempt_who_made_it_and_how_it_ended(signed_in, client, worker, enqueue, claim):
    job = enqueue(type="email", max_retries=1)
    first = claim()
    client.post(
        f"/jobs/{job['id']}/fail",
        headers=worker,
        json={"claim_token": first["claim_token"], "error": "timeout talking to SMTP"},
    )
    second = claim()
    client.post(
        f"/jobs/{job['id']}/fail",
        headers=worker,
        json={"claim_token": second["claim_token"], "error": "550 mailbox unavailable"},
    )
    body = text_of(signed_in.get(f"/admin/jobs/{job['id']}"))
    log = body[body.index('<table class="data events">') :]
    rows = re.findall(
        r'<span class="event-name">(\w+)</span>.*?<td class="mono actor">([^<]+)</td>'
        r'.*?<td class="num">([^<]+)</td>',
        log,
        re.S,
    )
    # The Run column counts runs (the first is 1), not retries; enqueueing belongs to no run.
    assert rows == [
        ("enqueued", "key:producer-a", "—"),
        ("claimed", "key:worker-a", "1"),
        ("requeued", "key:worker-a", "1"),
        ("claimed", "key:worker-a", "2"),
        ("failed", "key:worker-a", "2"),
    ]
    assert "timeout talking to SMTP" in log and "550 mailbox unavailable" in log


def test_the_actions_offered_fit_the_state(signed_in, make_job):
    for status, expected in (
        ("failed", {"retry"}),
        ("cancelled", {"retry"}),
        ("pending", {"cancel"}),
        ("running", {"release"}),
        ("completed", set()),
    ):
        job = make_job(status=status)
        assert actions_on(text_of(signed_in.get(f"/admin/jobs/{job}"))) == expected, status


def test_retry_from_the_job_page_records_the_admins_name(signed_in, failed_job, read_job):
    job = failed_job(error="boom")
    response = post_form(signed_in, f"/admin/jobs/{job}/retry", page=f"/admin/jobs/{job}")
    assert response.status_code == 302 and response.headers["Location"] == f"/admin/jobs/{job}"
    assert read_job(job).status == "pending"
    last = events_of(job)[-1]
    assert (last.event, last.from_status, last.to_status, last.actor) == (
        "retried",
        "failed",
        "pending",
        f"admin:{ADMIN_NAME}",
    )
    page = signed_in.get(f"/admin/jobs/{job}")
    assert flashes(page) == [f"Job {job} is back in the queue with a fresh retry budget."]
    assert f"admin:{ADMIN_NAME}" in text_of(page)


def test_cancel_from_the_job_page(signed_in, make_job, read_job):
    job = make_job(status="pending")
    post_form(signed_in, f"/admin/jobs/{job}/cancel", page=f"/admin/jobs/{job}")
    assert read_job(job).status == "cancelled"
    assert events_of(job)[-1].actor == f"admin:{ADMIN_NAME}"


def test_give_back_takes_a_running_job_from_its_worker(signed_in, client, worker, enqueue, claim, read_job):
    job = enqueue(type="email")
    claimed = claim()
    post_form(signed_in, f"/admin/jobs/{job['id']}/release", page=f"/admin/jobs/{job['id']}")
    row = read_job(job["id"])
    assert row.status == "pending" and row.worker_id is None and row.retry_count == 0
    assert events_of(job["id"])[-1].actor == f"admin:{ADMIN_NAME}"
    late = client.post(
        f"/jobs/{job['id']}/complete", headers=worker, json={"claim_token": claimed["claim_token"], "result": {}}
    )
    assert late.status_code == 409  # the worker's claim no longer counts


def test_an_action_that_no_longer_fits_becomes_a_message_not_an_error_page(signed_in, make_job, read_job):
    for status, action in (("pending", "retry"), ("running", "cancel"), ("failed", "release"), ("completed", "retry")):
        job = make_job(status=status)
        response = post_form(signed_in, f"/admin/jobs/{job}/{action}", page=f"/admin/jobs/{job}")
        assert response.status_code == 302
        assert read_job(job).status == status
        [message] = flashes(signed_in.get(f"/admin/jobs/{job}"))
        assert message.startswith(f"Cannot {action} job {job}: it is {status}"), message


def test_an_action_on_a_missing_job_says_so(signed_in):
    response = post_form(signed_in, "/admin/jobs/999/retry", page="/admin")
    assert response.status_code == 302
    page = signed_in.get("/admin/jobs/999")
    assert page.status_code == 404
    assert flashes(page) == ["Job 999 does not exist."]


def test_a_missing_job_is_a_readable_404(signed_in):
    response = signed_in.get("/admin/jobs/424242")
    assert response.status_code == 404
    assert "job 424242 does not exist" in text_of(response)


def test_an_action_without_a_csrf_token_changes_nothing(signed_in, make_job, read_job):
    job = make_job(status="failed")
    assert signed_in.post(f"/admin/jobs/{job}/retry").status_code == 400
    assert read_job(job).status == "failed"


def test_a_quarantined_job_is_marked_and_explained(signed_in, make_job):
    job = make_job(status="failed", error="quarantined: its worker died 3 times", stall_count=3)
    body = text_of(signed_in.get(f"/admin/jobs/{job}"))
    assert 'class="badge quarantined"' in body
    assert "workers died 3 times while holding it" in body


def test_a_job_that_only_failed_once_is_not_marked_quarantined(signed_in, make_job):
    job = make_job(status="failed", error="worker w stopped heartbeating and no retries are left")
    assert "badge quarantined" not in text_of(signed_in.get(f"/admin/jobs/{job}"))


def test_the_job_page_can_be_fetched_alone_for_auto_refresh(signed_in, make_job):
    job = make_job(status="running", lease_expires_at=utcnow() + timedelta(minutes=5))
    response = signed_in.get(f"/admin/jobs/{job}?partial=1")
    assert response.headers["X-Queuelog-Partial"] == "1"
    assert "<html" not in text_of(response)
    assert actions_on(text_of(response)) == {"release"}
