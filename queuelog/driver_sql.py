"""The hot path's statements, written out per dialect and run on the database driver itself.

Nearly every request of the one-job-at-a-time path is an API-key lookup, an enqueue, a claim or a
complete. Through SQLAlchemy Core each such statement spent 100-150 µs setting up an execution
context and converting every value in and out (a SQLite claim: ~240 µs through Core, ~95 µs on the
driver, measured with NORMAL sync so the fsync does not hide it). Here those few statements are plain
SQL run on the DBAPI cursor of the caller's SQLAlchemy connection, so they take part in the same
transaction that ``write_transaction`` began and will commit. Every other statement stays on Core.

Each write here records its event row with it: on PostgreSQL in the same statement (a data-modifying
CTE, one round trip instead of two), on SQLite as a second statement in the same transaction.

Rows come back as :class:`JobRow` / :class:`KeyRow` (attribute access, like SQLAlchemy's ``Row``), with
times as aware UTC datetimes, exactly as the ``UTCDateTime`` column type hands them back.
"""
from __future__ import annotations

import contextlib
from collections import namedtuple
from datetime import datetime, timezone

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from .models import ApiKey, Job, UTCDateTime

JOB_COLUMNS = tuple(column.name for column in Job.__table__.c)
KEY_COLUMNS = tuple(column.name for column in ApiKey.__table__.c)
JobRow = namedtuple("JobRow", JOB_COLUMNS)
KeyRow = namedtuple("KeyRow", KEY_COLUMNS)

_EVENT_COLUMNS = "job_id, event, from_status, to_status, actor, attempt, error, at"


def _time_positions(table) -> tuple[int, ...]:
    return tuple(i for i, column in enumerate(table.c) if isinstance(column.type, UTCDateTime))


_JOB_TIMES = _time_positions(Job.__table__)
_KEY_TIMES = _time_positions(ApiKey.__table__)


class _Dialect:
    """What differs between the drivers: how a value is named in SQL, and how a time is stored."""

    name = ""

    def param(self, name: str) -> str:
        raise NotImplementedError

    def time_in(self, value: datetime | None):
        raise NotImplementedError

    def time_out(self, value) -> datetime | None:
        raise NotImplementedError

    def ids_in(self, column: str, name: str, values, params: dict) -> str:
        raise NotImplementedError

    def rows(self, cursor, make, times) -> list:
        out = []
        # The rows of one statement share most of their times (one transaction's "now"): convert each once.
        converted: dict = {None: None}
        for raw in cursor.fetchall():
            values = list(raw)
            for position in times:
                value = values[position]
                time = converted.get(value)
                if time is None and value is not None:
                    time = converted[value] = self.time_out(value)
                values[position] = time
            out.append(make(*values))
        return out


class _SQLite(_Dialect):
    name = "sqlite"

    def param(self, name: str) -> str:
        return f":{name}"

    def time_in(self, value):
        # The text SQLAlchemy's SQLite DateTime writes (always with microseconds): times are compared
        # as text in SQL, so both paths must write the same form.
        if value is None:
            return None
        v = value.astimezone(timezone.utc)
        # Not strftime: its %Y does not pad years before 1000 to four digits.
        return (f"{v.year:04d}-{v.month:02d}-{v.day:02d} "
                f"{v.hour:02d}:{v.minute:02d}:{v.second:02d}.{v.microsecond:06d}")

    def time_out(self, value):
        if value is None:
            return None
        return datetime.fromisoformat(value).replace(tzinfo=timezone.utc)

    def ids_in(self, column, name, values, params):
        names = []
        for i, value in enumerate(values):
            params[f"{name}{i}"] = value
            names.append(f":{name}{i}")
        return f"{column} IN ({', '.join(names)})"


class _PostgreSQL(_Dialect):
    name = "postgresql"

    def param(self, name: str) -> str:
        return f"%({name})s"

    def time_in(self, value):
        # Stored naive UTC, as UTCDateTime stores it.
        return None if value is None else value.astimezone(timezone.utc).replace(tzinfo=None)

    def time_out(self, value):
        return None if value is None else value.replace(tzinfo=timezone.utc)

    def ids_in(self, column, name, values, params):
        params[name] = list(values)
        return f"{column} = ANY(%({name})s)"


_DIALECTS = {"sqlite": _SQLite(), "postgresql": _PostgreSQL()}
JOB_LIST = ", ".join(JOB_COLUMNS)


@contextlib.contextmanager
def _driver_cursor(conn: Connection, sql: str, params: dict):
    """The DBAPI cursor of ``conn``'s own driver connection: same session, same transaction.

    The driver's errors come out as SQLAlchemy's (OperationalError, IntegrityError, …), as every other
    statement's do, so the API's 503 and the enqueue's idempotency retry see them alike; a connection the
    driver reports broken is invalidated, as SQLAlchemy would, so the pool never hands it out again.
    """
    dbapi = conn.dialect.loaded_dbapi
    cursor = conn.connection.driver_connection.cursor()
    try:
        yield cursor
    except dbapi.Error as error:
        disconnected = conn.dialect.is_disconnect(error, conn.connection.driver_connection, cursor)
        if disconnected:
            conn.invalidate(error)
        raise DBAPIError.instance(sql, params, error, dbapi.Error, connection_invalidated=disconnected,
                                  dialect=conn.dialect) from error
    finally:
        with contextlib.suppress(Exception):
            cursor.close()


def execute_plain(conn: Connection, sql: str) -> None:
    """Send one statement without parameters or results (BEGIN, say) on ``conn``'s driver connection."""
    with _driver_cursor(conn, sql, {}) as cursor:
        cursor.execute(sql)


