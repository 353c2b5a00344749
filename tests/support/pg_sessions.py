"""A failed test's report shows what the sessions of the suite's PostgreSQL server were doing when it failed.

A request that timed out leaves no line in its server's log (it is still running); here its statement shows,
with how long it has run, what it waits for (a lock, and which sessions hold it) and every transaction left
open. Nothing shows when no session is busy, or when the tests run on SQLite.
"""

from __future__ import annotations

import contextlib

import pytest

#: The PostgreSQL servers of this test process (``database.postgres_server_url``).
_servers: list[str] = []

_BUSY_SESSIONS = r"""
SELECT pid, application_name, state, wait_event_type, wait_event, pg_blocking_pids(pid) AS blocked_by,
       round(extract(epoch FROM now() - xact_start)::numeric, 1) AS transaction_s,
       round(extract(epoch FROM now() - query_start)::numeric, 1) AS statement_s,
       left(regexp_replace(query, '\s+', ' ', 'g'), 240) AS statement
  FROM pg_stat_activity
 WHERE pid <> pg_backend_pid() AND backend_type = 'client backend' AND state IS DISTINCT FROM 'idle'
 ORDER BY xact_start NULLS LAST
"""


@contextlib.contextmanager
def shown_on_failure(url: str):
    """Inside the block, the report of a failed test shows ``url``'s busy sessions."""
    _servers.append(url)
    try:
        yield
    finally:
        _servers.remove(url)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and report.when == "call":
        for url in _servers:
            shown = busy_sessions(url)
            if shown:
                report.sections.append(("PostgreSQL sessions when the test failed", shown))


def busy_sessions(url: str) -> str:
    """The sessions of ``url``'s server that are not idle, a line each ("" when none)."""
    import psycopg

    try:
        with psycopg.connect(url.replace("+psycopg", ""), autocommit=True, connect_timeout=5) as conn:
            cursor = conn.execute(_BUSY_SESSIONS)
            names = [column.name for column in cursor.description]
            rows = [zip(names, row, strict=True) for row in cursor]
            return "\n".join(" ".join(f"{name}={value}" for name, value in row) for row in rows)
    except Exception as exc:  # noqa: BLE001 - a report must not fail for want of its appendix
        return f"(could not read the sessions: {exc.__class__.__name__}: {exc})"
