"""The suite's fixtures, registered here once so that no test module imports a fixture.

tests.support.database - the database of each test (QUEUELOG_TEST_DB=sqlite|postgresql) and app_config;
tests.support.fixtures - the app, its clients, API keys per role, job factories;
tests.support.held_snapshot - a second PostgreSQL session holding a snapshot open (holding back vacuum);
tests.support.pg_sessions - a failed test's report shows the PostgreSQL sessions that were busy then;
tests.support.route_builders - each URL rule's builder compiled once per process, not once per app;
tests.support.server - a failed test's report shows the log of every gunicorn it started (running_server);
tests.support.ui - the admin pages' account, signed-in client and own-app-context requests;
tests.worker_apps.harness - a real gunicorn and real workers for the modules marked shared_server.
"""

from __future__ import annotations

import pytest

# The helpers assert too: their failures should read as clearly as a test's own.
pytest.register_assert_rewrite("tests.support", "tests.worker_apps")

from tests.support.database import JOB_TYPES, app_config, test_db_kind  # noqa: E402 - after the rewrite is registered

pytest_plugins = [
    "tests.support.database",
    "tests.support.fixtures",
    "tests.support.held_snapshot",
    "tests.support.pg_sessions",
    "tests.support.route_builders",
    "tests.support.server",
    "tests.support.ui",
    "tests.worker_apps.harness",
]

__all__ = ["JOB_TYPES", "app_config", "test_db_kind"]


def pytest_report_header(config):
    return f"queuelog database: {test_db_kind()}"
