"""Engine set-up per dialect, applied once when the app starts.

SQLite is tuned on every new connection (WAL, busy timeout, synchronous, foreign keys) and told how
each kind of transaction begins; a pooled PostgreSQL connection that the server may have closed (its
socket has input waiting, or it sat idle long) is tested before use, because a database server can
restart under it. Everything here is an engine event listener:
the rest of the app asks ``transactions`` for connections and never sees these details.
"""

from __future__ import annotations

import select
import time

from flask import Flask
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DisconnectionError

from ..extensions import db
from .driver import execute_plain
from .transactions import PREPARED, SINGLE_STATEMENT_READ, WRITE


def configure_engine(app: Flask) -> None:
    """Apply per-dialect connection settings to the app's engine."""
    engine = db.engine
    if engine.dialect.name == "sqlite":
        _configure_sqlite(engine, app.config["SQLITE_BUSY_TIMEOUT_MS"], app.config["SQLITE_SYNCHRONOUS"])
    else:
        _configure_postgresql(engine, app.config["DATABASE_PREPARED_STATEMENTS"])
    if engine.dialect.name != "sqlite" and not app.config["SQLALCHEMY_ENGINE_OPTIONS"].get("pool_pre_ping"):
        # A SQLite file cannot go away under an open connection; a database server can restart
        # (unless the deployment asked SQLAlchemy to test every checkout itself).
        _ping_after_idle(engine, app.config["DATABASE_PING_AFTER_IDLE_SECONDS"])


def close_connections(app: Flask) -> None:
    """Close every pooled connection of the app's engines; the next use opens new ones."""
    with app.app_context():
        for engine in db.engines.values():
            engine.dispose()


def dialect_name() -> str:
    """The app's database dialect: "sqlite" or "postgresql"."""
    return db.engine.dialect.name


def _ping_after_idle(engine: Engine, idle_seconds: float) -> None:
    """Test a pooled connection before use when the server may have closed it while it sat in the pool.

    A test (a ping) is a round trip, and SQLAlchemy's pool_pre_ping would pay it on every checkout: two
    per API request (on PostgreSQL through gunicorn, a measurable share of the throughput). Whether one
    is needed, the connection's socket mostly tells for free: a server that restarts, or an admin's
    ``pg_terminate_backend``, sends its last message and closes the connection, so the socket has input
    waiting (nothing else arrives unasked on a pooled connection, which never LISTENs). Such a connection
    is tested, however recently it was used, and the failed test makes the pool hand out a fresh one.

    What leaves no trace on the socket (a firewall that dropped an idle connection, a server host that
    vanished) is caught by testing any connection that sat ``idle_seconds`` or more.
    """

    @event.listens_for(engine, "checkin")
    def _idle_from_now(_dbapi_connection, record):
        if record is not None:
            record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping_if_closed_or_idled(dbapi_connection, record, _proxy):
        idle_since = record.info.get(_IDLE_SINCE)
        if idle_since is None:
            return  # just connected
        if time.monotonic() - idle_since < idle_seconds and not _input_waiting(dbapi_connection):
            return  # the server has said nothing since the connection's last use: still there
        try:
            alive = engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as error:
            raise DisconnectionError(f"pooled connection failed its test: {error}") from error
        if not alive:
            raise DisconnectionError("pooled connection failed its test")


def _input_waiting(dbapi_connection) -> bool:
    """Has the server sent anything (or closed the connection) since we last read from it? No waiting."""
    try:
        poller = select.poll()
        poller.register(dbapi_connection.fileno(), select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))
    except Exception:  # noqa: BLE001 — closed on our side, or no socket to look at: let the test decide
        return True


_IDLE_SINCE = "queuelog_idle_since"


def _configure_postgresql(engine: Engine, prepared_statements: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):
        # History is a table a day (docs/storage.md). A grouping of finished jobs (the Top errors page) then
        # groups each day in its own index's order and merges the days' groups, as it groups the one index of
        # a single table; PostgreSQL's default hashes every row of every day instead.
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SET enable_partitionwise_aggregate = on")
        dbapi_connection.commit()
        if not prepared_statements:
            # A pooler that hands each transaction to any server connection cannot keep them.
            dbapi_connection.prepare_threshold = None

    if not prepared_statements:
        return

    # psycopg prepares a statement sent five times on a connection (the claim: sql/postgresql.py, CLAIM). A read
    # says for itself (transactions.read_connection): prepared at its first use, or never.
    @event.listens_for(engine, "do_execute")
    def _prepare_as_the_read_says(cursor, statement, parameters, context):
        prepared = context.execution_options.get(PREPARED)
        if prepared is None:
            return None
        cursor.execute(statement, parameters, prepare=prepared)
        return True


def _configure_sqlite(engine: Engine, busy_timeout_ms: int, synchronous: str) -> None:
    synchronous = synchronous.upper()
    if synchronous not in {"FULL", "NORMAL", "EXTRA"}:
        raise ValueError("QUEUELOG_SQLITE_SYNCHRONOUS must be FULL, NORMAL or EXTRA")

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):
        # Let SQLAlchemy, not the sqlite3 module, decide when transactions begin.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        # WAL lets readers and one writer work at once, so several server processes share a file.
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        # FULL: an acknowledged job survives power loss. NORMAL is faster and only risks the last commits.
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection):
        options = conn.get_execution_options()
        # A write transaction takes the write lock up front: a deferred one that reads first
        # and writes later can fail at once with SQLITE_BUSY instead of waiting its turn.
        # Sent on the driver: this runs for every transaction, and Core's execution set-up cost more than it.
        if options.get(WRITE):
            execute_plain(conn, "BEGIN IMMEDIATE")
        elif not options.get(SINGLE_STATEMENT_READ):
            execute_plain(conn, "BEGIN")
