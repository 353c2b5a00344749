"""In a real browser against a real gunicorn: an admin pauses a type on the Types page and no worker gets
its job; resuming it on the page hands the job to the worker already waiting in a long-poll."""

from __future__ import annotations

import threading
import time

import pytest

from queuelog.auth.users import create_user
from tests.support.live_site import ADMIN_NAME, ADMIN_PASSWORD, api, server_env, sign_in
from tests.support.server import running_server

LONG_POLL_SECONDS = 8  # inside the 10 s the api() helper waits for an answer


@pytest.fixture
def threaded_server(app, database_url):
    """gunicorn with threads, so a waiting long-poll and the browser's requests are served side by side."""
    create_user(ADMIN_NAME, ADMIN_PASSWORD)
    with running_server(server_env(database_url), workers=1, extra_args=("--threads", "8")) as server:
        yield server


def test_pausing_a_type_on_the_page_holds_its_jobs_and_resuming_wakes_a_waiting_worker(page, threaded_server, make_key):
    server = threaded_server
    producer, worker = make_key("producer", "shop"), make_key("worker", "mailer")
    sign_in(page, server)
    page.click("nav >> text=Types")
    page.click("tr[data-type=email] button:has-text('Pause')")
    assert page.locator("tr[data-type=email] [data-field=state]").inner_text() == "paused"

    status, job = api(server, "POST", "/jobs", producer, {"type": "email", "payload": {"to": "a@example.org"}})
    assert status == 201  # enqueueing still works
    assert api(server, "POST", "/jobs/claim", worker, {"types": ["email"]})[0] == 204
    page.reload()
    assert page.locator("tr[data-type=email] [data-field=pending]").inner_text() == "1"

    answer = {}

    def long_poll():
        started = time.monotonic()
        answer["status"], answer["body"] = api(
            server, "POST", "/jobs/claim", worker, {"types": ["email"], "wait": LONG_POLL_SECONDS}
        )
        answer["returned_at"] = time.monotonic()
        answer["waited"] = answer["returned_at"] - started

    waiting = threading.Thread(target=long_poll, daemon=True)
    waiting.start()
    time.sleep(1.5)
    assert waiting.is_alive(), f"the long-poll returned while the type was paused: {answer}"

    page.click("tr[data-type=email] button:has-text('Resume')")
    resumed_at = time.monotonic()
    waiting.join(LONG_POLL_SECONDS + 5)
    assert answer["status"] == 200 and answer["body"]["id"] == job["id"], answer
    assert answer["returned_at"] - resumed_at < 3, answer  # woken by the resume, not by its time running out

    page.click("tr[data-type=email] a:has-text('Limits and history')")
    changes = page.locator("tr[data-change]").all_inner_texts()
    assert [" ".join(change.split()[-4:]) for change in changes] == ["state: paused → active", "state: active → paused"]
    assert all(f"admin:{ADMIN_NAME}" in change for change in changes)
    assert page.problems == []
