"""The rollup step's statements (``queuelog.queue.rollups``): reading the event log by minute, and replacing
the minute and hour rows of type_rollups. Off the hot path, so written with SQLAlchemy Core (which converts
the times both ways); the one thing that differs per dialect is how a step keeps the others out:

- PostgreSQL: ``pg_advisory_xact_lock`` on one fixed key, held until the step's transaction ends. (Not a
  FOR UPDATE on the mark's row: before the first step there is no row to lock.) Every step takes this one
  lock first and then writes only rows no other transaction writes, so steps queue and never deadlock.
- SQLite: nothing more: the step runs in a write transaction, which holds the database's write lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import BigInteger, and_, case, cast, delete, func, insert, literal, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Row

from ..models import Job, JobEvent, RollupMark, TypeRollup

events = JobEvent.__table__
jobs = Job.__table__
rollups = TypeRollup.__table__
marks = RollupMark.__table__

#: The advisory lock key of the rollup step on PostgreSQL (any fixed 64-bit number no other lock uses).
ADVISORY_KEY = 0x7175_6C67_726F_6C6C  # "qulgroll"


def lock_mark(conn: Connection, name: str) -> int | None:
    """Take the step's lock (see above) and read mark ``name``: the first minute not rolled, or None."""
    if conn.dialect.name == "postgresql":
        conn.execute(select(func.pg_advisory_xact_lock(ADVISORY_KEY)))
    return read_mark(conn, name)


def read_mark(conn: Connection, name: str) -> int | None:
    """Mark ``name``, or None when no step has set it."""
    return conn.execute(select(marks.c.through).where(marks.c.name == name)).scalar()


def set_mark(conn: Connection, name: str, through: int) -> None:
    """Set mark ``name`` to ``through`` (made on the first step)."""
    dialect_insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    statement = dialect_insert(marks).values(name=name, through=through)
    conn.execute(
        statement.on_conflict_do_update(index_elements=[marks.c.name], set_={"through": statement.excluded.through})
    )


def oldest_event(conn: Connection, kinds: Iterable[str], since: datetime) -> datetime | None:
    """The oldest event of ``kinds`` at or after ``since``: one min() per kind, each the first entry of its
    range of ``ix_job_events_event_at`` (one min() over them all would walk every entry in the range)."""
    found = [
        conn.execute(select(func.min(events.c.at)).where(events.c.event == kind, events.c.at >= since)).scalar()
        for kind in kinds
    ]
    found = [at for at in found if at is not None]
    return min(found) if found else None


def events_between(
    conn: Connection, start: datetime, end: datetime, kinds: Sequence[str], run_ends: Sequence[str]
) -> list[Row]:
    """Events of ``kinds`` with ``start <= at < end``: (event, to_status, at, type, run_at, created_at,
    claimed), the times in integer microseconds since the epoch (exact, and no datetime made per row: the
    step folds a busy hour's 100,000 events); ``claimed``, for a run's end (``run_ends``), is the job's
    latest claim before it, else None.

    The events come from ``ix_job_events_event_at`` (one range per kind); the claim from
    ``ix_job_events_job_id`` (job_id, id), walked back from the event's own id.
    """
    dialect = conn.dialect.name
    claims = events.alias("claims")
    claimed = (
        select(_micros(claims.c.at, dialect))
        .where(claims.c.job_id == events.c.job_id, claims.c.id < events.c.id, claims.c.event == "claimed")
        .order_by(claims.c.id.desc())
        .limit(1)
        .scalar_subquery()
    )
    return conn.execute(
        select(
            events.c.event,
            events.c.to_status,
            _micros(events.c.at, dialect),
            jobs.c.type,
            _micros(jobs.c.run_at, dialect),
            _micros(jobs.c.created_at, dialect),
            case((events.c.event.in_(run_ends), claimed), else_=None).label("claimed"),
        )
        .join(jobs, jobs.c.id == events.c.job_id)
        .where(events.c.event.in_(kinds), events.c.at >= start, events.c.at < end)
    ).all()


def _micros(column, dialect: str):
    """A stored time as integer microseconds since the epoch. SQLite stores "YYYY-MM-DD HH:MM:SS.ffffff"
    (SQLAlchemy's text, naive UTC): whole seconds from strftime, microseconds from the text; PostgreSQL's
    EXTRACT(EPOCH) of a timestamp without time zone reads it as UTC, exactly (numeric)."""
    if dialect == "postgresql":
        return cast(func.extract("epoch", column) * 1_000_000, BigInteger)
    return cast(func.strftime("%s", column), BigInteger) * 1_000_000 + cast(func.substr(column, 21, 6), BigInteger)


def replace_minutes(conn: Connection, start: int, end: int, metrics: Sequence[str], rows: list[tuple]) -> None:
    """Delete the minute rows of ``metrics`` in [``start``, ``end``) and insert ``rows`` (span, metric, period,
    type, bucket, shard, n) in their place."""
    conn.execute(
        delete(rollups).where(
            rollups.c.span == 60, rollups.c.metric.in_(metrics), rollups.c.period >= start, rollups.c.period < end
        )
    )
    if rows:
        names = ("span", "metric", "period", "type", "bucket", "shard", "n")
        conn.execute(insert(rollups), [dict(zip(names, row, strict=True)) for row in rows])


def rederive_hour(conn: Connection, hour: int, metrics: Sequence[str]) -> None:
    """Replace the hour rows of ``metrics`` for the hour starting at ``hour`` by the sums of its minutes."""
    conn.execute(delete(rollups).where(rollups.c.span == 3600, rollups.c.metric.in_(metrics), rollups.c.period == hour))
    minutes = (
        select(
            literal(3600),
            rollups.c.metric,
            literal(hour),
            rollups.c.type,
            rollups.c.bucket,
            literal(0),
            func.sum(rollups.c.n),
        )
        .where(
            and_(
                rollups.c.span == 60,
                rollups.c.metric.in_(metrics),
                rollups.c.period >= hour,
                rollups.c.period < hour + 3600,
            )
        )
        .group_by(rollups.c.metric, rollups.c.type, rollups.c.bucket)
    )
    conn.execute(insert(rollups).from_select(["span", "metric", "period", "type", "bucket", "shard", "n"], minutes))


def prune(conn: Connection, span: int, metric: str, before: int) -> int:
    """Delete the ``span`` rows of ``metric`` whose period began before ``before``; how many went."""
    return conn.execute(
        delete(rollups).where(rollups.c.span == span, rollups.c.metric == metric, rollups.c.period < before)
    ).rowcount
