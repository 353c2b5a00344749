"""A session that holds back PostgreSQL's vacuum, as a forgotten console would: a second real connection in
``BEGIN ISOLATION LEVEL REPEATABLE READ`` that has taken its snapshot and keeps it until it is closed.

A pytest plugin (``pytest_plugins`` in tests/conftest.py): the ``hold_snapshot`` fixture closes every
connection it opened when the test ends, whatever the test did (closing ends the transaction).
"""

from __future__ import annotations

import time
from typing import NamedTuple

import pytest

#: The application_name the held session gives itself, so a test can find it named.
HOLDER = "nightly-report-console"


class HeldSnapshot(NamedTuple):
    """A second session in an open REPEATABLE READ transaction, as its own server process sees itself."""

    pid: int
    client_addr: str | None  # None over a Unix socket
    begun: float  # time.monotonic() just before its BEGIN
    taken: float  # time.monotonic() once its snapshot was taken

    def held_for(self) -> float:
        """Seconds it has certainly been open: since its snapshot was taken (the BEGIN was earlier still)."""
        return time.monotonic() - self.taken

    def wait_until_held_for(self, seconds: float) -> None:
        """Let ``seconds`` pass since the snapshot was taken: what is tested is an age, so time must pass."""
        time.sleep(max(0.0, seconds - self.held_for()))


@pytest.fixture
def hold_snapshot(database_url):
    """hold_snapshot() → a HeldSnapshot on the test's PostgreSQL database, named HOLDER."""
    import psycopg
    from sqlalchemy.engine import make_url

    opened: list = []
    conninfo = make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)

    def _hold() -> HeldSnapshot:
        conn = psycopg.connect(conninfo, application_name=HOLDER, autocommit=True)
        opened.append(conn)
        begun = time.monotonic()
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        pid, client_addr = conn.execute("SELECT pg_backend_pid(), host(inet_client_addr())").fetchone()
        return HeldSnapshot(pid, client_addr, begun, time.monotonic())

    yield _hold
    for conn in opened:
        conn.close()
