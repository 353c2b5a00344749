"""Engine set-up per dialect, write transactions, and bringing the schema up to date."""
from __future__ import annotations

import contextlib
import fcntl
import itertools
import logging
import os
import threading
import time
import weakref
from pathlib import Path

from flask import Flask, current_app
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError

from . import driver_sql
from .extensions import db

log = logging.getLogger("queuelog")


def configure_engine(app: Flask) -> None:
    """Apply per-dialect connection settings to the app's engine."""
    engine = db.engine
    if engine.dialect.name == "sqlite":
        _configure_sqlite(engine, app.config["SQLITE_BUSY_TIMEOUT_MS"], app.config["SQLITE_SYNCHRONOUS"])
    elif not app.config["SQLALCHEMY_ENGINE_OPTIONS"].get("pool_pre_ping"):
        # A SQLite file cannot go away under an open connection; a database server can restart
        # (unless the deployment asked SQLAlchemy to test every checkout itself).
        _ping_after_idle(engine, app.config["DATABASE_PING_AFTER_IDLE_SECONDS"])


def _ping_after_idle(engine: Engine, idle_seconds: float) -> None:
    """Test a pooled connection before use when it has sat idle ``idle_seconds`` or more.

    SQLAlchemy's pool_pre_ping tests every checkout: a round trip per checkout, two per API request
    (measured on PostgreSQL through gunicorn: 4-11% more jobs/s without it). A connection checked
    out again within a second was just working, so that test tells nothing new; one that idled may
    have been cut by a restart, and a failed test makes the pool hand out a fresh one instead.
    """

    @event.listens_for(engine, "checkin")
    def _idle_from_now(_dbapi_connection, record):
        if record is not None:
            record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping_if_idled(dbapi_connection, record, _proxy):
        idle_since = record.info.get(_IDLE_SINCE)
        if idle_since is None or time.monotonic() - idle_since < idle_seconds:
            return  # just connected, or back from work a moment ago
        try:
            alive = engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as error:
            raise DisconnectionError(f"pooled connection failed its test: {error}") from error
        if not alive:
            raise DisconnectionError("pooled connection failed its test")


_IDLE_SINCE = "queuelog_idle_since"


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
        if options.get("queuelog_write"):
            driver_sql.execute_plain(conn, "BEGIN IMMEDIATE")
        elif not options.get(SINGLE_STATEMENT_READ):
            driver_sql.execute_plain(conn, "BEGIN")


# A read made of one statement needs no BEGIN and ROLLBACK around it: a single SELECT is atomic on
# its own. On a hot path (the API-key lookup of every request) the pair costs more than the SELECT.
SINGLE_STATEMENT_READ = "queuelog_single_statement_read"


@contextlib.contextmanager
def single_statement_read():
    """A connection for exactly one SELECT, run outside any explicit transaction."""
    with db.engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            conn.execution_options(isolation_level="AUTOCOMMIT")
        else:
            conn.execution_options(**{SINGLE_STATEMENT_READ: True})
        yield conn


@contextlib.contextmanager
def write_transaction():
    """A connection in a transaction that commits on success; on SQLite it holds the write lock."""
    engine = db.engine
    # The pool checkout and check-in (with its reset) stay outside the writers' turn: every
    # microsecond inside it is one every other writer of the database waits.
    with _writing(engine).connect() as conn:
        with _sqlite_writers_turn(engine, current_app.config["SQLITE_BUSY_TIMEOUT_MS"] / 1000):
            with conn.begin():
                yield conn


_writing_engines: "weakref.WeakKeyDictionary[Engine, Engine]" = weakref.WeakKeyDictionary()


def _writing(engine: Engine) -> Engine:
    """``engine`` with the write option set, made once: setting it on each connection cost ~20 µs a write."""
    writing = _writing_engines.get(engine)
    if writing is None:
        writing = _writing_engines[engine] = engine.execution_options(queuelog_write=True)
    return writing


_writer_state = threading.local()
# Waits between tries for the writers' file lock: short, because a write transaction takes ~1 ms.
_WRITER_POLL_SECONDS = (0.0002, 0.0005, 0.001, 0.002)


