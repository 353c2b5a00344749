"""Schedules: create, read, change, delete, run now. The ticks that enqueue their jobs are ``firing``'s."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import datetime

from flask import current_app
from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from ..auth.keys import Caller
from ..core import telemetry
from ..core.clock import utcnow
from ..core.errors import InvalidRequest, QueueError
from ..core.patterns import Priority
from ..database.transactions import read_connection, write_transaction
from ..models import Job, Role, Schedule
from ..queue import NewJob
from ..queue.enqueueing import enqueue_in
from ..sql import JobRow
from .spec import NAME, JobTemplate, Spec, check_spec
from .timing import Timing

schedules = Schedule.__table__
jobs = Job.__table__

#: The advisory lock of schedule creates on PostgreSQL ("qulgsche"; any fixed 64-bit number no other lock
#: uses): creates take turns, so two cannot both count one place left under QUEUELOG_MAX_SCHEDULES.
_CREATES_LOCK = 0x7175_6C67_7363_6865


class ScheduleNotFound(QueueError):
    status = 404
    title = "Not found"


class ScheduleExists(QueueError):
    status = 409
    title = "Conflict"


class ScheduleLimitReached(QueueError):
    """The server holds QUEUELOG_MAX_SCHEDULES schedules already; nothing was created. 409."""

    status = 409
    title = "Too many schedules"
    problem = "max-schedules-reached"


@dataclass(frozen=True)
class ScheduleState:
    """A schedule as stored: what its owner set, when it ticks next, and its last job."""

    id: int
    spec: Spec
    next_run_at: datetime
    last_run_at: datetime | None
    last_job_id: int | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of_row(cls, row) -> ScheduleState:
        spec = Spec(
            name=row.name,
            timing=Timing(row.cron, row.every_seconds, row.timezone),
            job=JobTemplate(row.job_type, json.loads(row.payload), row.priority, row.max_retries),
            paused=bool(row.paused),
            catch_up=row.catch_up,
        )
        return cls(row.id, spec, row.next_run_at, row.last_run_at, row.last_job_id, row.created_at, row.updated_at)


@dataclass(frozen=True)
class ScheduleCaller(Caller):
    """Who enqueues a schedule's jobs: no key (no quota, any allowed type, any priority); the job's producer
    is ``schedule:NAME``, its event names ``who`` (the schedule's tick, or whoever asked to run it now)."""

    who: str = ""

    @property
    def actor(self) -> str:
        return self.who or self.name

    @classmethod
    def of(cls, schedule_name: str, who: str | None = None) -> ScheduleCaller:
        name = f"schedule:{schedule_name}"
        return cls(None, name, Role.ADMIN.value, Priority.CRITICAL.value, None, None, who=who or name)


# --- reading -----------------------------------------------------------------------------------------


def list_schedules() -> list[ScheduleState]:
    """Every schedule, by name (the pages and the CLI; QUEUELOG_MAX_SCHEDULES bounds them)."""
    with read_connection() as conn:
        rows = conn.execute(select(schedules).order_by(schedules.c.name)).all()
    return [ScheduleState.of_row(row) for row in rows]


def page_of_schedules(limit: int, cursor: str | None) -> tuple[list[ScheduleState], str | None]:
    """Up to ``limit`` schedules by name, after ``cursor``; and the cursor of the next page (None: the last).

    Keyset-paginated on the unique name, like GET /jobs on the id: a schedule created or deleted meanwhile
    neither repeats one nor skips one of the others.
    """
    query = select(schedules).order_by(schedules.c.name).limit(limit + 1)
    if cursor:
        query = query.where(schedules.c.name > decode_cursor(cursor))
    with read_connection() as conn:
        rows = conn.execute(query).all()
    next_cursor = encode_cursor(rows[limit - 1].name) if len(rows) > limit else None
    return [ScheduleState.of_row(row) for row in rows[:limit]], next_cursor


def encode_cursor(last_name: str) -> str:
    return base64.urlsafe_b64encode(f"name:{last_name}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    """The name a cursor of ``page_of_schedules`` ends at, or InvalidRequest (pointer /cursor, as GET /jobs)."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except ValueError:  # binascii.Error and UnicodeDecodeError among them
        text = ""
    kind, _, name = text.partition(":")
    if kind != "name" or not NAME.fullmatch(name):
        raise InvalidRequest([{"pointer": "/query/cursor", "detail": "not a cursor this server issued"}])
    return name


def get_schedule(name: str) -> ScheduleState:
    """One schedule by name, or ScheduleNotFound (404)."""
    if not NAME.fullmatch(name):
        # No schedule can have it; and PostgreSQL text cannot even hold some (NUL): a 404, not a driver error.
        raise ScheduleNotFound(f"schedule {name!r} does not exist")
    with read_connection() as conn:
        row = conn.execute(select(schedules).where(schedules.c.name == name)).first()
    if row is None:
        raise ScheduleNotFound(f"schedule {name!r} does not exist")
    return ScheduleState.of_row(row)


def last_jobs(states: list[ScheduleState]) -> dict[int, JobRow]:
    """The last job of each schedule that has one, by job id (gone when purged)."""
    ids = [state.last_job_id for state in states if state.last_job_id is not None]
    if not ids:
        return {}
    with read_connection() as conn:
        rows = conn.execute(select(jobs).where(jobs.c.id.in_(ids))).all()
    return {row.id: row for row in rows}


# --- changing ----------------------------------------------------------------------------------------


def create_schedule(fields: dict) -> ScheduleState:
    """A new schedule from ``fields`` (checked by ``check_spec``); its first tick is the first after now.

    Refused (ScheduleLimitReached, 409) when QUEUELOG_MAX_SCHEDULES exist: counted and inserted in one
    write transaction, creates taking turns, so concurrent creates never pass the limit together.
    """
    spec = check_spec(fields)
    now = utcnow()
    try:
        with write_transaction() as conn:
            if conn.dialect.name == "postgresql":  # SQLite: the write transaction holds the write lock already
                conn.execute(select(func.pg_advisory_xact_lock(_CREATES_LOCK)))
            _refuse_taken_name(conn, spec.name)
            _refuse_past_limit(conn, current_app.config["MAX_SCHEDULES"])
            conn.execute(
                insert(schedules).values(
                    **_columns(spec), next_run_at=spec.timing.next_after(now), created_at=now, updated_at=now
                )
            )
    except IntegrityError:
        raise _name_taken(spec.name) from None  # created by someone else at the same moment
    return get_schedule(spec.name)


def update_schedule(name: str, fields: dict) -> ScheduleState:
    """Change any fields of a schedule. A new timing, or resuming, recomputes the next tick from now: the
    ticks missed while paused are not replayed."""
    if not fields:
        raise InvalidRequest([{"pointer": "", "detail": "name at least one field to change"}])
    current = get_schedule(name)
    spec = check_spec(fields, current.spec)
    now = utcnow()
    values = {**_columns(spec), "updated_at": now}
    if spec.timing != current.spec.timing or (current.spec.paused and not spec.paused):
        values["next_run_at"] = spec.timing.next_after(now)
    try:
        with write_transaction() as conn:
            if spec.name != name:
                _refuse_taken_name(conn, spec.name)
            changed = conn.execute(update(schedules).where(schedules.c.id == current.id).values(**values)).rowcount
    except IntegrityError:
        raise _name_taken(spec.name) from None
    if not changed:
        raise ScheduleNotFound(f"schedule {name!r} does not exist")
    return get_schedule(spec.name)


def delete_schedule(name: str) -> None:
    """Delete a schedule; the jobs it enqueued stay (still naming it)."""
    get_schedule(name)
    with write_transaction() as conn:
        deleted = conn.execute(delete(schedules).where(schedules.c.name == name)).rowcount
    if not deleted:
        raise ScheduleNotFound(f"schedule {name!r} does not exist")


def run_now(name: str, actor: str) -> JobRow:
    """Enqueue the schedule's job once, now, besides its ticks (which stay as they are)."""
    state = get_schedule(name)
    now = utcnow()
    with write_transaction() as conn:
        job = enqueue_job(conn, state.spec, now, actor)
        conn.execute(update(schedules).where(schedules.c.id == state.id).values(last_job_id=job.id))
    return job


def _columns(spec: Spec) -> dict:
    return {
        "name": spec.name,
        "cron": spec.timing.cron,
        "every_seconds": spec.timing.every_seconds,
        "timezone": spec.timing.timezone,
        "job_type": spec.job.type,
        "payload": json.dumps(spec.job.payload, separators=(",", ":")),
        "priority": spec.job.priority,
        "max_retries": spec.job.max_retries,
        "paused": spec.paused,
        "catch_up": spec.catch_up,
    }


def _refuse_taken_name(conn: Connection, name: str) -> None:
    if conn.execute(select(schedules.c.id).where(schedules.c.name == name)).first() is not None:
        raise _name_taken(name)


def _refuse_past_limit(conn: Connection, most: int) -> None:
    """ScheduleLimitReached if the server holds ``most`` schedules (paused ones too: resuming adds no row)."""
    count = conn.execute(select(func.count()).select_from(schedules)).scalar_one()
    if count >= most:
        held = "1 schedule" if count == 1 else f"{count} schedules"
        raise ScheduleLimitReached(
            f"this server has {held} and may have at most {most} "
            f"(QUEUELOG_MAX_SCHEDULES); delete one first, or raise the setting",
            limit=most,
            schedules=count,
        )


def _name_taken(name: str) -> ScheduleExists:
    return ScheduleExists(f"a schedule named {name!r} already exists")


def enqueue_job(conn: Connection, spec: Spec, scheduled_for: datetime, who: str | None) -> JobRow:
    """Enqueue the schedule's job in the caller's write transaction (a tick's, or a run now)."""
    template = spec.job
    # The schedule is the job's producer: its PRODUCER span, whose trace the job's run joins when it records.
    with telemetry.sending([(template.type, None, None)]) as [send]:
        new_job = NewJob(
            type=template.type,
            payload=template.payload,
            priority=template.priority,
            max_retries=template.max_retries,
            schedule=spec.name,
            scheduled_for=scheduled_for,
            traceparent=send.traceparent,
            tracestate=send.tracestate,
        )
        [answer] = enqueue_in(conn, ScheduleCaller.of(spec.name, who), [new_job])
        send.sent(None if answer.job is None else answer.job.id)
    return answer.job
