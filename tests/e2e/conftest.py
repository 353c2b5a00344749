"""End-to-end fixtures: a real gunicorn server on the test's database, an admin made with the CLI, Chromium.

The ``app`` fixture (tests/conftest.py) creates the schema and lets a test seed keys on the same
database the server uses. The browser is launched once per module (Debian's Chromium through
Playwright, see tests/support/browser.py); each test gets a fresh browser context, so no cookie
carries over from one test to the next.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from queuelog.auth.users import create_user
from tests.conftest import JOB_TYPES
from tests.support.server import REPO_ROOT, running_server

ADMIN_NAME = "night-owl"
ADMIN_PASSWORD = "correct horse battery staple"
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


@pytest.fixture
def admin_made_by_cli(app, database_url):
    """The admin, created the documented way: ``flask --app app users create NAME --password-stdin``."""
    flask = str(Path(sys.executable).parent / "flask")
    created = subprocess.run(
        [flask, "--app", "app", "users", "create", ADMIN_NAME, "--password-stdin"],
        input=ADMIN_PASSWORD + "\n",
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, **server_env(database_url)},
        timeout=60,
    )
    assert created.returncode == 0, created.stderr
    assert created.stdout.strip() == f"created admin {ADMIN_NAME}"


@pytest.fixture
def live_server(request, app, database_url):
    """gunicorn serving the app on the test's database, with an admin account in it.

    The admin is made in-process unless the test asks for ``admin_made_by_cli`` (a subprocess costs
    seconds; one test going the documented way is enough). One gunicorn worker: it starts in a
    second, and a browser does not need more; with threads (``BROWSER_SERVER_ARGS``).
    """
    if "admin_made_by_cli" not in request.fixturenames:
        create_user(ADMIN_NAME, ADMIN_PASSWORD)
    with running_server(server_env(database_url), workers=1, extra_args=BROWSER_SERVER_ARGS) as server:
        yield server


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for the module."""
    from playwright.sync_api import sync_playwright

    from tests.support.browser import launch_chromium

    with sync_playwright() as playwright:
        chromium = launch_chromium(playwright)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser):
    """A fresh browser tab with JavaScript on; ``page.problems`` collects console errors (CSP violations)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(10_000)
    tab.problems = []
    tab.on("console", lambda message: tab.problems.append(message.text) if message.type == "error" else None)
    tab.on("pageerror", lambda error: tab.problems.append(str(error)))
    yield tab
    context.close()


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