@contextlib.contextmanager
def _sqlite_writers_turn(engine: Engine, busy_timeout_s: float):
    """SQLite: take turns on a file lock next to the database before BEGIN IMMEDIATE.

    SQLite's busy handler sleeps in steps of up to 100 ms while another process holds the write
    lock, so under contention from several server processes the lock sits idle while waiters
    sleep (5,000 claim+complete pairs through 4 gunicorn workers took 91 s). Polling this file lock
    every ≤2 ms hands the turn over within a millisecond. It only orders writers: SQLite's own lock
    still guarantees correctness, so after the busy timeout a waiter proceeds without the turn
    (and then gets SQLite's "database is locked", a 503). Threads of one process wait here too.
    """
    path = _writers_lock_path(engine)
    if path is None or getattr(_writer_state, "holding", False):
        yield  # not SQLite, or a nested write in this thread: SQLite's lock alone decides
        return
    deadline = time.monotonic() + busy_timeout_s
    handle = _lock_handle(path)
    if handle is None:
        yield  # e.g. the database's directory is gone: let SQLite report it (a 503)
        return
    acquired = _poll_flock(handle, deadline)
    _writer_state.holding = True
    try:
        yield
    finally:
        _writer_state.holding = False
        if acquired:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _lock_handle(path: str):
    """This thread's open handle on the lock file, opened once rather than on every write.

    One handle per thread and process: flock belongs to the open file, so two threads sharing a
    handle (or a child sharing its parent's after fork) would both think they hold the lock. Only the
    last database's handle is kept (a server uses one; a test run makes hundreds).
    """
    held = getattr(_writer_state, "lock_file", None)  # (pid, path, handle)
    if held is not None and held[:2] == (os.getpid(), path):
        return held[2]
    if held is not None:
        held[2].close()  # another database's, or the parent's copy after fork (closing a copy releases nothing)
    _writer_state.lock_file = None
    try:
        handle = open(path, "a")
    except OSError:
        return None
    _writer_state.lock_file = (os.getpid(), path, handle)
    return handle


def _poll_flock(handle, deadline: float) -> bool:
    for attempt in itertools.count():
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(_WRITER_POLL_SECONDS[min(attempt, len(_WRITER_POLL_SECONDS) - 1)])
    return False  # unreachable: count() never ends


def _writers_lock_path(engine: Engine) -> str | None:
    if engine.dialect.name != "sqlite":
        return None
    database = engine.url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return database + ".writers-lock"


@contextlib.contextmanager
def read_connection():
    """A connection for reads that need no lock."""
    with db.engine.connect() as conn:
        yield conn


def dialect_name() -> str:
    return db.engine.dialect.name


# --- schema -----------------------------------------------------------------------------------

MIGRATIONS_DIR = str(Path(__file__).resolve().parent / "migrations")


def schema_is_current() -> bool:
    """True when the database carries the newest migration."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    script = ScriptDirectory(MIGRATIONS_DIR)
    with db.engine.connect() as conn:
        current = set(MigrationContext.configure(conn).get_current_heads())
    return current == set(script.get_heads())


def ensure_schema(app: Flask) -> None:
    """Create or upgrade the schema unless it is current; one process at a time does the work.

    If the database cannot be reached at start-up, the process starts anyway and checks again on
    each request until it can (answering 503 meanwhile): gunicorn stops the whole server when one
    worker fails to boot, so a worker restarted during a database outage would otherwise take every
    other worker down with it.
    """
    try:
        _upgrade_unless_current(app)
    except (OperationalError, InterfaceError) as error:
        log.warning("the database is not answering at start-up (%s); the schema will be checked "
                    "again on the next request", error.__class__.__name__)
        _check_schema_before_requests(app)


def _check_schema_before_requests(app: Flask) -> None:
    pending = threading.Event()
    pending.set()
    lock = threading.Lock()

    @app.before_request
    def _schema_check_deferred_at_start_up():
        if not pending.is_set():
            return
        with lock:
            if pending.is_set():
                _upgrade_unless_current(app)  # still down: the error becomes a 503
                pending.clear()
                log.info("the database answers again; its schema is current")


def _upgrade_unless_current(app: Flask) -> None:
    if schema_is_current():
        return
    with _migration_lock(app):
        if schema_is_current():
            return
        from flask_migrate import upgrade

        global _upgrading_in_process
        _upgrading_in_process = True
        try:
            upgrade(directory=MIGRATIONS_DIR)
        finally:
            _upgrading_in_process = False


_upgrading_in_process = False


def upgrading_in_process() -> bool:
    """True while the app upgrades its own schema at start-up (Alembic must then leave logging alone)."""
    return _upgrading_in_process


@contextlib.contextmanager
def _migration_lock(app: Flask):
    """Serialise schema upgrades between the server processes that start together."""
    if dialect_name() == "postgresql":
        with db.engine.connect() as conn:
            conn.exec_driver_sql("SELECT pg_advisory_lock(727274)")
            try:
                yield
            finally:
                conn.exec_driver_sql("SELECT pg_advisory_unlock(727274)")
                conn.commit()
        return
    database = db.engine.url.database
    if database and database != ":memory:":
        lock_path = Path(database + ".migrate-lock")
    else:
        os.makedirs(app.instance_path, exist_ok=True)
        lock_path = Path(app.instance_path) / "migrate.lock"
    with open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)

