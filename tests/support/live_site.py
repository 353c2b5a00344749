"""What the browser tests share besides fixtures: the admin they sign in as, the live server's settings, and
calls of the live server's JSON API for seeding what a page shows."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from tests.support.database import JOB_TYPES
from tests.support.ui import ADMIN_NAME, ADMIN_PASSWORD

__all__ = ["ADMIN_NAME", "ADMIN_PASSWORD", "BROWSER_SERVER_ARGS", "server_env", "sign_in", "api", "fail_a_job"]

SECRET_KEY = "e2e-secret-key"
#: gunicorn's gthread worker, as the README's production command runs it. A sync worker reads one
#: connection at a time, to its end: Chromium keeps a spare connection open that it may never send a request
#: on, and a sync worker that accepted it waits there while the page's stylesheet queues behind it (a no-script
#: navigation loop stalled 6 s twice in 100 page loads, py-spy showing the worker in ``SocketUnreader.chunk``).
#: gthread waits for a connection's request head off its threads, so an idle connection holds nobody up.
BROWSER_SERVER_ARGS = ("--threads", "4")


def server_env(database_url: str) -> dict[str, str]:
    """The server's configuration, as an operator would give it: QUEUELOG_* variables."""
    return {
        "QUEUELOG_DATABASE_URL": database_url,
        "QUEUELOG_SECRET_KEY": SECRET_KEY,
        "QUEUELOG_JOB_TYPES": ",".join(JOB_TYPES),
        "QUEUELOG_RETRY_BACKOFF_BASE": "0",
        "QUEUELOG_UI_REFRESH_SECONDS": "1",
    }


def sign_in(page, server) -> None:
    """Open the dashboard, get sent to the sign-in form, sign in, land on the dashboard."""
    page.goto(server.url + "/admin")
    assert page.url.startswith(server.url + "/admin/login")
    page.fill("#username", ADMIN_NAME)
    page.fill("#password", ADMIN_PASSWORD)
    page.click("button:has-text('Sign in')")
    page.wait_for_url(server.url + "/admin")


def api(server, method: str, path: str, secret: str, body: dict | None = None) -> tuple[int, dict | None]:
    """Call the JSON API of the live server; returns (status, decoded body or None)."""
    request = urllib.request.Request(
        server.url + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as error:
        raw = error.read()
        return error.code, json.loads(raw) if raw else None


def fail_a_job(server, producer: str, worker: str, error: str, job_type: str = "email") -> int:
    """Enqueue a job, claim it and fail it for good, all through the HTTP API; returns its id."""
    status, job = api(
        server, "POST", "/jobs", producer, {"type": job_type, "payload": {"to": "a@example.org"}, "max_retries": 0}
    )
    assert status == 201, job
    status, claimed = api(server, "POST", "/jobs/claim", worker, {"types": [job_type]})
    assert status == 200 and claimed["id"] == job["id"], claimed
    status, failed = api(
        server,
        "POST",
        f"/jobs/{job['id']}/fail",
        worker,
        {"claim_token": claimed["claim_token"], "error": error, "retryable": False},
    )
    assert status == 200 and failed["status"] == "failed", failed
    return job["id"]
