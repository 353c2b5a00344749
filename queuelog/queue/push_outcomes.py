"""What push deliveries write: each delivery in its job's event log, then what its answer decided.

The answers are written in batches (the dispatcher's recorder hands over every answer that came in meanwhile):
the "delivered" events of a batch, the types' last deliveries and the completions it decided share one
transaction, so a commit is paid per batch, not per job. The decisions are the holding worker's own moves
(``operations``: complete, fail, release), made as the type's push worker under the claim token the delivery was
sent, so a delivery whose lease was reaped meanwhile moves nothing, exactly like a worker's late answer.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import Integer, Text, insert, literal, select
from sqlalchemy.engine import Connection

from ..auth.keys import Caller
from ..core.clock import utcnow
from ..core.errors import QueueError
from ..database.transactions import retried_when_moved, write_transaction
from ..models import Job, JobEvent, UTCDateTime
from ..ops import observe_changes
from ..sql import JobRow
from ..states import Event, JobStatus
from . import operations, push_targets
from .push_access import push_caller
from .push_targets import LastDelivery

log = logging.getLogger("queuelog.push")
events_table = JobEvent.__table__
jobs = Job.__table__
RUNNING = JobStatus.RUNNING.value


class Decision(enum.Enum):
    COMPLETE = "complete"  # sync 2xx
    ACCEPTED = "accepted"  # async 2xx: the target holds the job now
    LATER = "later"  # 429, 503: back after a delay, no failure counted
    FAIL = "fail"  # any other answer, or none


@dataclass(frozen=True)
class Answered:
    """One delivery's answer and what it decided."""

    row: JobRow  # the job as claimed for the delivery (its claim token)
    http_status: int | None  # None: no answer came
    error: str | None  # scrubbed; None for a 2xx
    decision: Decision
    result: dict | None = None  # COMPLETE: the answer's JSON object
    delay: timedelta | None = None  # LATER: how long the target asked to wait (None: the retry backoff)


@retried_when_moved
def record(answered: list[Answered]) -> None:
    """Write a batch of answers: per type, the deliveries and completions in one transaction, then the rest."""
    by_type: dict[str, list[Answered]] = {}
    for answer in answered:
        by_type.setdefault(answer.row.type, []).append(answer)
    for job_type, answers in by_type.items():
        _record_type(push_caller(job_type), answers)


def _record_type(caller: Caller, answers: list[Answered]) -> None:
    logged: list[Answered] = []  # the answers whose claim still held their job

    def log_first(conn: Connection) -> None:
        logged.extend(_log(conn, caller, answers))
        observe_changes([(a.row, RUNNING, Event.DELIVERED.value, caller.actor, a.error) for a in logged])

    completions = [
        (answer.row.id, answer.row.claim_token, answer.result)
        for answer in answers
        if answer.decision is Decision.COMPLETE
    ]
    if completions:
        for outcome in operations.complete_many(caller, completions, first=log_first):
            if isinstance(outcome, QueueError):  # reaped while out, as in _decide_alone
                log.info("a push delivery's completion was not applied: %s", outcome.detail)
    else:
        with write_transaction() as conn:
            log_first(conn)
    for answer in answers:
        _decide_alone(caller, answer)


@retried_when_moved
def log_delivery(row: JobRow, caller: Caller, http_status: int | None, error: str | None) -> bool:
    """One delivery's "delivered" event, alone, with no decision: True if its claim still held the job (else
    nothing is logged). The dispatcher writes batches (``record``); the tests use this to make a delivery."""
    answer = Answered(row, http_status, error, Decision.ACCEPTED)
    with write_transaction() as conn:
        logged = _log(conn, caller, [answer])
        observe_changes([(row, RUNNING, Event.DELIVERED.value, caller.actor, error) for _ in logged])
    return bool(logged)


def _log(conn: Connection, caller: Caller, answers: list[Answered]) -> list[Answered]:
    """The "delivered" event of each answer whose claim still holds its job (it stays running), and the type's
    last delivery; the answers logged."""
    now = utcnow()
    columns = ["job_id", "event", "from_status", "to_status", "actor", "attempt", "error", "at", "http_status"]
    logged = []
    for answer in answers:
        row = answer.row
        held = select(
            jobs.c.id,
            literal(Event.DELIVERED.value),
            literal(RUNNING),
            literal(RUNNING),
            literal(caller.actor),
            jobs.c.retry_count,
            literal(answer.error, Text),
            literal(now, UTCDateTime),
            literal(answer.http_status, Integer),
        ).where(
            jobs.c.id == row.id,
            jobs.c.status == RUNNING,
            jobs.c.worker_id == caller.name,
            jobs.c.claim_token == row.claim_token,
        )
        # RETURNING, not rowcount: psycopg reports -1 for an INSERT … SELECT run this way.
        if conn.execute(insert(events_table).from_select(columns, held).returning(events_table.c.id)).first():
            logged.append(answer)
    last = answers[-1]
    push_targets.note_delivery(conn, last.row.type, LastDelivery(now, last.row.id, last.http_status, last.error))
    return logged


def _decide_alone(caller: Caller, answer: Answered) -> None:
    """The moves a batch does not share: a failed attempt, a job put off. (A completion was made with the batch.)"""
    row = answer.row
    try:
        if answer.decision is Decision.FAIL:
            operations.fail(caller, row.id, row.claim_token, answer.error or "the delivery failed", retryable=True)
        elif answer.decision is Decision.LATER:
            delay = answer.delay if answer.delay is not None else operations.backoff_delay(row.retry_count)
            why = f"{answer.error} (sent again in {delay.total_seconds():.0f} s)"
            operations.release(row.id, caller.actor, caller=caller, token=row.claim_token, delay=delay, why=why)
    except QueueError as refused:
        # The lease ran out and the job was reaped (or an admin moved it) while the delivery was out.
        log.info("push delivery of job %d (%s): its answer was not applied: %s", row.id, row.type, refused.detail)
