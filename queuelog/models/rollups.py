"""Stored counts per job type and period, and how far the rollup step has got; the failed jobs of each closed
day of history, summed by cause (PostgreSQL)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from ..core.error_groups import ERROR_GROUP_CHARS
from ..extensions import db
from .columns import UTCDateTime


class TypeRollup(db.Model):
    """Stored counts per job type and period: jobs enqueued, completed and failed for good, and histograms of
    their wait and run times, so the dashboard's chart and the type pages never scan jobs.

    One row per (span, metric, period, type, bucket, shard), written only by the rollup step
    (``queuelog.queue.rollups.roll_up``), which folds closed minutes of ``job_events`` into it off the hot
    path. ``span`` is 60 (a minute; wait and run histograms too) or 3600 (an hour, summed from its minutes;
    counts only). ``period`` is the period's start in Unix seconds. ``bucket`` is 0 for a count, else a
    histogram bucket (``queuelog.core.timing_buckets``). ``shard`` is always 0 (the step is the only writer; the
    column stays from when each state change added to a row of its own). Old periods go with ``flask purge``.
    """

    __tablename__ = "type_rollups"

    span: Mapped[int] = mapped_column(Integer, primary_key=True)
    metric: Mapped[str] = mapped_column(String(16), primary_key=True)
    period: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    type: Mapped[str] = mapped_column(String(100), primary_key=True)
    bucket: Mapped[int] = mapped_column(Integer, primary_key=True)
    shard: Mapped[int] = mapped_column(Integer, primary_key=True)
    n: Mapped[int] = mapped_column(BigInteger)


class RollupMark(db.Model):
    """How far a rollup has got: ``through`` is the start (Unix seconds) of the first minute not rolled up yet.

    Its row is also the rollup step's lock on PostgreSQL (SELECT … FOR UPDATE), so one step runs at a time.
    """

    __tablename__ = "rollup_marks"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    through: Mapped[int] = mapped_column(BigInteger)


class ClosedDay(db.Model):
    """A day of finished jobs (a partition of ``jobs_done``, PostgreSQL only) whose failed jobs are summed in
    ``closed_day_errors``, and the value of the day's change counter the sum was taken at.

    The sum holds while the counter (the sequence ``{day}_changes``, moved on by a trigger on the day at any
    write) still has that value (``queuelog.sql.closed_days``). ``lower`` is None for a day that starts at
    MINVALUE (``jobs_before``, an upgraded database's history). SQLite keeps no days, and has no such table.
    """

    __tablename__ = "closed_days"

    day: Mapped[str] = mapped_column(String(63), primary_key=True)
    lower: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    upper: Mapped[datetime] = mapped_column(UTCDateTime)
    changes: Mapped[int] = mapped_column(BigInteger)


class ClosedDayErrors(db.Model):
    """A closed day's failed jobs of one cause and type: how many, and when the first and the last failed
    (PostgreSQL only; see ClosedDay). Top errors adds them up instead of reading the day's jobs."""

    __tablename__ = "closed_day_errors"

    day: Mapped[str] = mapped_column(String(63), primary_key=True)
    error_group: Mapped[str] = mapped_column(String(ERROR_GROUP_CHARS), primary_key=True)
    type: Mapped[str] = mapped_column(String(100), primary_key=True)
    failed: Mapped[int] = mapped_column(BigInteger)
    first_seen: Mapped[datetime] = mapped_column(UTCDateTime)
    last_seen: Mapped[datetime] = mapped_column(UTCDateTime)
