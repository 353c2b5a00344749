"""Stored counts per job type and period, and how far the rollup step has got."""

from __future__ import annotations

from sqlalchemy import BigInteger, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from ..extensions import db


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