# --- API keys -----------------------------------------------------------------------------------

def find_key(conn: Connection, digest: str) -> KeyRow | None:
    """The key row with this digest (live or revoked), or None."""
    dialect = _DIALECTS[conn.dialect.name]
    sql = f"SELECT {', '.join(KEY_COLUMNS)} FROM api_keys WHERE digest = {dialect.param('digest')}"
    params = {"digest": digest}
    with _driver_cursor(conn, sql, params) as cursor:
        cursor.execute(sql, params)
        rows = dialect.rows(cursor, KeyRow, _KEY_TIMES)
    return rows[0] if rows else None


# --- job writes, each with its event ------------------------------------------------------------

class JobWrite:
    """One job statement with RETURNING, and the event row each returned job gets in the log."""

    def __init__(self, conn: Connection):
        self.dialect = _DIALECTS[conn.dialect.name]
        self.conn = conn

    def sql(self, statement: str, ctes: str = "") -> str:
        """The SQL sent for ``statement``: on PostgreSQL wrapped so that it also writes the events.

        ``ctes`` (PostgreSQL only) are named subqueries the statement reads, ``name AS (...)``.
        """
        if self.dialect.name != "postgresql":
            assert not ctes, "SQLite statements are written without CTEs"
            return statement
        p = self.dialect.param
        return (f"WITH {ctes + ', ' if ctes else ''}changed AS ({statement}), "
                f"logged AS (INSERT INTO job_events ({_EVENT_COLUMNS}) "
                f"SELECT id, {p('ev_event')}, {p('ev_from')}, status, {p('ev_actor')}, retry_count, NULL, "
                f"{p('ev_at')} FROM changed) "
                f"SELECT {JOB_LIST} FROM changed")

    def event_params(self, event: str, from_status: str | None, actor: str, at: datetime) -> dict:
        """The values of the event row each written job gets."""
        return {"ev_event": event, "ev_from": from_status, "ev_actor": actor, "ev_at": self.dialect.time_in(at)}

    def run(self, statement: str, params: dict | list, event: str, from_status: str | None, actor: str,
            at: datetime) -> list[JobRow]:
        """Run ``statement`` (its RETURNING lists every job column) and record ``event`` per row."""
        events = self.event_params(event, from_status, actor, at)
        if self.dialect.name == "postgresql":
            return self.execute(self.sql(statement), {**params, **events}, events)
        return self.execute(statement, params, events)

    def execute(self, sql: str, params: dict | list, events: dict) -> list[JobRow]:
        """Send ``sql``; on SQLite the event rows (``events``' values) follow as a second statement."""
        with _driver_cursor(self.conn, sql, params) as cursor:
            cursor.execute(sql, params)
            rows = self.dialect.rows(cursor, JobRow, _JOB_TIMES)
            if rows and self.dialect.name != "postgresql":
                cursor.executemany(
                    f"INSERT INTO job_events ({_EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, NULL, ?)",
                    [(row.id, events["ev_event"], events["ev_from"], row.status, events["ev_actor"],
                      row.retry_count, events["ev_at"]) for row in rows])
        return rows


def insert_jobs(conn: Connection, rows: list[dict], actor: str, at: datetime) -> list[JobRow]:
    """INSERT pending jobs with one statement, and an 'enqueued' event each; the jobs come back in the
    order of ``rows``. Each of ``rows`` names the same columns (every column but ``id`` and the ones
    that start empty)."""
    write = JobWrite(conn)
    dialect = write.dialect
    columns = list(rows[0])
    times = {JOB_COLUMNS[position] for position in _JOB_TIMES}
    values = [dialect.time_in(job[name]) if name in times else job[name] for job in rows for name in columns]
    if dialect.name == "sqlite":
        # Positional values: SQLite finds a named one by scanning the statement's list of names, so a
        # 500-job batch (7,000 names) took 72 ms to bind instead of 0.5 ms.
        params: dict | list = values
        tuples = ["(" + ", ".join(["?"] * len(columns)) + ")"] * len(rows)
    else:
        # Named, because the statement that also logs the events names its own values.
        params = {f"v{i}": value for i, value in enumerate(values)}
        width = len(columns)
        tuples = ["(" + ", ".join(dialect.param(f"v{n * width + i}") for i in range(width)) + ")"
                  for n in range(len(rows))]
    statement = f"INSERT INTO jobs ({', '.join(columns)}) VALUES {', '.join(tuples)} RETURNING {JOB_LIST}"
    inserted = write.run(statement, params, "enqueued", None, actor, at)
    # One INSERT numbers its rows in VALUES order (ids only grow), whatever order RETURNING lists them in.
    return sorted(inserted, key=lambda row: row.id)


def complete_held(conn: Connection, ids: list[int], worker: str, token: str, result: str | None,
                  now: datetime, actor: str) -> list[JobRow]:
    """running → completed for the listed jobs this worker holds under ``token``; the others stay."""
    write = JobWrite(conn)
    dialect, p = write.dialect, write.dialect.param
    params = {"worker": worker, "token": token, "result": result, "now": dialect.time_in(now)}
    statement = (
        f"UPDATE jobs SET status = 'completed', completed_at = {p('now')}, updated_at = {p('now')}, "
        f"claim_token = NULL, lease_expires_at = NULL, result = {p('result')} "
        f"WHERE {dialect.ids_in('id', 'ids', ids, params)} AND status = 'running' "
        f"AND worker_id = {p('worker')} AND claim_token = {p('token')} RETURNING {JOB_LIST}")
    return write.run(statement, params, "completed", "running", actor, now)
