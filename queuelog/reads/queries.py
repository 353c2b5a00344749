"""Read-only questions about jobs, with who may see what (V-09): no state changes here."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Row, or_, select

from ..auth.keys import Caller
from ..core.errors import InvalidRequest, JobNotFound
from ..database.transactions import read_connection
from ..models import Job, JobDependency, JobEvent, Role
from ..states import HELD

jobs = Job.__table__
events = JobEvent.__table__
edges = JobDependency.__table__


@dataclass(frozen=True)
class JobFilter:
    status: str | None = None
    type: str | None = None
    priority: int | None = None
    worker_id: str | None = None
    producer_key_id: int | None = None


def visible_to(caller: Caller, row: Row) -> bool:
    """Admins see all; a producer its own jobs; a worker the job it holds now."""
    if caller.owns_or_oversees(row.producer_key_id):
        return True
    return caller.role == Role.WORKER.value and row.status in HELD and row.worker_id == caller.name


def last_change(row: Row) -> datetime:
    """When the job last changed, as the API and the pages show it (``updated_at``): its last move, or its
    last heartbeat if that came later. A heartbeat does not write the stored updated_at (sql/common.py
    LEAVE_RUNNING says why), so a running job's last change is read from both."""
    heartbeat = row.heartbeat_at
    return heartbeat if heartbeat is not None and heartbeat > row.updated_at else row.updated_at


def max_job_id() -> int:
    """The largest id a job can have (64-bit on both databases).

    Ids above it cannot exist, and binding them would fail in the driver (a 500) instead of finding nothing.
    """
    return 2**63 - 1


def get_job(caller: Caller, job_id: int) -> Row:
    """The job, or JobNotFound when it does not exist or the caller may not see it."""
    with read_connection() as conn:
        row = conn.execute(select(jobs).where(jobs.c.id == job_id)).first()
    if row is None or not visible_to(caller, row):
        raise JobNotFound(f"job {job_id} does not exist")
    return row


def job_events(caller: Caller, job_id: int) -> tuple[Row, list[Row]]:
    """The job (if the caller may see it) and its history, oldest first."""
    job = get_job(caller, job_id)
    with read_connection() as conn:
        history = conn.execute(select(events).where(events.c.job_id == job_id).order_by(events.c.id)).all()
    return job, history


@dataclass(frozen=True)
class Links:
    """A job's place in its workflow: its parents and its children (rows with id, type, status), by id."""

    parents: list[Row]
    children: list[Row]


def links(caller: Caller | None, job_ids: list[int]) -> dict[int, Links]:
    """Each job's parents and children that ``caller`` may see (a producer: its own jobs; None, a signed-in
    person on the pages: all), by id."""
    found = {job_id: Links([], []) for job_id in job_ids}
    if not job_ids:
        return found
    with read_connection() as conn:
        # The edges first, then the jobs at their other ends by id: most jobs have none, and a read of the jobs
        # on PostgreSQL is planned over every day of history (docs/storage.md) even when it finds nothing.
        linked = conn.execute(
            select(edges.c.parent_id, edges.c.child_id).where(
                or_(edges.c.child_id.in_(job_ids), edges.c.parent_id.in_(job_ids))
            )
        ).all()
        if not linked:
            return found
        others = {edge.parent_id for edge in linked} | {edge.child_id for edge in linked}
        rows = {
            row.id: row
            for row in conn.execute(
                select(jobs.c.id, jobs.c.type, jobs.c.status, jobs.c.producer_key_id).where(jobs.c.id.in_(others))
            )
        }
    asked = set(job_ids)
    for edge in sorted(linked, key=lambda edge: (edge.parent_id, edge.child_id)):
        if edge.child_id in asked and edge.parent_id in rows and _may_see(caller, rows[edge.parent_id]):
            found[edge.child_id].parents.append(rows[edge.parent_id])
    for edge in sorted(linked, key=lambda edge: (edge.child_id, edge.parent_id)):
        if edge.parent_id in asked and edge.child_id in rows and _may_see(caller, rows[edge.child_id]):
            found[edge.parent_id].children.append(rows[edge.child_id])
    return found


def _may_see(caller: Caller | None, row: Row) -> bool:
    return caller is None or caller.role != Role.PRODUCER.value or row.producer_key_id == caller.id


def parents_of(child_ids: list[int]) -> dict[int, list[Row]]:
    """The parents of each of ``child_ids`` (id, type, status, result), for the worker that claimed them."""
    if not child_ids:
        return {}
    query = (
        select(edges.c.child_id, jobs.c.id, jobs.c.type, jobs.c.status, jobs.c.result)
        .join(edges, edges.c.parent_id == jobs.c.id)
        .where(edges.c.child_id.in_(child_ids))
        .order_by(edges.c.child_id, jobs.c.id)
    )
    found: dict[int, list[Row]] = {child_id: [] for child_id in child_ids}
    with read_connection() as conn:
        for row in conn.execute(query):
            found[row.child_id].append(row)
    return found


def list_jobs(where: JobFilter, limit: int, cursor: str | None) -> tuple[list[Row], str | None]:
    """Newest first, keyset-paginated on id so deep pages stay as fast as the first."""
    query = select(jobs).order_by(jobs.c.id.desc()).limit(limit + 1)
    for column, value in (
        ("status", where.status),
        ("type", where.type),
        ("priority", where.priority),
        ("worker_id", where.worker_id),
        ("producer_key_id", where.producer_key_id),
    ):
        if value is not None:
            query = query.where(jobs.c[column] == value)
    if cursor:
        query = query.where(jobs.c.id < decode_cursor(cursor))
    with read_connection() as conn:
        rows = conn.execute(query).all()
    next_cursor = encode_cursor(rows[limit - 1].id) if len(rows) > limit else None
    return rows[:limit], next_cursor


def encode_cursor(last_id: int) -> str:
    return base64.urlsafe_b64encode(f"id:{last_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        kind, _, value = text.partition(":")
        if kind != "id" or not 0 < int(value) <= max_job_id():
            raise ValueError(kind)
        return int(value)
    except (ValueError, UnicodeDecodeError):
        raise InvalidRequest([{"pointer": "/query/cursor", "detail": "not a cursor this server issued"}]) from None
