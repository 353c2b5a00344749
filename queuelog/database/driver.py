"""Sending SQL on a SQLAlchemy connection's own driver connection: same session, same transaction.

Here, in the database layer, because both sides need it: the engine and group commit send their
transaction control (BEGIN IMMEDIATE, SAVEPOINT, PRAGMA) this way, and sql/runner.py sends every named
statement through ``on_driver``.
"""

from __future__ import annotations

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError


def on_driver(conn: Connection, sql: str, params, work):
    """``work(cursor)`` with a cursor of ``conn``'s own driver connection: same session, same transaction.

    The driver's errors come out as SQLAlchemy's (OperationalError, IntegrityError, …), as every other
    statement's do, so the API's 503 and the enqueue's idempotency retry see them alike; a connection the
    driver reports broken is invalidated, as SQLAlchemy would, so the pool never hands it out again.
    (A plain try, not a context manager: this runs for every statement, BEGIN included.)
    """
    driver_connection = conn.connection.driver_connection
    cursor = driver_connection.cursor()
    try:
        return work(cursor)
    except conn.dialect.loaded_dbapi.Error as error:
        disconnected = conn.dialect.is_disconnect(error, driver_connection, cursor)
        if disconnected:
            conn.invalidate(error)
        raise DBAPIError.instance(
            sql,
            params,
            error,
            conn.dialect.loaded_dbapi.Error,
            connection_invalidated=disconnected,
            dialect=conn.dialect,
        ) from error
    finally:
        # Not contextlib.suppress: no context manager on this path. A cursor that cannot close holds nothing.
        try:  # noqa: SIM105
            cursor.close()
        except Exception:
            pass


def execute_plain(conn: Connection, sql: str) -> None:
    """Send one statement without parameters or results (BEGIN, say) on ``conn``'s driver connection."""
    on_driver(conn, sql, {}, lambda cursor: cursor.execute(sql))
