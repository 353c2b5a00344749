"""The figures the admin pages and ``/metrics`` both show, each defined once, so the two never disagree.

- **Stalled**: a running job whose lease has run out (its worker stopped heartbeating, probably died).
  The dashboard's stalled tile and list, a job's own page and ``queuelog_stalled_jobs`` all ask ``stalled``.
  The reaper's own statement (``STALLED`` in ``queuelog.sql``) takes back the same jobs.
- **Due**: a pending job whose run_at has come; a pending job not due yet is scheduled (a future run_at) or
  backing off (a retry waiting out its backoff). The dashboard's pending tile splits by ``due``/``not_due``,
  the Scheduled page lists ``not_due``.
- **Due since**: when a due job became due, the later of its run_at and its enqueue (a run_at before the job
  existed counts from the enqueue: nobody waited for it before then). The dashboard's "oldest due" tile and
  ``queuelog_oldest_pending_age_seconds`` are both ``now - due_since`` of ``oldest_due``.

Each figure is served by an index (see ``oldest_due``), so a scrape or a dashboard refresh stays cheap on a
deep queue.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Row, and_, case, select
from sqlalchemy.engine import Connection

from ..models import Job
from ..states import HELD, JobStatus

jobs = Job.__table__
(_HELD,) = HELD  # the one status holding a claim: status = 'running' (not IN), one range of ix_jobs_status_id
PENDING = JobStatus.PENDING.value


def stalled(now: datetime):
    """The condition "running, and its lease ran out before ``now``": its worker stopped heartbeating."""
    return and_(jobs.c.status == _HELD.value, jobs.c.lease_expires_at < now)


def due(now: datetime):
    """The condition "pending and its run_at has come": a worker may take it (flow control and expiry aside)."""
    return and_(jobs.c.status == PENDING, jobs.c.run_at <= now)


def not_due(now: datetime):
    """The condition "pending, but its run_at is still ahead": scheduled for later, or backing off."""
    return and_(jobs.c.status == PENDING, jobs.c.run_at > now)


#: When a due job became due: the later of its run_at and its enqueue.
due_since = case((jobs.c.run_at > jobs.c.created_at, jobs.c.run_at), else_=jobs.c.created_at)


@dataclass(frozen=True)
class OldestDue:
    """The due job of a type that has waited longest since it became due."""

    job_id: int
    type: str
    due_since: datetime

    def age(self, now: datetime) -> timedelta:
        """How long it has waited since it became due (never negative)."""
        return max(timedelta(0), now - self.due_since)


def oldest_due(conn: Connection, now: datetime, groups: Iterable[tuple[str, int]]) -> dict[str, OldestDue]:
    """For each type among ``groups`` (the (type, priority) pairs that have pending jobs), its oldest due job.

    Per group, two seeks into ``ix_jobs_type_status_priority`` (type, status, priority, run_at): the first due
    job by run_at gives an upper bound on the answer (its due_since); only jobs whose run_at is not after that
    bound can have become due earlier, and those are read. Usually that is the one job; jobs enqueued with a
    run_at in the past (their due_since is their enqueue) widen it to those whose run_at is that far back.
    """
    found: dict[str, OldestDue] = {}
    for job_type, priority in groups:
        group = and_(jobs.c.type == job_type, jobs.c.priority == priority, jobs.c.status == PENDING)
        bound = (
            select(due_since).where(group, due(now)).order_by(jobs.c.run_at).limit(1).correlate(None).scalar_subquery()
        )
        # The bound is a due job's due_since, so not after now: "run_at <= bound" alone keeps the jobs due, and
        # leaves the index one upper end to range over (given "run_at <= now" too, SQLite ranged over that one).
        row = conn.execute(
            select(jobs.c.id, due_since.label("due_since"))
            .where(group, jobs.c.run_at <= bound)
            .order_by(due_since, jobs.c.id)
            .limit(1)
        ).first()
        if row is None:
            continue
        best = found.get(job_type)
        if best is None or (row.due_since, row.id) < (best.due_since, best.job_id):
            found[job_type] = OldestDue(row.id, job_type, row.due_since)
    return found


def oldest_of_all(by_type: dict[str, OldestDue]) -> OldestDue | None:
    """The oldest due job of every type: the one the dashboard's tile shows."""
    return min(by_type.values(), key=lambda oldest: (oldest.due_since, oldest.job_id), default=None)


@dataclass(frozen=True)
class JobNow:
    """One job as the figures see it now: stalled, due, or not due yet, and since when it has been due."""

    stalled: bool
    due: bool
    not_due: bool
    due_since: datetime


def job_now_columns(now: datetime) -> tuple:
    """The job's page's reading of the figures' conditions (the database decides, as for the dashboard), as
    columns read with the job's own row: its page then reads the job once (``job_now`` takes them back)."""
    return (
        case((stalled(now), 1), else_=0).label("now_stalled"),
        case((due(now), 1), else_=0).label("now_due"),
        case((not_due(now), 1), else_=0).label("now_not_due"),
        due_since.label("now_due_since"),
    )


def job_now(row: Row) -> JobNow:
    """The reading of a row read with ``job_now_columns``."""
    return JobNow(bool(row.now_stalled), bool(row.now_due), bool(row.now_not_due), row.now_due_since)
