"""PostgreSQL's days of history (docs/storage.md): which there are, making the next ones, dropping old ones.

``jobs_done`` (the finished jobs, by ``updated_at``) and ``job_events`` (by ``bucket``, the time the row was
written) are each made of one table a day, a default table for a row no day holds (a clock far off), and the
tables the upgrade to this layout attached as they were (``jobs_before``, ``job_events_before``).

Off the hot path (retention runs a step a minute), so plain SQL on SQLAlchemy's connection. Every DDL here
waits at most LOCK_TIMEOUT for its lock: a day made or dropped a minute later costs nothing, while a DDL
waiting behind a long reader would hold up every claim queued behind it.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import NamedTuple

from sqlalchemy.engine import Connection

from . import common

LOCK_TIMEOUT = "200ms"
DAY = timedelta(days=1)

#: The two partitioned tables of history: (table, its partition key).
JOBS, EVENTS = ("jobs_done", "updated_at"), ("job_events", "bucket")

#: What a day of finished jobs has of its own (the indexes shared by every job are made on ``jobs``, so on
#: each new day by PostgreSQL itself): ids for the job page, idempotency keys and schedule ticks for lookups.
_JOB_DAY_INDEXES = (
    "ALTER TABLE {name} ADD PRIMARY KEY (id)",
    "CREATE INDEX {name}_idempotency ON {name} (producer_key_id, idempotency_key)",
    "CREATE INDEX {name}_schedule_tick ON {name} (schedule, scheduled_for)",
)
_EVENT_DAY_INDEXES = ("ALTER TABLE {name} ADD PRIMARY KEY (id)",)

#: A day is written once, row by row as jobs finish, and then only read: vacuum it early for the visibility map,
#: so that counts over it (the pages' figures) stay index-only scans.
DAY_STORAGE = "autovacuum_vacuum_insert_scale_factor = 0.02"

_BOUND = re.compile(r"FROM \((.+?)\) TO \((.+?)\)")


class Day(NamedTuple):
    """One partition of history: its table and the range of its key, [lower, upper); lower None: MINVALUE."""

    name: str
    lower: datetime | None
    upper: datetime


def days(conn: Connection, table: tuple[str, str]) -> list[Day]:
    """The ranged partitions of ``table``, oldest first (its default partition is not one)."""
    rows = conn.exec_driver_sql(
        "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = to_regclass(%(table)s)",
        {"table": table[0]},
    ).all()
    found = []
    for name, bound in rows:
        match = _BOUND.search(bound or "")
        if match:
            found.append(Day(name, _moment(match.group(1)), _moment(match.group(2))))
    return sorted(found, key=lambda day: day.upper)


def is_partitioned(conn: Connection) -> bool:
    """Has this database the layout of live jobs and days of history (migration d9f4b2c6a8e1)?"""
    return conn.exec_driver_sql("SELECT to_regclass('jobs_done') IS NOT NULL").scalar()


def make_day(conn: Connection, table: tuple[str, str], lower: datetime, upper: datetime) -> str:
    """Make the partition of ``table`` for [lower, upper). Rows of that range that went to the default partition
    (none, unless a clock was far off) move into it: PostgreSQL refuses a new range that rows of the default
    partition fall in."""
    parent, key = table
    starts_at_midnight = lower == lower.replace(hour=0, minute=0, second=0, microsecond=0)
    name = f"{parent}_{lower:%Y%m%d}" if starts_at_midnight else f"{parent}_{lower:%Y%m%d_%H%M%S}"
    values = {"lower": lower, "upper": upper}
    set_lock_timeout(conn)
    conn.exec_driver_sql(f"CREATE TEMP TABLE moving (LIKE {parent}) ON COMMIT DROP")
    conn.exec_driver_sql(
        f"WITH moved AS (DELETE FROM {parent}_default WHERE {key} >= %(lower)s AND {key} < %(upper)s RETURNING *)"
        " INSERT INTO moving SELECT * FROM moved",
        values,
    )
    # DDL takes no bound values: the bounds are written in, as the timestamps they are.
    conn.exec_driver_sql(
        f"CREATE TABLE {name} PARTITION OF {parent} FOR VALUES FROM ({_literal(lower)}) TO ({_literal(upper)})"
        f" WITH ({DAY_STORAGE})"
    )
    for statement in _JOB_DAY_INDEXES if table == JOBS else _EVENT_DAY_INDEXES:
        conn.exec_driver_sql(statement.format(name=name))
    conn.exec_driver_sql(f"INSERT INTO {parent} SELECT * FROM moving")
    conn.exec_driver_sql("DROP TABLE moving")
    return name


def holds_needed_parent(conn: Connection, day: Day) -> bool:
    """Does the day of finished jobs ``day`` hold a parent that a live job still depends on (and reads)?"""
    return conn.exec_driver_sql(
        f"SELECT EXISTS (SELECT 1 FROM job_dependencies d JOIN {day.name} p ON p.id = d.parent_id"
        "  JOIN jobs_live c ON c.id = d.child_id)"
    ).scalar()


def drop_days(conn: Connection, job_days: list[Day], event_days: list[Day]) -> tuple[int, int]:
    """Drop ``job_days`` of finished jobs and ``event_days`` of events, in the caller's transaction: (jobs,
    events) they held.

    Before they go: an event of a job that is kept (live, or finished after these days) moves to today, or past
    the last day that goes if that is later (its ``bucket`` changes; nothing a reader sees). The workflow edges
    and dedupe slots of the jobs that go are deleted, as the foreign keys' cascade did. The days are locked first
    (SHARE: reads go on, nobody writes them), so no job comes back from them (an admin's retry) between the
    check and the drop.

    Each of these steps reads by index what it changes, never a whole day: a day can hold millions of rows, and
    every claim that needs a lock on ``jobs`` waits for this transaction.
    """
    set_lock_timeout(conn)
    for day in [*job_days, *event_days]:
        conn.exec_driver_sql(f"LOCK TABLE {day.name} IN SHARE MODE")
    jobs = sum(_count(conn, day) for day in job_days)
    events = sum(_count(conn, day) for day in event_days)
    if event_days:
        events -= _keep_events_of_kept_jobs(conn, job_days, event_days)
    for day in job_days:
        _forget_links(conn, day)
    for day in [*job_days, *event_days]:
        conn.exec_driver_sql(f"DROP TABLE {day.name}")
    return jobs, events


def _count(conn: Connection, day: Day) -> int:
    return conn.exec_driver_sql(f"SELECT count(*) FROM {day.name}").scalar()


def _keep_events_of_kept_jobs(conn: Connection, job_days: list[Day], event_days: list[Day]) -> int:
    """Move the events of ``event_days`` whose job stays out of them; how many moved.

    A job that stays and has an event in these days was made before the newest job these days name, so its id is
    at most that one's: each table of jobs that stays is read by its key up to it, a few rows at the low end of
    a later day, and the events of those jobs by ``ix_job_events_job_id``.
    """
    newest = max(
        conn.exec_driver_sql(f"SELECT coalesce(max(job_id), 0) FROM {day.name}").scalar() for day in event_days
    )
    going = {day.name for day in job_days}
    staying = [
        name
        for (name,) in conn.exec_driver_sql("SELECT relid::text FROM pg_partition_tree('jobs') WHERE isleaf").all()
        if name not in going
    ]
    if not staying:
        return 0
    kept = " UNION ALL ".join(f"SELECT id FROM {name} WHERE id <= %(newest)s" for name in staying)
    kept_from = max(day.upper for day in event_days)
    moved = 0
    for day in event_days:
        # Through the parent, so that the new bucket moves the row: past every day that goes (today, when retention
        # is as long as it should be).
        moved += conn.exec_driver_sql(
            f"UPDATE job_events SET bucket = greatest(now() AT TIME ZONE 'utc', {_literal(kept_from)}) WHERE id IN ("
            f"SELECT e.id FROM {day.name} e WHERE e.job_id IN ({kept}))",
            {"newest": newest},
        ).rowcount
    return moved


def _forget_links(conn: Connection, day: Day) -> None:
    """Delete the workflow edges and dedupe slots of the jobs of ``day``, read by their indexes within the day's
    range of ids."""
    lowest, highest = conn.exec_driver_sql(f"SELECT min(id), max(id) FROM {day.name}").one()
    if lowest is None:
        return
    values = {"lowest": lowest, "highest": highest}
    for table, column in (
        ("job_dependencies", "child_id"),
        ("job_dependencies", "parent_id"),
        ("unique_slots", "job_id"),
    ):
        conn.exec_driver_sql(
            f"DELETE FROM {table} t WHERE t.{column} BETWEEN %(lowest)s AND %(highest)s"
            f" AND EXISTS (SELECT 1 FROM {day.name} g WHERE g.id = t.{column})",
            values,
        )


class Purged(NamedTuple):
    """What ``purge_default`` deleted."""

    jobs: int
    events: int


def purge_default(conn: Connection, cutoff: datetime, limit: int) -> Purged:
    """Up to ``limit`` finished jobs of the default partition that finished before ``cutoff``, with their events,
    edges and slots: deleted, row by row (they are in no day to drop). A parent that a live job still depends on
    stays (NEEDED), as ``flask purge`` leaves it."""
    from . import forget  # the package's calls by name; it imports nothing of this module

    ids = list(
        conn.exec_driver_sql(
            f"SELECT jobs.id FROM jobs_done_default jobs WHERE jobs.updated_at < %(cutoff)s AND {common.NEEDED}"
            " ORDER BY jobs.updated_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED",
            {"cutoff": cutoff, "limit": limit},
        ).scalars()
    )
    if not ids:
        return Purged(0, 0)
    values = {"ids": ids}
    events = conn.exec_driver_sql("DELETE FROM job_events WHERE job_id = ANY(%(ids)s)", values).rowcount
    jobs = conn.exec_driver_sql("DELETE FROM jobs_done_default WHERE id = ANY(%(ids)s)", values).rowcount
    forget(conn, ids)
    return Purged(jobs, events)


def set_lock_timeout(conn: Connection) -> None:
    """Let the transaction's DDL and LOCKs wait at most LOCK_TIMEOUT for a lock (see above)."""
    conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")


def _literal(moment: datetime) -> str:
    return f"'{moment.isoformat(sep=' ')}'::timestamp"


def _moment(text: str) -> datetime | None:
    """A bound as pg_get_expr spells it: MINVALUE, or a quoted timestamp."""
    text = text.strip()
    if text.upper() == "MINVALUE":
        return None
    return datetime.fromisoformat(text.strip("'"))
