"""The queue's operations: the only code that changes a job's state.

Each operation decides; a statement of ``queuelog.sql`` carries the decision out. An operation picks
the transition of ``states.TRANSITIONS`` that the request asks for, the values it writes, the event it
logs, and, when the guarded statement matched nothing, the refusal: 404 when there is no such job (for
this caller), 409 when the job's state does not allow the move. Guards live in the statements' WHERE
clauses and each statement writes its event rows with it, so there is no read-then-write race.

Views, CLI commands and pages call these functions; none of them writes ``status`` itself.
"""
from __future__ import annotations

import hashlib
import json
import random
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple, NoReturn

from flask import current_app
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from . import sql, wakeup
from .clock import rfc3339, utcnow
from .database import write_transaction
from .errors import (Forbidden, IdempotencyConflict, InvalidRequest, JobNotFound, QueueError,
                     StateConflict)
from .keys import Caller
from .models import Role
from .ops import observe_changes
from .patterns import Priority
from .queries import max_job_id
from .scrub import scrub_error
from .sql import Claim, JobRow, Leave, Log, NewJobRow
from .states import BY_ACTION, Actor, JobStatus, Transition, spell

ENQUEUE, CLAIM, HEARTBEAT, COMPLETE = (BY_ACTION[a] for a in ("enqueue", "claim", "heartbeat", "complete"))
FAIL_RETRY, FAIL_FINAL, RELEASE = (BY_ACTION[a] for a in ("fail_retry", "fail_final", "release"))
REAP_RETRY, REAP_FINAL = BY_ACTION["reap_retry"], BY_ACTION["reap_final"]
CANCEL, RETRY = BY_ACTION["cancel"], BY_ACTION["retry"]

REAPER = Actor.REAPER.value   # the actor of the cron reaper's changes
SERVER = Actor.SERVER.value   # the actor of changes the server makes by itself


@dataclass(frozen=True)
class NewJob:
    """A validated enqueue request."""

    type: str
    payload: dict
    priority: int = Priority.LOW.value
    max_retries: int = 3
    idempotency_key: str | None = None
    run_at: datetime | None = None

    def digest(self) -> str:
        """Fingerprint of the request, to tell a retry of it from a different request under one key."""
        body = {"type": self.type, "payload": self.payload, "priority": self.priority,
                "max_retries": self.max_retries, "run_at": rfc3339(self.run_at)}
        return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class Enqueued(NamedTuple):
    """An enqueue's answer for one job: the job, and whether this request created it."""

    job: JobRow
    created: bool    # False: the request repeats an idempotency key, and this is the job made for it


class Completion(NamedTuple):
    """One item of a batch complete: the job, the claim token it is held under, its result."""

    job_id: int
    token: str
    result: dict | None


@dataclass
class ReapReport:
    requeued: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    quarantined: list[int] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.requeued) + len(self.failed) + len(self.quarantined)


# --- enqueue ------------------------------------------------------------------------------------

def enqueue(caller: Caller, new_jobs: list[NewJob], batch: bool = False) -> list[Enqueued]:
    """Add jobs all-or-nothing; returns (job, created) per item, created=False for an idempotent replay.

    ``batch`` says the jobs came as a list, so a refusal points at /jobs/<index>/… even for a list of one.
    """
    _check_enqueue_policy(caller, new_jobs, batch)
    for attempt in range(3):
        try:
            return _insert_jobs(caller, new_jobs, batch)
        except IntegrityError:
            # A concurrent request with the same idempotency key won the unique constraint;
            # a second pass finds its job and answers with it.
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _check_enqueue_policy(caller: Caller, new_jobs: list[NewJob], batch: bool) -> None:
    allowlist = set(current_app.config["JOB_TYPES"])
    problems = []
    for index, job in enumerate(new_jobs):
        prefix = f"/jobs/{index}" if batch else ""
        if job.type not in allowlist:
            problems.append({"pointer": f"{prefix}/type", "detail": f"job type {job.type!r} is not allowed here"})
    if problems:
        raise InvalidRequest(problems)
    for job in new_jobs:
        if not caller.may_use_type(job.type):
            raise Forbidden(f"this key may not enqueue jobs of type {job.type!r}")
        if caller.role == Role.PRODUCER.value and job.priority > caller.max_priority:
            raise Forbidden(
                f"this key may enqueue up to priority {Priority.label_of(caller.max_priority)!r}, "
                f"not {Priority.label_of(job.priority)!r}"
            )


