"""Read-only: failed jobs grouped by their error's cause (``jobs.error_group``), for the Top errors page.

Every read of jobs goes through ix_jobs_error_groups (status, error_group, type, updated_at), so the page groups
stored values in index order and never reads an error's text. On PostgreSQL, the days of history that have
closed are read as the sums retention took of them (sql/closed_days.py), and only the other days are grouped
here; docs/admin-pages.md gives the page's timings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import BigInteger, cast, func, or_, select
from sqlalchemy.engine import Connection, Row

from ..database.transactions import inline, read_connection
from ..models import ClosedDayErrors, Job
from ..sql import closed_days
from ..sql.partitions import Day
from ..states import JobStatus

jobs = Job.__table__
sums = ClosedDayErrors.__table__

#: The page shows the largest groups only; a long tail of one-off errors is searched on the jobs page.
TOP_GROUPS = 50


@dataclass(frozen=True)
class ErrorGroup:
    """One cause: how many jobs failed with it, when first and last, of which types; how many wait to retry."""

    group: str
    failed: int
    first_seen: datetime
    last_seen: datetime
    types: tuple[str, ...]
    waiting: int  # pending jobs whose last attempt failed with this cause (the ones "cancel all" stops)


@dataclass
class _Tally:
    """One cause's figures, summed over its types."""

    first: datetime
    last: datetime
    failed: int = 0
    types: set[str] = field(default_factory=set)

    def add(self, job_type: str, count: int, first: datetime, last: datetime) -> None:
        self.failed += count
        self.first, self.last = min(self.first, first), max(self.last, last)
        self.types.add(job_type)


def top_errors(limit: int = TOP_GROUPS) -> list[ErrorGroup]:
    """The ``limit`` causes with the most failed jobs, largest first."""
    failed = JobStatus.FAILED.value
    # One snapshot: a day's sum and the jobs grouped here must not both count, or both miss, a job that moved.
    with read_connection(prepared=True, one_snapshot=True) as conn:
        summed = closed_days.current_sums(conn) if conn.dialect.name == "postgresql" else []
        # "error_group IS NOT NULL" is what makes SQLite take the partial index (it must say what the index says).
        has_group = jobs.c.error_group.is_not(None)
        # One pass over the index, in its own order: counts and times per (cause, type), summed per cause
        # below. Grouping by cause alone would need the types as a DISTINCT aggregate, which sorts every
        # job of a cause again, or a second read.
        grouped = conn.execute(
            select(
                jobs.c.error_group, jobs.c.type, func.count(), func.min(jobs.c.updated_at), func.max(jobs.c.updated_at)
            )
            .where(jobs.c.status == inline(failed), has_group, *_outside(summed))
            .group_by(jobs.c.error_group, jobs.c.type)
        ).all()
        causes: dict[str, _Tally] = {}
        for group, job_type, count, first, last in [*_sums_of(conn, summed), *grouped]:
            causes.setdefault(group, _Tally(first=first, last=last)).add(job_type, count, first, last)
        top = sorted(causes.items(), key=lambda item: (-item[1].failed, item[0]))[:limit]
        groups = [group for group, _ in top]
        waiting = (
            dict(
                conn.execute(
                    select(jobs.c.error_group, func.count())
                    .where(jobs.c.status == inline(JobStatus.PENDING.value), has_group, jobs.c.error_group.in_(groups))
                    .group_by(jobs.c.error_group)
                ).all()
            )
            if groups
            else {}
        )
    return [
        ErrorGroup(group, tally.failed, tally.first, tally.last, tuple(sorted(tally.types)), waiting.get(group, 0))
        for group, tally in top
    ]


def _sums_of(conn: Connection, days: list[Day]) -> list[Row]:
    """(cause, type, failed, first, last) over the sums of ``days``."""
    if not days:
        return []
    return conn.execute(
        select(
            sums.c.error_group,
            sums.c.type,
            cast(func.sum(sums.c.failed), BigInteger),
            func.min(sums.c.first_seen),
            func.max(sums.c.last_seen),
        )
        .where(sums.c.day.in_([day.name for day in days]))
        .group_by(sums.c.error_group, sums.c.type)
    ).all()


def _outside(days: list[Day]) -> list:
    """Conditions that leave out the finished jobs of ``days``: one per run of consecutive days. Their bounds
    are written into the statement, so that PostgreSQL leaves those days out when it plans it, once."""
    runs: list[list] = []
    for day in days:
        if runs and runs[-1][1] == day.lower:
            runs[-1][1] = day.upper
        else:
            runs.append([day.lower, day.upper])
    updated_at = jobs.c.updated_at
    return [
        updated_at >= inline(upper, updated_at.type)
        if lower is None
        else or_(updated_at < inline(lower, updated_at.type), updated_at >= inline(upper, updated_at.type))
        for lower, upper in runs
    ]
