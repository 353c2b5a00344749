"""Read-only: failed jobs grouped by their error's cause (``jobs.error_group``), for the Top errors page.

Every read goes through ix_jobs_error_groups (status, error_group, type, updated_at), so the page groups
stored values in index order and never reads an error's text; see README "Admin pages" for its timings.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import distinct, func, select

from ..database.transactions import read_connection
from ..models import Job
from ..states import JobStatus

jobs = Job.__table__

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
    waiting: int   # pending jobs whose last attempt failed with this cause (the ones "cancel all" stops)


def _types_of(dialect: str):
    """The distinct types of a group as one comma-separated text: each dialect names the aggregate its way."""
    if dialect == "postgresql":
        return func.string_agg(distinct(jobs.c.type), ",")
    return func.group_concat(distinct(jobs.c.type))


def top_errors(limit: int = TOP_GROUPS) -> list[ErrorGroup]:
    """The ``limit`` causes with the most failed jobs, largest first."""
    with read_connection() as conn:
        # "error_group IS NOT NULL" is what makes SQLite take the partial index (it must say what the index says).
        has_group = jobs.c.error_group.is_not(None)
        rows = conn.execute(
            select(jobs.c.error_group, func.count().label("failed"), func.min(jobs.c.updated_at),
                   func.max(jobs.c.updated_at), _types_of(conn.dialect.name))
            .where(jobs.c.status == JobStatus.FAILED.value, has_group)
            .group_by(jobs.c.error_group)
            .order_by(func.count().desc(), jobs.c.error_group)
            .limit(limit)
        ).all()
        groups = [row[0] for row in rows]
        waiting = dict(conn.execute(
            select(jobs.c.error_group, func.count())
            .where(jobs.c.status == JobStatus.PENDING.value, has_group, jobs.c.error_group.in_(groups))
            .group_by(jobs.c.error_group)
        ).all()) if groups else {}
    column = Job.__table__.c.updated_at.type
    return [ErrorGroup(group, failed, _time(column, first), _time(column, last),
                       tuple(sorted(set((types or "").split(",")) - {""})), waiting.get(group, 0))
            for group, failed, first, last, types in rows]


def _time(column_type, value):
    """min()/max() of a time column: SQLite hands back the stored text, not the column's datetime."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return column_type.process_result_value(value, None)