class _Insert(NamedTuple):
    """An item that makes a new job."""

    row: NewJobRow


class _Earlier(NamedTuple):
    """An item repeating an earlier request's idempotency key: answered with the job made then."""

    job: JobRow


class _AsItem(NamedTuple):
    """An item repeating an earlier item of this batch (same key, same request): answered with its job."""

    index: int


def _insert_jobs(caller: Caller, new_jobs: list[NewJob], batch: bool) -> list[Enqueued]:
    """One transaction: find the jobs the request's idempotency keys already name, insert the rest."""
    now = utcnow()
    keys = [job.idempotency_key for job in new_jobs if job.idempotency_key]
    with write_transaction() as conn:
        earlier = {row.idempotency_key: row for row in sql.jobs_by_key(conn, caller.id, keys)} if keys else {}
        steps = _enqueue_steps(caller, new_jobs, earlier, batch, now)
        inserts = [step.row for step in steps if isinstance(step, _Insert)]
        made: list[JobRow] = []
        if inserts:
            log = _log(ENQUEUE, caller.actor, now)
            made = sql.insert_jobs(conn, inserts, log)
            _changed(conn, ENQUEUE, made, log)
    # The new jobs came back in the order of their items; an item repeating one of this batch comes after it.
    created = iter(made)
    answers: list[Enqueued] = []
    for step in steps:
        if isinstance(step, _Insert):
            answers.append(Enqueued(next(created), True))
        elif isinstance(step, _Earlier):
            answers.append(Enqueued(step.job, False))
        else:
            answers.append(Enqueued(answers[step.index].job, False))
    return answers


def _enqueue_steps(caller: Caller, new_jobs: list[NewJob], earlier: dict[str, JobRow], batch: bool,
                   now: datetime) -> list[_Insert | _Earlier | _AsItem]:
    """What each item does: insert a new job, or answer with the job an idempotency key already names."""
    first_with_key: dict[str, int] = {}
    steps: list[_Insert | _Earlier | _AsItem] = []
    for index, job in enumerate(new_jobs):
        key, digest = job.idempotency_key, job.digest()
        if key and key in earlier:
            if earlier[key].request_digest != digest:
                raise _key_reused(f"idempotency key {key!r} was already used for a different request", index, batch)
            steps.append(_Earlier(earlier[key]))
        elif key and key in first_with_key:
            if new_jobs[first_with_key[key]].digest() != digest:
                raise _key_reused(f"idempotency key {key!r} is used twice in this batch", index, batch)
            steps.append(_AsItem(first_with_key[key]))
        else:
            if key:
                first_with_key[key] = index
            steps.append(_Insert(NewJobRow(
                type=job.type, payload=json.dumps(job.payload, separators=(",", ":")), priority=job.priority,
                status=ENQUEUE.to_status.value, retry_count=0, max_retries=job.max_retries, stall_count=0,
                idempotency_key=key, request_digest=digest, producer_key_id=caller.id, producer=caller.name,
                run_at=job.run_at or now, created_at=now, updated_at=now)))
    return steps


def _key_reused(detail: str, index: int, batch: bool) -> IdempotencyConflict:
    # A 422 like any other: it names the field, so clients can treat every 422 alike.
    pointer = f"/jobs/{index}/idempotency_key" if batch else "/idempotency_key"
    return IdempotencyConflict(detail, errors=[{"pointer": pointer, "detail": detail}])


# --- claim and the holding worker's moves ---------------------------------------------------------

def claim(caller: Caller, types: list[str] | None = None, limit: int = 1,
          lease_seconds: int | None = None) -> list[JobRow]:
    """Atomically take up to ``limit`` due jobs, highest priority first, then oldest."""
    if types is not None:
        refused = [t for t in types if not caller.may_use_type(t)]
        if refused:
            raise Forbidden(f"this key may not claim jobs of type {refused[0]!r}")
        wanted: tuple[str, ...] | None = tuple(types)
    else:
        wanted = caller.allowed_types
    now = utcnow()
    lease = timedelta(seconds=lease_seconds or current_app.config["LEASE_SECONDS"])
    log = _log(CLAIM, caller.actor, now)
    with write_transaction() as conn:
        rows = sql.claim(conn, now=now, lease_until=now + lease, worker=caller.name,
                         token=secrets.token_urlsafe(24), limit=limit, types=wanted, log=log)
        _changed(conn, CLAIM, rows, log)
    return sorted(rows, key=lambda row: (-row.priority, row.id))


