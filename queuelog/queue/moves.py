"""What every operation shares: the transitions by name, the values of each way out of running, the event
row a move writes, and the refusal when a guarded statement matched nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import NoReturn

from sqlalchemy.engine import Connection

from .. import sql
from ..core.clock import rfc3339, utcnow
from ..core.errors import JobNotFound, QueueError, StateConflict
from ..ops import observe_changes
from ..sql import Claim, JobRow, Leave, Log
from ..states import BY_ACTION, FINAL, Actor, JobStatus, Transition, spell
from ..waiting import wakeup
from . import dependencies, flow

ENQUEUE, CLAIM, HEARTBEAT, COMPLETE = (BY_ACTION[a] for a in ("enqueue", "claim", "heartbeat", "complete"))
FAIL_RETRY, FAIL_FINAL, RELEASE = (BY_ACTION[a] for a in ("fail_retry", "fail_final", "release"))
REAP_RETRY, REAP_FINAL = BY_ACTION["reap_retry"], BY_ACTION["reap_final"]
CANCEL, RETRY = BY_ACTION["cancel"], BY_ACTION["retry"]
TIMEOUT_RETRY, TIMEOUT_FINAL = BY_ACTION["timeout_retry"], BY_ACTION["timeout_final"]
EXPIRE, RUN_NOW = BY_ACTION["expire"], BY_ACTION["run_now"]

REAPER = Actor.REAPER.value  # the actor of the cron reaper's changes
SERVER = Actor.SERVER.value  # the actor of changes the server makes by itself


# --- the values of each way out of running, written once --------------------------------------------


def requeued(now: datetime, error: str | None, run_at: datetime, stalled: bool = False) -> Leave:
    """→ pending for another try: the attempt counts against max_retries, the claim is dropped."""
    return Leave(
        JobStatus.PENDING,
        Claim.DROP,
        now,
        run_at=run_at,
        spends_retry=True,
        stalled=stalled,
        sets_error=True,
        error=error,
    )


def failed(now: datetime, error: str | None, stalled: bool = False) -> Leave:
    """→ failed for good: the claim ends, who ran the job stays on its record."""
    return Leave(JobStatus.FAILED, Claim.END, now, stalled=stalled, sets_error=True, error=error)


def given_back(now: datetime, run_at: datetime | None) -> Leave:
    """→ pending, no attempt counted: the claim is dropped (``run_at`` None: the job keeps its run_at)."""
    return Leave(JobStatus.PENDING, Claim.DROP, now, run_at=run_at)


# --- events, refusals --------------------------------------------------------------------------------


def event_row(
    transition: Transition, actor: str, now: datetime, error: str | None = None, from_status: JobStatus | None = None
) -> Log:
    """The event row ``transition`` writes for each job it moves (from its one from-status, unless given)."""
    if from_status is None and transition.from_statuses:
        (from_status,) = transition.from_statuses
    return Log(transition.event.value, from_status.value if from_status else None, actor, now, error)


def changed(conn: Connection, transition: Transition, rows: list[JobRow], log: Log, notified: bool = False) -> None:
    """After a statement moved ``rows``: count and log the changes; wake waiting claims for new pending jobs,
    and for the room a limited type's finished jobs leave. Jobs now final decide their waiting children
    (workflows), and wake the producers waiting for them. ``notified``: the statement sent PostgreSQL's
    NOTIFY for the new pending jobs itself."""
    if not rows:
        return
    observe_changes([(row, log.from_status, log.event, log.actor, log.error) for row in rows])
    if transition.to_status is JobStatus.PENDING:
        wakeup.jobs_ready(conn, notified, min(row.fair_tag for row in rows))
    else:
        flow.slots_freed(conn, rows, log.from_status)
    if transition.to_status in FINAL:
        dependencies.after_final(conn, rows, log.at)
        if any(row.watched for row in rows):
            wakeup.jobs_finished(conn)


def refuse(
    conn: Connection, job_id: int, verb: str, transition: Transition, owner_key_id: int | None = None
) -> NoReturn:
    raise refusal(conn, job_id, verb, transition, owner_key_id)


def refusal(
    conn: Connection, job_id: int, verb: str, transition: Transition, owner_key_id: int | None = None
) -> QueueError:
    """Why a guarded statement matched nothing: no such job (404), or a state ``transition`` does not leave (409)."""
    job = sql.job(conn, job_id)
    if job is None or (owner_key_id is not None and job.producer_key_id != owner_key_id):
        return JobNotFound(f"job {job_id} does not exist")
    if (
        Actor.HOLDER in transition.actors
        and job.status == JobStatus.RUNNING
        and job.timeout_at is not None
        and job.timeout_at <= utcnow()
    ):
        why = f"its run timed out at {rfc3339(job.timeout_at)} (timeout_seconds {job.timeout_seconds})"
    elif Actor.HOLDER in transition.actors:
        why = f"it is {job.status} and not held by this worker under this claim token"
    else:
        why = f"it is {job.status}, not {spell(transition.from_statuses)}"
    return StateConflict(f"cannot {verb} job {job_id}: {why}", job_status=job.status)
