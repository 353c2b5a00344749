"""What a push delivery writes: the delivery itself in the job's event log, then what its answer decides.

The answer decides with the holding worker's own moves (``operations``: complete, fail, release), made as the
type's push worker under the claim token the delivery was sent, so a delivery whose lease was reaped meanwhile
moves nothing, exactly like a worker's late answer.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Integer, Text, insert, literal, select

from ..auth.keys import Caller
from ..core.clock import utcnow
from ..database.transactions import write_transaction
from ..models import Job, JobEvent, UTCDateTime
from ..ops import observe_changes
from ..sql import JobRow
from ..states import Event, JobStatus
from . import operations, push_targets
from .push_targets import LastDelivery

events_table = JobEvent.__table__
jobs = Job.__table__
RUNNING = JobStatus.RUNNING.value


def log_delivery(row: JobRow, caller: Caller, http_status: int | None, error: str | None) -> bool:
    """The job's "delivered" event, if the delivery's claim still holds it (it stays running), and the type's
    last delivery, in one transaction. False when the job had moved on (reaped, given back): no event then."""
    now = utcnow()
    held = select(
        jobs.c.id,
        literal(Event.DELIVERED.value),
        literal(RUNNING),
        literal(RUNNING),
        literal(caller.actor),
        jobs.c.retry_count,
        literal(error, Text),
        literal(now, UTCDateTime),
        literal(http_status, Integer),
    ).where(
        jobs.c.id == row.id,
        jobs.c.status == RUNNING,
        jobs.c.worker_id == caller.name,
        jobs.c.claim_token == row.claim_token,
    )
    columns = ["job_id", "event", "from_status", "to_status", "actor", "attempt", "error", "at", "http_status"]
    with write_transaction() as conn:
        logged = conn.execute(insert(events_table).from_select(columns, held)).rowcount == 1
        push_targets.note_delivery(conn, row.type, LastDelivery(now, row.id, http_status, error))
    if logged:
        observe_changes([(row, RUNNING, Event.DELIVERED.value, caller.actor, error)])
    return logged


def completed(row: JobRow, caller: Caller, result: dict | None) -> None:
    operations.complete(caller, row.id, row.claim_token, result)


def failed(row: JobRow, caller: Caller, error: str) -> None:
    """A failed attempt: back with a backoff while retries remain, else failed, as a worker's failure."""
    operations.fail(caller, row.id, row.claim_token, error, retryable=True)


def come_back_later(row: JobRow, caller: Caller, delay: timedelta, why: str) -> None:
    """The target asked for the job later (429, 503): back to pending after ``delay``, no failure counted."""
    operations.release(row.id, caller.actor, caller=caller, token=row.claim_token, delay=delay, why=why)