def complete(caller: Caller, job_id: int, token: str, result: dict | None = None) -> JobRow:
    """running → completed, only for the worker holding the current claim."""
    now = utcnow()
    with write_transaction() as conn:
        rows = _complete_held(conn, caller, [job_id], token, _json(result), now)
        if not rows:
            _refuse(conn, job_id, "complete", COMPLETE)
    return rows[0]


def complete_many(caller: Caller, items: list[tuple[int, str, dict | None]]) -> list[JobRow | QueueError]:
    """Complete several held jobs, (id, claim_token, result) each, in one transaction.

    Each item passes the same guard as ``complete``; a refused item (404/409) is answered with its
    error in place of the row and does not undo the others.
    """
    completions = [Completion(*item) for item in items]
    outcomes: dict[int, JobRow | QueueError] = {
        # An id the column cannot hold names no job; binding it would fail in the driver.
        index: JobNotFound(f"job {item.job_id} does not exist")
        for index, item in enumerate(completions) if item.job_id > max_job_id()}
    now = utcnow()
    with write_transaction() as conn:
        for batch in _completion_batches(completions, skip=outcomes.keys()):
            done = {row.id: row for row in _complete_held(
                conn, caller, [completions[i].job_id for i in batch.indexes], batch.token, batch.result, now)}
            for index in batch.indexes:
                job_id = completions[index].job_id
                outcomes[index] = done[job_id] if job_id in done else _refusal(conn, job_id, "complete", COMPLETE)
    return [outcomes[index] for index in range(len(completions))]


class _CompletionBatch(NamedTuple):
    """Items completed by one guarded statement: they share a claim token and a result."""

    token: str
    result: str | None   # JSON text
    indexes: list[int]


def _completion_batches(items: list[Completion], skip) -> list[_CompletionBatch]:
    """Items that share a token and a result (a batch claim acknowledged together) go in one statement.

    An id listed twice makes every item its own statement, in order, so the earlier item wins exactly
    as it would alone.
    """
    todo = [index for index in range(len(items)) if index not in skip]
    ids = [item.job_id for item in items]
    if len(set(ids)) < len(ids):
        return [_CompletionBatch(items[i].token, _json(items[i].result), [i]) for i in todo]
    batches: dict[tuple[str, str | None], list[int]] = {}
    for index in todo:
        batches.setdefault((items[index].token, _json(items[index].result)), []).append(index)
    return [_CompletionBatch(token, result, indexes) for (token, result), indexes in batches.items()]


def _complete_held(conn: Connection, caller: Caller, job_ids: list[int], token: str, result: str | None,
                   now: datetime) -> list[JobRow]:
    """FINISH as a complete: the jobs completed; those the caller does not hold under ``token`` stay as they are."""
    leave = Leave(COMPLETE.to_status, now, Claim.END, result_set=True, result=result, completed_at=now)
    log = _log(COMPLETE, caller.actor, now)
    rows = sql.finish(conn, job_ids, caller.name, token, leave, log)
    _changed(conn, COMPLETE, rows, log)
    return rows


def fail(caller: Caller, job_id: int, token: str, error: str | None, retryable: bool = True) -> JobRow:
    """running → pending with backoff while retries remain, else → failed."""
    error = scrub_error(error, current_app.config["MAX_ERROR_CHARS"])
    now = utcnow()
    with write_transaction() as conn:
        # The retry budget read here cannot change while this claim stands: every move that changes it
        # ends the claim, and FINISH, guarded by the claim, then matches nothing.
        job = sql.job(conn, job_id)
        if job is not None and retryable and job.retry_count < job.max_retries:
            transition, leave = FAIL_RETRY, _requeued(now, error, run_at=now + backoff_delay(job.retry_count))
        else:
            transition, leave = FAIL_FINAL, _failed(now, error)
        log = _log(transition, caller.actor, now, error=error)
        rows = sql.finish(conn, [job_id], caller.name, token, leave, log)
        if not rows:
            _refuse(conn, job_id, "fail", transition)
        _changed(conn, transition, rows, log)
    return rows[0]


