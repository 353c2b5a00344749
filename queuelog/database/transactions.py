"""The connections the app asks for: a read, a write transaction, a single-statement read.

Every read and write of the app goes through one of these three, so the dialect details stay in
``engine`` (how SQLite begins each kind) and ``writers_lock`` (SQLite's writers taking turns); the
execution options below are how a connection tells the engine's "begin" hook which kind it is.
"""
from __future__ import annotations

import contextlib
import weakref

from flask import current_app
from sqlalchemy.engine import Engine

from ..extensions import db
from .writers_lock import sqlite_writers_turn

#: Execution option of a write transaction: on SQLite it begins IMMEDIATE, taking the write lock up front.
WRITE = "queuelog_write"
# A read made of one statement needs no BEGIN and ROLLBACK around it: a single SELECT is atomic on
# its own. On a hot path (the API-key lookup of every request) the pair costs more than the SELECT.
SINGLE_STATEMENT_READ = "queuelog_single_statement_read"


@contextlib.contextmanager
def read_connection():
    """A connection for reads that need no lock."""
    with db.engine.connect() as conn:
        yield conn


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
    busy_timeout_s = current_app.config["SQLITE_BUSY_TIMEOUT_MS"] / 1000
    with _writing(engine).connect() as conn, sqlite_writers_turn(engine, busy_timeout_s), conn.begin():
        yield conn


_writing_engines: weakref.WeakKeyDictionary[Engine, Engine] = weakref.WeakKeyDictionary()


def _writing(engine: Engine) -> Engine:
    """``engine`` with the write option set, made once: setting it on each connection cost ~20 µs a write."""
    writing = _writing_engines.get(engine)
    if writing is None:
        writing = _writing_engines[engine] = engine.execution_options(**{WRITE: True})
    return writing
