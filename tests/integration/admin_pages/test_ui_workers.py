"""The workers page: what each worker holds now, when it was last seen, what it completed and failed."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest

from queuelog.core.clock import utcnow
from tests.support.ui import post_form, shows_age, text_of

# Each request runs in its own app context, as on a server (tests/support/ui.py).
pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")


def worker_rows(response) -> dict[str, str]:
    assert response.status_code == 200
    rows = re.findall(
        r'<th scope="row" class="mono"><a href="[^"]+">([^<]+)</a></th>(.*?)</tr>', text_of(response), re.S
    )
    return {
        html.unescape(name): re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", cells))).strip()
        for name, cells in rows
    }


def test_each_worker_key_is_listed_even_when_idle(signed_in, make_key):
    make_key("worker", "mailer-1")
    make_key("producer", "billing")
    rows = worker_rows(signed_in.get("/admin/workers"))
    assert list(rows) == ["mailer-1"]
    assert rows["mailer-1"].startswith("idle")
    assert "active" in rows["mailer-1"]


def test_a_worker_shows_the_jobs_it_holds_now(signed_in, make_key, make_job):
    make_key("worker", "mailer-1")
    held = [make_job(status="running", worker_id="mailer-1") for _ in range(2)]
    make_job(status="running", worker_id="someone-else")
    body = text_of(signed_in.get("/admin/workers"))
    row = body[body.index(">mailer-1</a>") :]
    row = row[: row.index("</tr>")]
    assert set(map(int, re.findall(r'href="/admin/jobs/(\d+)"', row))) == set(held)
    assert worker_rows(signed_in.get("/admin/workers"))["mailer-1"].startswith("2 ")


def test_last_seen_is_the_latest_claim_or_heartbeat(signed_in, make_key, make_job):
    make_key("worker", "mailer-1")
    now = utcnow()
    make_job(
        status="running",
        worker_id="mailer-1",
        claimed_at=now - timedelta(hours=3),
        heartbeat_at=now - timedelta(minutes=7, seconds=30),
    )
    last_seen = re.search(r"\b(\d+m \d+s) ago", worker_rows(signed_in.get("/admin/workers"))["mailer-1"])
    assert shows_age(last_seen.group(1), timedelta(minutes=7, seconds=30), since=now)


def test_last_seen_follows_the_workers_requests(signed_in, client, make_key, enqueue):
    from tests.support.api import bearer

    secret = make_key("worker", "mailer-1")
    enqueue(type="email")
    assert client.post("/jobs/claim", headers=bearer(secret), json={}).status_code == 200
    row = worker_rows(signed_in.get("/admin/workers"))["mailer-1"]
    assert re.search(r"\b\d+s ago", row)


def test_completed_and_failed_counts_per_worker(signed_in, make_key, make_job):
    make_key("worker", "mailer-1")
    for _ in range(3):
        make_job(status="completed", worker_id="mailer-1")
    make_job(status="failed", worker_id="mailer-1")
    make_job(status="completed", worker_id="other")
    body = text_of(signed_in.get("/admin/workers"))
    assert 'href="/admin/jobs?worker=mailer-1&amp;status=completed">3</a>' in body
    assert 'href="/admin/jobs?worker=mailer-1&amp;status=failed">1</a>' in body


def test_a_worker_id_without_a_key_still_appears(signed_in, make_job):
    make_job(status="running", worker_id="ghost-worker")
    rows = worker_rows(signed_in.get("/admin/workers"))
    assert "no worker key by this name" in rows["ghost-worker"]


def test_a_revoked_worker_key_is_not_listed(signed_in, make_key, make_job):
    make_key("worker", "retired")
    make_job(status="completed", worker_id="retired")
    post_form(signed_in, "/admin/keys/retired/revoke", {"confirmed": "yes"}, page="/admin/keys")
    assert "retired" not in worker_rows(signed_in.get("/admin/workers"))


def test_a_revoked_worker_key_that_still_holds_a_job_is_listed_as_revoked(signed_in, make_key, make_job):
    make_key("worker", "retired")
    make_job(status="running", worker_id="retired")
    post_form(signed_in, "/admin/keys/retired/revoke", {"confirmed": "yes"}, page="/admin/keys")
    assert "revoked" in worker_rows(signed_in.get("/admin/workers"))["retired"]


def test_busy_workers_come_first(signed_in, make_key, make_job):
    make_key("worker", "aaa-idle")
    make_key("worker", "zzz-busy")
    make_job(status="running", worker_id="zzz-busy")
    assert list(worker_rows(signed_in.get("/admin/workers")))[0] == "zzz-busy"


def test_no_workers_yet_points_to_the_keys_page(signed_in):
    body = text_of(signed_in.get("/admin/workers"))
    assert "No worker keys yet." in body and 'href="/admin/keys"' in body


def test_the_workers_table_can_be_fetched_alone_for_auto_refresh(signed_in, make_key):
    make_key("worker", "mailer-1")
    response = signed_in.get("/admin/workers?partial=1")
    assert response.headers["X-Queuelog-Partial"] == "1"
    assert "mailer-1" in worker_rows(response)
