"""Read-only job queries for the jobs pages: the filtered table, one job with its history, bulk selection."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Integer, Row, func, select

from ..core.errors import JobNotFound
from ..core.payload_match import PayloadMatch
from ..database.transactions import inline, read_connection
from ..models import ApiKey, Job, JobEvent
from ..reads import figures
from ..reads.queries import decode_cursor, encode_cursor
from ..states import RETRYABLE, JobStatus, names

jobs = Job.__table__
events = JobEvent.__table__
keys_table = ApiKey.__table__

RETRYABLE_NAMES = names(RETRYABLE)


@dataclass(frozen=True)
class JobSearch:
    """What the operator asked for: exact filters, an id or idempotency key to look up, text in the last
    error, a value in the payload, an error group (of the Top errors page)."""

    status: str | None = None
    type: str | None = None
    priority: int | None = None
    worker: str | None = None
    concurrency_key: str | None = None
    q: str | None = None
    error: str | None = None
    payload: PayloadMatch | None = None
    group: str | None = None

    def conditions(self, conn) -> list:
        """The WHERE clauses; a lookup ``q`` becomes a short list of ids found through indexes."""
        where = []
        for column, value in (
            ("status", self.status),
            ("type", self.type),
            ("priority", self.priority),
            ("worker_id", self.worker),
            ("concurrency_key", self.concurrency_key),
            ("error_group", self.group),
        ):
            if value is not None:
                where.append(jobs.c[column] == value)
        if self.q:
            where.append(jobs.c.id.in_(_ids_for(conn, self.q)))
        if self.error:
            # Case-insensitive on both databases (lower() LIKE lower()); % and _ in the text match themselves.
            where.append(jobs.c.error.icontains(self.error, autoescape=True))
        if self.payload is not None:
            where.append(self.payload.condition(conn.dialect.name))
        return where

    def plans_alike(self) -> bool:
        """Is the best plan the same whatever the values? So when it filters on a status at most: each status's
        jobs come in id order from one index (ix_jobs_status_id). Such a search reads with prepared statements."""
        return self == JobSearch(status=self.status)

    def retry_statuses(self) -> tuple[str, ...]:
        """Which jobs "retry all matching" takes: the filtered status if it is retryable, else failed ones.

        Cancelled jobs were stopped on purpose, so they come back only when the filter asks for them.
        """
        if self.status is None:
            return (JobStatus.FAILED.value,)
        return (self.status,) if self.status in RETRYABLE_NAMES else ()


def _ids_for(conn, q: str) -> list[int]:
    """Jobs whose id is ``q`` or whose idempotency key is ``q``.

    Idempotency keys are unique per producing key, so the lookup goes through that unique index one
    key id at a time (a handful of index probes) instead of scanning every job for the string.
    """
    found: list[int] = []
    text = q.strip()
    number = text.lstrip("#")
    # ASCII digits only, and fewer than 19 of them (ids are 64-bit): str.isdigit() also takes "²", which
    # int() refuses, and a longer number would overflow the id column's bind (both were 500s).
    if re.fullmatch(r"[0-9]{1,18}", number):
        found.append(int(number))
    key_ids = conn.execute(select(keys_table.c.id)).scalars().all()
    if key_ids:
        found += (
            conn.execute(select(jobs.c.id).where(jobs.c.producer_key_id.in_(key_ids), jobs.c.idempotency_key == text))
            .scalars()
            .all()
        )
    found += (
        conn.execute(select(jobs.c.id).where(jobs.c.producer_key_id.is_(None), jobs.c.idempotency_key == text))
        .scalars()
        .all()
    )
    return found


def find_jobs(search: JobSearch, limit: int, cursor: str | None) -> tuple[list[Row], str | None]:
    """A page of matching jobs, newest first, keyset-paginated on id (deep pages cost as much as the first)."""
    with read_connection(prepared=search.plans_alike()) as conn:
        query = (
            select(jobs).where(*search.conditions(conn)).order_by(jobs.c.id.desc()).limit(inline(limit + 1, Integer))
        )
        if cursor:
            query = query.where(jobs.c.id < decode_cursor(cursor))
        rows = conn.execute(query).all()
    next_cursor = encode_cursor(rows[limit - 1].id) if len(rows) > limit else None
    return rows[:limit], next_cursor


def count_retryable(search: JobSearch, cap: int) -> int:
    """How many matching jobs "retry all matching" would take, counting no further than ``cap``."""
    return count_matching(search, search.retry_statuses(), cap)


def retryable_batch(search: JobSearch, after_id: int, up_to_id: int, size: int) -> list[int]:
    """The next ``size`` ids of matching retryable jobs with ``after_id < id <= up_to_id``, ascending."""
    return matching_batch(search, search.retry_statuses(), after_id, up_to_id, size)


def count_matching(search: JobSearch, statuses: tuple[str, ...], cap: int, up_to_id: int | None = None) -> int:
    """How many matching jobs in ``statuses`` (with ``id <= up_to_id``) there are, counting no further than ``cap``."""
    if not statuses:
        return 0
    with read_connection(prepared=search.plans_alike()) as conn:
        # The statuses are the code's (retry_statuses, a bulk action's statuses_for), never the operator's text.
        inner = select(jobs.c.id).where(*search.conditions(conn), jobs.c.status.in_([inline(s) for s in statuses]))
        if up_to_id is not None:
            inner = inner.where(jobs.c.id <= up_to_id)
        return conn.execute(select(func.count()).select_from(inner.limit(inline(cap, Integer)).subquery())).scalar_one()


def count_others(search: JobSearch, statuses: tuple[str, ...], cap: int, up_to_id: int) -> dict[str, int]:
    """Matching jobs *not* in ``statuses`` (a bulk action leaves them), by status; ``cap`` of them at most."""
    with read_connection() as conn:
        others = [jobs.c.status.not_in(statuses)] if statuses else []
        inner = (
            select(jobs.c.status).where(*search.conditions(conn), jobs.c.id <= up_to_id, *others).limit(cap).subquery()
        )
        rows = conn.execute(select(inner.c.status, func.count()).group_by(inner.c.status)).all()
    return {status: count for status, count in rows}


def matching_batch(search: JobSearch, statuses: tuple[str, ...], after_id: int, up_to_id: int, size: int) -> list[int]:
    """The next ``size`` ids of matching jobs in ``statuses`` with ``after_id < id <= up_to_id``, ascending."""
    if not statuses:
        return []
    with read_connection() as conn:
        return (
            conn.execute(
                select(jobs.c.id)
                .where(
                    *search.conditions(conn), jobs.c.status.in_(statuses), jobs.c.id > after_id, jobs.c.id <= up_to_id
                )
                .order_by(jobs.c.id)
                .limit(size)
            )
            .scalars()
            .all()
        )


def statuses_of(job_ids: list[int]) -> dict[int, str]:
    """The status of each of ``job_ids`` that exists, now."""
    if not job_ids:
        return {}
    with read_connection() as conn:
        return dict(conn.execute(select(jobs.c.id, jobs.c.status).where(jobs.c.id.in_(job_ids))).all())


def newest_job_id() -> int:
    """The highest job id now; a bulk retry stops there, so jobs failing meanwhile are not swept in."""
    with read_connection() as conn:
        return conn.execute(select(func.max(jobs.c.id))).scalar() or 0


def load_job(job_id: int, now: datetime) -> tuple[Row, list[Row], figures.JobNow]:
    """A job, its whole event log (oldest event first) and its reading by the dashboard's conditions at ``now``;
    JobNotFound if there is no such job."""
    with read_connection(prepared=True) as conn:
        row = conn.execute(select(jobs, *figures.job_now_columns(now)).where(jobs.c.id == job_id)).first()
        if row is None:
            raise JobNotFound(f"job {job_id} does not exist")
        history = conn.execute(select(events).where(events.c.job_id == job_id).order_by(events.c.id)).all()
    return row, history, figures.job_now(row)
