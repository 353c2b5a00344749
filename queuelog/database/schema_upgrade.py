"""Bringing the schema up to date when a server process starts, one process at a time.

Several server processes start together on one database, so the Alembic upgrade runs under a lock
(a PostgreSQL advisory lock, or a file lock beside the SQLite file). A process that starts while the
database is down does not fail: it checks again before each request until the database answers.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import threading
from pathlib import Path

from flask import Flask
from sqlalchemy.exc import InterfaceError, OperationalError

from ..extensions import db
from .engine import dialect_name

log = logging.getLogger("queuelog")

MIGRATIONS_DIR = str(Path(__file__).resolve().parent.parent / "migrations")


def schema_is_current() -> bool:
    """True when the database carries the newest migration."""
    from alembic.runtime.migration import MigrationContext

    with db.engine.connect() as conn:
        current = set(MigrationContext.configure(conn).get_current_heads())
    return current == _newest_revisions()


@functools.cache
def _newest_revisions() -> frozenset[str]:
    """The head revisions of the migration scripts shipped with this code. Read once a process: Alembic
    parses every script to find them, and an app built again in the same process (tests, the
    CLI after the server) would pay it each time for the same answer."""
    from alembic.script import ScriptDirectory

    return frozenset(ScriptDirectory(MIGRATIONS_DIR).get_heads())


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
        log.warning(
            "the database is not answering at start-up (%s); the schema will be checked again on the next request",
            error.__class__.__name__,
        )
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
