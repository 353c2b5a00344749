"""Read-only: failed jobs grouped by their error's cause (``jobs.error_group``), for the Top errors page.

Every read goes through ix_jobs_error_groups (status, error_group, type, updated_at), so the page groups
stored values in index order and never reads an error's text; see README "Admin pages" for its timings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import func, select

from ..database.transactions import inline, read_connection
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
    waiting: int  # pending jobs whose last attempt failed with this cause (the ones "cancel all" stops)


@dataclass
class _Tally:
    """One cause's figures, summed over its types."""

    first: datetime
    last: datetime
    failed: int = 0
    types: list[str] = field(default_factory=list)

    def add(self, job_type: str, count: int, first: datetime, last: datetime) -> None:
        self.failed += count
        self.first, self.last = min(self.first, first), max(self.last, last)
        self.types.append(job_type)


def top_errors(limit: int = TOP_GROUPS) -> list[ErrorGroup]:
    """The ``limit`` causes with the most failed jobs, largest first."""
    failed = JobStatus.FAILED.value
    with read_connection(prepared=True) as conn:
        # "error_group IS NOT NULL" is what makes SQLite take the partial index (it must say what the index says).
        has_group = jobs.c.error_group.is_not(None)
        # One pass over the index, in its own order: counts and times per (cause, type), summed per cause
        # below. Grouping by cause alone would need the types as a DISTINCT aggregate, which sorts every
        # job of a cause again, or a second read.
        parts = conn.execute(
            select(
                jobs.c.error_group, jobs.c.type, func.count(), func.min(jobs.c.updated_at), func.max(jobs.c.updated_at)
            )
            .where(jobs.c.status == inline(failed), has_group)
            .group_by(jobs.c.error_group, jobs.c.type)
        ).all()
        causes: dict[str, _Tally] = {}
        for group, job_type, count, first, last in parts:
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
