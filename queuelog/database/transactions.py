"""The connections the app asks for: a read, a write transaction, a single-statement read and write.

Every read and write of the app goes through one of these, so the dialect details stay in
``engine`` (how SQLite begins each kind), ``writers_lock`` (SQLite's writers taking turns) and
``group_commit`` (a process's writes that arrive together sharing one commit); the execution options
below are how a connection tells the engine's "begin" hook which kind it is.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref

from flask import current_app
from sqlalchemy import literal
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from ..extensions import db
from .group_commit import committer_for
from .writers_lock import sqlite_writers_turn

#: Execution option of a write transaction: on SQLite it begins IMMEDIATE, taking the write lock up front.
WRITE = "queuelog_write"
# A read made of one statement needs no BEGIN and ROLLBACK around it: a single SELECT is atomic on
# its own. On a hot path (the API-key lookup of every request) the pair costs more than the SELECT.
SINGLE_STATEMENT_READ = "queuelog_single_statement_read"
#: Execution option of a read: whether its statements are prepared on PostgreSQL (``read_connection``, engine.py).
PREPARED = "queuelog_prepared"


@contextlib.contextmanager
def read_connection(*, prepared: bool = False, one_snapshot: bool = False):
    """A connection for reads that need no lock.

    ``prepared``: on PostgreSQL each statement is prepared on the connection and planned once there, instead of
    at every use. For reads whose best plan is the same whatever values they are given (a job by id, the newest
    jobs of a status): over history's table a day, planning them costs more than running them (docs/storage.md).
    Any other read is planned for its values at every use, however often it is sent: a search by text, whose
    best plan depends on its text.

    ``one_snapshot``: every statement sees the database as the first one saw it (REPEATABLE READ on PostgreSQL,
    whose reads otherwise see each statement's moment; SQLite's read transaction already does), for a read
    whose statements must agree with each other.
    """
    with db.engine.connect() as conn:
        conn.execution_options(**{PREPARED: prepared})
        if one_snapshot and conn.dialect.name == "postgresql":
            # Sent as it is: preparing it would save nothing.
            conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", execution_options={PREPARED: False})
        yield conn
        if conn.dialect.name == "postgresql":
            # The same as a rollback, for reads; but psycopg forgets every statement prepared on the connection
            # at a rollback, and would prepare them again at the next use.
            conn.commit()


def inline(value, type_=None):
    """``value`` written into the statement rather than sent as a parameter, for a ``prepared`` read: PostgreSQL
    plans a prepared statement once for all its uses only when it knows what no parameter could change (a LIMIT,
    a status the code fixes)."""
    return literal(value, type_, literal_execute=True)


@contextlib.contextmanager
def single_statement_read():
    """A connection for exactly one SELECT, run outside any explicit transaction."""
    engine = db.engine
    if engine.dialect.name == "postgresql":
        with _autocommitted(engine) as conn:
            yield conn
        return
    with engine.connect() as conn:
        conn.execution_options(**{SINGLE_STATEMENT_READ: True})
        yield conn


def write_transaction():
    """A connection in a transaction that commits on success; on SQLite it holds the write lock.

    Leaving the block returns only once the commit is on disk. With group commit on (the default on
    SQLite), the commit may be shared with other threads' writes of this process (``group_commit``).
    """
    engine = db.engine
    config = current_app.config
    busy_timeout_s = config["SQLITE_BUSY_TIMEOUT_MS"] / 1000
    if group_commit_applies(engine, config["GROUP_COMMIT"]):
        committer = committer_for(
            engine,
            _writing(engine),
            config["GROUP_COMMIT_MAX_MEMBERS"],
            wal_path=_wal_synced_after_commit(engine, config["SQLITE_SYNCHRONOUS"]),
        )
        if not committer.inside_a_body():
            return committer.transaction(busy_timeout_s)
    return _own_transaction(engine, busy_timeout_s)


def single_statement_write():
    """A connection for a write that is one statement on PostgreSQL (reads after it may follow, none it
    depends on), and needs no lock taken before it.

    On PostgreSQL (without group commit) the statement runs outside an explicit transaction, as its own: one
    round trip instead of three (BEGIN, the statement, COMMIT). It is as atomic and as durable as in a block:
    the driver returns only once the server says it is ready for the next query, which it says after the
    commit is flushed, so no answer goes out before it. Elsewhere it is a write transaction (SQLite's write
    lock, group commit).
    """
    if statements_commit_alone():
        return _autocommitted(db.engine)
    return write_transaction()


def statements_commit_alone() -> bool:
    """Is ``single_statement_write`` a statement committed on its own here (PostgreSQL without group commit),
    rather than a write transaction?"""
    engine = db.engine
    return engine.dialect.name == "postgresql" and not group_commit_applies(engine, current_app.config["GROUP_COMMIT"])


@contextlib.contextmanager
def _autocommitted(engine: Engine):
    """A PostgreSQL connection whose every statement is its own transaction (reset when it goes back to the pool)."""
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        yield conn


def group_commit_applies(engine: Engine, setting: str) -> bool:
    """Does the GROUP_COMMIT setting ("auto", "on" or "off") group ``engine``'s writes?

    auto leaves PostgreSQL out: measured through the production command (``python -m bench.group_commit
    --postgresql``), grouping there gained nothing: PostgreSQL already flushes the WAL
    of concurrent commits together, and a group makes a process's writes take turns that PostgreSQL
    would run side by side, with two more round trips (SAVEPOINT, RELEASE) a member.
    """
    if setting == "auto":
        return engine.dialect.name == "sqlite"
    return setting == "on"


def _wal_synced_after_commit(engine: Engine, synchronous: str) -> str | None:
    """The WAL a group syncs itself after the writers' turn: a SQLite file's at FULL (NORMAL never
    syncs at commit, EXTRA asks for more than the WAL); None: each COMMIT syncs as configured."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or synchronous.upper() != "FULL":
        return None
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return database + "-wal"


