"""End-to-end fixtures: a real gunicorn server on the test's database, an admin made with the CLI, Chromium.

The ``app`` fixture (tests/conftest.py) creates the schema and lets a test seed keys on the same
database the server uses. The browser is launched once per module (Debian's Chromium through
Playwright, see tests/support/browser.py); each test gets a fresh browser context, so no cookie
carries over from one test to the next.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from queuelog.auth.users import create_user
from tests.support.live_site import ADMIN_NAME, ADMIN_PASSWORD, BROWSER_SERVER_ARGS, server_env
from tests.support.server import REPO_ROOT, running_server


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