def backoff_delay(retry_count: int) -> timedelta:
    """BASE × 2^retry_count seconds, capped at MAX, with jitter so failed jobs do not return in step."""
    base = current_app.config["RETRY_BACKOFF_BASE"]
    cap = current_app.config["RETRY_BACKOFF_MAX"]
    delay = min(cap, base * (2 ** min(retry_count, 40)))
    return timedelta(seconds=delay * random.uniform(0.5, 1.0))


def heartbeat(caller: Caller, job_id: int, token: str, lease_seconds: int | None = None) -> JobRow:
    """Extend the lease of a job the caller holds (no event: nothing changes but the lease)."""
    now = utcnow()
    lease = timedelta(seconds=lease_seconds or current_app.config["LEASE_SECONDS"])
    leave = Leave(HEARTBEAT.to_status, now, Claim.KEEP, lease_until=now + lease)
    with write_transaction() as conn:
        rows = sql.finish(conn, [job_id], caller.name, token, leave, log=None)
        if not rows:
            _refuse(conn, job_id, "heartbeat", HEARTBEAT)
    return rows[0]


def release(job_id: int, actor: str, caller: Caller | None = None, token: str | None = None) -> JobRow:
    """running → pending without counting a failure: a worker shutting down, or an admin giving it back."""
    now = utcnow()
    leave = _given_back(now, run_at=now)
    log = _log(RELEASE, actor, now)
    with write_transaction() as conn:
        if caller is not None:
            rows = sql.finish(conn, [job_id], caller.name, token or "", leave, log)
        else:
            rows = sql.take_back(conn, [job_id], None, leave, log)   # an admin: whatever claim is current
        if not rows:
            _refuse(conn, job_id, "release", RELEASE)
        _changed(conn, RELEASE, rows, log)
    return rows[0]


def give_back_unanswered(rows: list[JobRow]) -> None:
    """running → pending, no failure counted: jobs claimed for a client that hung up before the answer.

    Nobody would run them or renew their lease; given back at once they are not stuck until reaped.
    Each is guarded by the claim token it was just given, so a job already moved on is left alone;
    each keeps its run_at, so its place in the queue.
    """
    now = utcnow()
    leave = _given_back(now, run_at=None)
    log = _log(RELEASE, SERVER, now, error="the claiming worker hung up before the answer")
    by_token: dict[str, list[int]] = {}
    for claimed in rows:
        by_token.setdefault(claimed.claim_token, []).append(claimed.id)
    with write_transaction() as conn:
        for token, ids in by_token.items():
            _changed(conn, RELEASE, sql.take_back(conn, ids, token, leave, log), log)


# --- producer and admin actions ------------------------------------------------------------------

def cancel(job_id: int, actor: str, owner_key_id: int | None = None) -> JobRow:
    """pending → cancelled. ``owner_key_id`` limits a producer to its own jobs (others are 'not found')."""
    now = utcnow()
    log = _log(CANCEL, actor, now)
    with write_transaction() as conn:
        row = sql.cancel(conn, job_id, owner_key_id, now, log)
        if row is None:
            _refuse(conn, job_id, "cancel", CANCEL, owner_key_id=owner_key_id)
        _changed(conn, CANCEL, [row], log)
    return row


def retry(job_id: int, actor: str) -> JobRow:
    """failed or cancelled → pending with a fresh retry budget (an admin's decision)."""
    rows = retry_many([job_id], actor)
    if not rows:
        with write_transaction() as conn:
            _refuse(conn, job_id, "retry", RETRY)
    return rows[0]


def retry_many(job_ids: list[int], actor: str) -> list[JobRow]:
    """Retry every listed job that is failed or cancelled; others are left as they are."""
    if not job_ids:
        return []
    now = utcnow()
    rows: list[JobRow] = []
    with write_transaction() as conn:
        # One statement per from-status, so each event row says where its job came from.
        for from_status in (status for status in JobStatus if status in RETRY.from_statuses):
            log = _log(RETRY, actor, now, from_status=from_status)
            retried = sql.retry(conn, job_ids, from_status.value, now, log)
            _changed(conn, RETRY, retried, log)
            rows += retried
    return sorted(rows, key=lambda row: row.id)


# --- reaping -------------------------------------------------------------------------------------

