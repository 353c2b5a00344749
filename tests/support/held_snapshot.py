"""What holds back PostgreSQL's vacuum, made for real: a session as a forgotten console would leave it (a
second connection in ``BEGIN ISOLATION LEVEL REPEATABLE READ`` that has taken its snapshot and keeps it until it
is closed), and a prepared transaction that nobody commits.

A pytest plugin (``pytest_plugins`` in tests/conftest.py). Whatever the test did, ``hold_snapshot`` closes every
connection it opened when the test ends (closing ends the transaction), and ``prepare_transaction`` rolls back
what it prepared: a prepared transaction outlives its session, and would hold vacuum back for the rest of the run.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import pytest


def _conninfo(database_url: str) -> str:
    """psycopg's connection string for the test's SQLAlchemy URL."""
    from sqlalchemy.engine import make_url

    return make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)


#: The application_name the held session gives itself, so a test can find it named.
HOLDER = "nightly-report-console"
#: The name the prepared transaction is given.
PREPARED_GID = "queuelog-tests-forgotten-two-phase"


def analyzed_live_table() -> None:
    """As autovacuum does after every thousand changes: the live table analyzed while the snapshot is held. Its few
    live rows are all the statistics then see, and the planner costs every index of it alike."""
    from queuelog.extensions import db

    with db.engine.connect() as conn:
        conn.exec_driver_sql("ANALYZE jobs_live")
        conn.commit()


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

    opened: list = []
    conninfo = _conninfo(database_url)

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


class PreparedTransaction(NamedTuple):
    """A transaction prepared for two-phase commit, left so: no session holds it any more."""

    gid: str
    prepared: float  # time.monotonic() just before its PREPARE TRANSACTION


@pytest.fixture
def prepare_transaction(database_url):
    """prepare_transaction() → a PreparedTransaction named PREPARED_GID (skips the test on a server that allows
    none: max_prepared_transactions = 0, as on an external QUEUELOG_TEST_PG_URL by default)."""
    import psycopg

    conninfo = _conninfo(database_url)
    prepared: list[str] = []

    def _prepare() -> PreparedTransaction:
        with psycopg.connect(conninfo) as conn:  # not autocommit: the SELECT begins the transaction
            if int(conn.execute("SHOW max_prepared_transactions").fetchone()[0]) == 0:
                pytest.skip("this PostgreSQL server allows no prepared transactions")
            conn.execute("SELECT 1")
            at = time.monotonic()
            conn.execute(f"PREPARE TRANSACTION '{PREPARED_GID}'")
            prepared.append(PREPARED_GID)
        return PreparedTransaction(PREPARED_GID, at)

    yield _prepare
    if prepared:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            for gid in prepared:
                conn.execute(f"ROLLBACK PREPARED '{gid}'")
