"""Read-only figures for the dashboard and the workers page.

Each figure is one query served by an index, so the pages stay cheap on a million jobs:
grouped counts walk ``ix_jobs_type_status_priority`` / ``ix_jobs_worker_status``, stalled jobs come from the
running jobs in ``ix_jobs_status_id`` (as many as the workers' slots). The chart and the types' timings
read the stored rollups (``rollup_stats``). What counts as stalled, due and "waiting since" is
``queuelog.reads.figures``'s, shared with ``/metrics``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import Row, case, func, select

from ..database.transactions import read_connection
from ..models import ApiKey, Job, Role, TypeSettings
from ..reads import figures
from ..states import STATUS_NAMES, JobStatus

jobs = Job.__table__
keys_table = ApiKey.__table__
type_settings = TypeSettings.__table__

STATUSES = list(STATUS_NAMES)
PENDING, RUNNING = JobStatus.PENDING.value, JobStatus.RUNNING.value
COMPLETED, FAILED = JobStatus.COMPLETED.value, JobStatus.FAILED.value


@dataclass
class Counts:
    """Jobs per status, and per type × status; and the (type, priority) pairs that have pending jobs."""

    by_status: dict[str, int]
    by_type: dict[str, dict[str, int]]
    pending_groups: list[tuple[str, int]] = field(default_factory=list)

    @property
    def total(self) -> int:
        """All jobs."""
        return sum(self.by_status.values())


def job_counts() -> Counts:
    """One grouped count over (type, status, priority), as /metrics counts (an index-only scan); the per-type
    and per-status totals are its sums."""
    with read_connection() as conn:
        rows = conn.execute(
            select(jobs.c.type, jobs.c.status, jobs.c.priority, func.count()).group_by(
                jobs.c.type, jobs.c.status, jobs.c.priority
            )
        ).all()
    by_status = {status: 0 for status in STATUSES}
    by_type: dict[str, dict[str, int]] = {}
    pending_groups = []
    for job_type, status, priority, count in rows:
        by_status[status] = by_status.get(status, 0) + count
        per_status = by_type.setdefault(job_type, {s: 0 for s in STATUSES})
        per_status[status] = per_status.get(status, 0) + count
        if status == PENDING and count:
            pending_groups.append((job_type, priority))
    return Counts(by_status, dict(sorted(by_type.items())), pending_groups)


def paused_types() -> set[str]:
    """The job types whose claims are paused now (type_settings has a row only per changed type: small)."""
    with read_connection() as conn:
        return set(conn.execute(select(type_settings.c.type).where(type_settings.c.paused.is_(True))).scalars())


def with_paused(counts: Counts, paused: set[str]) -> Counts:
    """``counts`` with a row of zeros for each paused type that has no jobs, so the dashboard shows the pause."""
    missing = {name: {s: 0 for s in STATUSES} for name in paused if name not in counts.by_type}
    return Counts(counts.by_status, dict(sorted({**counts.by_type, **missing}.items())), counts.pending_groups)


@dataclass(frozen=True)
class PendingSplit:
    """Pending jobs that are due now, and those scheduled for later (a future run_at, or a retry's backoff)."""

    due: int
    scheduled: int


def pending_split(now: datetime) -> PendingSplit:
    """Pending jobs due now and not yet due (figures.due / figures.not_due), in one count over pending jobs."""
    with read_connection() as conn:
        due, later = conn.execute(
            select(
                func.coalesce(func.sum(case((figures.due(now), 1), else_=0)), 0),
                func.coalesce(func.sum(case((figures.not_due(now), 1), else_=0)), 0),
            ).where(jobs.c.status == PENDING)
        ).one()
    return PendingSplit(due=due, scheduled=later)


def scheduled_jobs(now: datetime, limit: int = 200) -> tuple[int, list[Row]]:
    """Pending jobs not yet due (scheduled by run_at, or waiting out a retry's backoff): how many, and the
    ``limit`` coming due first."""
    later = figures.not_due(now)
    with read_connection() as conn:
        count = conn.execute(select(func.count()).select_from(jobs).where(later)).scalar_one()
        rows = conn.execute(
            select(
                jobs.c.id,
                jobs.c.type,
                jobs.c.priority,
                jobs.c.run_at,
                jobs.c.retry_count,
                jobs.c.max_retries,
                jobs.c.created_at,
                jobs.c.expires_at,
                jobs.c.producer,
            )
            .where(later)
            .order_by(jobs.c.run_at, jobs.c.id)
            .limit(limit)
        ).all()
    return count, rows


def oldest_due(now: datetime, counts: Counts) -> figures.OldestDue | None:
    """The due job that has waited longest since it became due, of any type (as /metrics measures it per type)."""
    with read_connection() as conn:
        return figures.oldest_of_all(figures.oldest_due(conn, now, counts.pending_groups))


def stalled_jobs(now: datetime, limit: int = 10) -> tuple[int, list[Row]]:
    """Running jobs whose lease has run out (their worker has probably died): how many, and the longest-stalled."""
    stalled = figures.stalled(now)
    with read_connection() as conn:
        count = conn.execute(select(func.count()).select_from(jobs).where(stalled)).scalar_one()
        rows = conn.execute(
            select(
                jobs.c.id, jobs.c.type, jobs.c.worker_id, jobs.c.claimed_at, jobs.c.lease_expires_at, jobs.c.stall_count
            )
            .where(stalled)
            .order_by(jobs.c.lease_expires_at)
            .limit(limit)
        ).all()
    return count, rows


def recent_failures(limit: int = 8) -> list[Row]:
    """The jobs that failed most recently, with their error (ix_jobs_status_updated)."""
    with read_connection() as conn:
        return conn.execute(
            select(jobs.c.id, jobs.c.type, jobs.c.error, jobs.c.worker_id, jobs.c.updated_at, jobs.c.retry_count)
            .where(jobs.c.status == FAILED)
            .order_by(jobs.c.updated_at.desc(), jobs.c.id.desc())
            .limit(limit)
        ).all()


# --- workers -------------------------------------------------------------------------------------


@dataclass
class WorkerSummary:
    """One worker key (or a worker id seen on jobs) and what it is doing."""

    name: str
    key_known: bool = False
    revoked_at: datetime | None = None
    allowed_types: list[str] | None = None
    last_seen: datetime | None = None
    held: list[Row] = field(default_factory=list)
    completed: int = 0
    failed: int = 0

    def saw(self, when: datetime | None) -> None:
        """Note a sign of life; last_seen keeps the newest."""
        if when is not None and (self.last_seen is None or when > self.last_seen):
            self.last_seen = when


def workers() -> list[WorkerSummary]:
    """Every worker key that is not revoked plus any worker id found on jobs: held jobs, last seen, completed
    and failed counts. A revoked key is listed only while it still holds jobs.

    Last seen is the newest of the key's last use (any request, recorded to the minute) and the
    claim or heartbeat of the jobs it holds now (exact).
    """
    with read_connection() as conn:
        key_rows = conn.execute(
            select(
                keys_table.c.name, keys_table.c.last_used_at, keys_table.c.revoked_at, keys_table.c.allowed_types
            ).where(keys_table.c.role == Role.WORKER.value)
        ).all()
        held_rows = conn.execute(
            select(
                jobs.c.id,
                jobs.c.type,
                jobs.c.worker_id,
                jobs.c.claimed_at,
                jobs.c.heartbeat_at,
                jobs.c.lease_expires_at,
            )
            .where(jobs.c.status == RUNNING, jobs.c.worker_id.is_not(None))
            .order_by(jobs.c.id)
        ).all()
        count_rows = conn.execute(
            select(jobs.c.worker_id, jobs.c.status, func.count())
            .where(jobs.c.worker_id.is_not(None), jobs.c.status.in_([COMPLETED, FAILED]))
            .group_by(jobs.c.worker_id, jobs.c.status)
        ).all()
    summaries: dict[str, WorkerSummary] = {}
    for row in key_rows:
        summary = summaries.setdefault(row.name, WorkerSummary(row.name))
        summary.key_known = True
        summary.revoked_at = row.revoked_at
        summary.allowed_types = json.loads(row.allowed_types) if row.allowed_types else None
        summary.saw(row.last_used_at)
    for row in held_rows:
        summary = summaries.setdefault(row.worker_id, WorkerSummary(row.worker_id))
        summary.held.append(row)
        summary.saw(row.claimed_at)
        summary.saw(row.heartbeat_at)
    for worker_id, status, count in count_rows:
        summary = summaries.setdefault(worker_id, WorkerSummary(worker_id))
        if status == COMPLETED:
            summary.completed = count
        else:
            summary.failed = count
    # A revoked key works no more: it is not listed, unless it still holds jobs (they go back to the queue
    # when their leases run out; until then the page shows who holds them).
    listed = [s for s in summaries.values() if s.revoked_at is None or s.held]
    never = datetime.min.replace(tzinfo=UTC)
    # Busy workers first, then the most recently seen: the one that matters at 3 a.m. is on top.
    return sorted(listed, key=lambda s: (-len(s.held), -(s.last_seen or never).timestamp(), s.name))