def reap(older_than: int | None = None, dry_run: bool = False, now: datetime | None = None,
         actor: str = REAPER) -> ReapReport:
    """Give back running jobs whose lease ran out (or claimed more than ``older_than`` seconds ago).

    Each goes to pending with retry_count + 1, or to failed when no retry is left; a job whose
    workers died holding it MAX_STALLS times is quarantined as failed, so it cannot take down the fleet.
    A job completed meanwhile is never touched: every take-back re-checks status and claim token.
    ``actor`` is who asked, for the event log: the cron reaper, or an admin pressing "reap now".
    """
    now = now or utcnow()
    max_stalls = current_app.config["MAX_STALLS"]
    claimed_before = None if older_than is None else now - timedelta(seconds=older_than)
    report = ReapReport()
    with write_transaction() as conn:
        for job in sql.stalled(conn, now, claimed_before):
            stalls = job.stall_count + 1
            if stalls >= max_stalls:
                transition, bucket = REAP_FINAL, report.quarantined
                error = f"quarantined: its worker died {stalls} times"
            elif job.retry_count < job.max_retries:
                transition, bucket = REAP_RETRY, report.requeued
                error = f"worker {job.worker_id} stopped heartbeating; its lease expired"
            else:
                transition, bucket = REAP_FINAL, report.failed
                error = f"worker {job.worker_id} stopped heartbeating and no retries are left"
            if dry_run:
                bucket.append(job.id)
                continue
            if transition is REAP_RETRY:
                leave = _requeued(now, error, run_at=now, stalls=1)
            else:
                leave = _failed(now, error, stalls=1)
            log = _log(transition, actor, now, error=error)
            taken = sql.take_back(conn, [job.id], job.claim_token, leave, log)
            if taken:  # else it finished between our read and our write: left alone
                bucket.append(job.id)
                _changed(conn, transition, taken, log)
    return report


# --- the values of each way out of running, written once --------------------------------------------

def _requeued(now: datetime, error: str | None, run_at: datetime, stalls: int = 0) -> Leave:
    """→ pending for another try: the attempt counts against max_retries, the claim is dropped."""
    return Leave(JobStatus.PENDING, now, Claim.DROP, retries_spent=1, stalls=stalls, run_at=run_at,
                 error_set=True, error=error)


def _failed(now: datetime, error: str | None, stalls: int = 0) -> Leave:
    """→ failed for good: the claim ends, who ran the job stays on its record."""
    return Leave(JobStatus.FAILED, now, Claim.END, stalls=stalls, error_set=True, error=error)


def _given_back(now: datetime, run_at: datetime | None) -> Leave:
    """→ pending, no attempt counted: the claim is dropped (``run_at`` None: the job keeps its run_at)."""
    return Leave(JobStatus.PENDING, now, Claim.DROP, run_at=run_at)


# --- events, refusals --------------------------------------------------------------------------------

def _log(transition: Transition, actor: str, now: datetime, error: str | None = None,
         from_status: JobStatus | None = None) -> Log:
    """The event row ``transition`` writes for each job it moves (from its one from-status, unless given)."""
    if from_status is None and transition.from_statuses:
        (from_status,) = transition.from_statuses
    return Log(transition.event.value, from_status.value if from_status else None, actor, now, error)


def _changed(conn: Connection, transition: Transition, rows: list[JobRow], log: Log) -> None:
    """After a statement moved ``rows``: count and log the changes; wake waiting claims for new pending jobs."""
    if not rows:
        return
    observe_changes([(row, log.from_status, log.event, log.actor, log.error) for row in rows])
    if transition.to_status is JobStatus.PENDING:
        wakeup.jobs_ready(conn)


def _refuse(conn: Connection, job_id: int, verb: str, transition: Transition,
            owner_key_id: int | None = None) -> NoReturn:
    raise _refusal(conn, job_id, verb, transition, owner_key_id)


def _refusal(conn: Connection, job_id: int, verb: str, transition: Transition,
             owner_key_id: int | None = None) -> QueueError:
    """Why a guarded statement matched nothing: no such job (404), or a state ``transition`` does not leave (409)."""
    job = sql.job(conn, job_id)
    if job is None or (owner_key_id is not None and job.producer_key_id != owner_key_id):
        return JobNotFound(f"job {job_id} does not exist")
    if Actor.HOLDER in transition.actors:
        why = f"it is {job.status} and not held by this worker under this claim token"
    else:
        why = f"it is {job.status}, not {spell(transition.from_statuses)}"
    return StateConflict(f"cannot {verb} job {job_id}: {why}", job_status=job.status)


def _json(result: dict | None) -> str | None:
    return None if result is None else json.dumps(result, separators=(",", ":"))