@contextlib.contextmanager
def _own_transaction(engine: Engine, busy_timeout_s: float):
    """A transaction of this thread alone, committed when the block ends."""
    # The pool checkout and check-in (with its reset) stay outside the writers' turn: every
    # microsecond inside it is one every other writer of the database waits.
    with _writing(engine).connect() as conn, sqlite_writers_turn(engine, busy_timeout_s), conn.begin():
        yield conn


_writing_engines: weakref.WeakKeyDictionary[Engine, Engine] = weakref.WeakKeyDictionary()


def _writing(engine: Engine) -> Engine:
    """``engine`` with the write option set, made once: setting it on each connection was a cost every write paid."""
    writing = _writing_engines.get(engine)
    if writing is None:
        writing = _writing_engines[engine] = engine.execution_options(**{WRITE: True})
    return writing


#: How many times ``retried_when_moved`` runs its function in all.
MOVED_ATTEMPTS = 5
_retrying = threading.local()


def retried_when_moved(function):
    """Run ``function`` again when PostgreSQL refused one of its writes because a concurrent transaction moved
    the row to another partition of ``jobs`` (a job that finished, or came back from history, under it).

    Where a job's row stays in one table, PostgreSQL re-reads the row as the other transaction left it and
    the statement's own conditions decide (a complete finds the job no longer held). A row that changed
    table cannot be re-read that way: the statement fails with a serialization failure instead, and its
    transaction is void. Run again, the function sees the row where it is now and decides as it would have.
    Only the outermost such function retries: inside it, the transaction to run again is its.
    """

    @functools.wraps(function)
    def retrying(*args, **kwargs):
        if getattr(_retrying, "inside", False):
            return function(*args, **kwargs)
        _retrying.inside = True
        try:
            for attempt in range(1, MOVED_ATTEMPTS + 1):
                try:
                    return function(*args, **kwargs)
                except DBAPIError as error:
                    if attempt == MOVED_ATTEMPTS or not moved_concurrently(error):
                        raise
        finally:
            _retrying.inside = False
        raise AssertionError("unreachable")

    return retrying


def moved_concurrently(error: DBAPIError) -> bool:
    """Is ``error`` PostgreSQL's refusal to update or lock a row another transaction moved between partitions?"""
    cause = error.orig
    return getattr(cause, "sqlstate", None) == "40001" and "moved to another partition" in str(cause)
