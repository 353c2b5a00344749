"""The queue's operations: the only code that changes a job's state.

Every transition is an UPDATE guarded in its WHERE clause (status, holder, claim token), run in a
write transaction together with the event that records it. No row back means the guard refused.
Views, CLI commands and pages call these functions; none of them writes ``status`` itself.

The transitions of every job's life (enqueue, claim, complete) run their SQL on the database driver
(``driver_sql``, ``claim_sql``): they are most of the traffic, and Core's per-statement set-up cost more
than the SQL. The rarer ones (fail, heartbeat, release, cancel, retry, reap) use SQLAlchemy Core.
"""
from __future__ import annotations

import hashlib
import json
import random
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from flask import current_app
from sqlalchemy import Row, and_, insert, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from .clock import rfc3339, utcnow
from .database import write_transaction
from .errors import (Forbidden, IdempotencyConflict, InvalidRequest, JobNotFound, QueueError,
                     StateConflict)
from .keys import Caller
from .queries import max_job_id
from .models import Job, JobEvent, JobStatus, Priority, Role
from .ops import observe_changes
from .scrub import scrub_error
from . import claim_sql, driver_sql, wakeup

jobs = Job.__table__
events = JobEvent.__table__

PENDING, RUNNING = JobStatus.PENDING.value, JobStatus.RUNNING.value
COMPLETED, FAILED, CANCELLED = JobStatus.COMPLETED.value, JobStatus.FAILED.value, JobStatus.CANCELLED.value
REAPER = "reaper"
SERVER = "server"   # the actor of changes the server makes by itself


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


@dataclass
class ReapReport:
    requeued: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    quarantined: list[int] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.requeued) + len(self.failed) + len(self.quarantined)


# --- enqueue ------------------------------------------------------------------------------------

def enqueue(caller: Caller, new_jobs: list[NewJob], batch: bool = False) -> list[tuple[Row, bool]]:
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


def _insert_jobs(caller: Caller, new_jobs: list[NewJob], batch: bool = False) -> list[tuple[Row, bool]]:
    now = utcnow()
    keys = [job.idempotency_key for job in new_jobs if job.idempotency_key]
    with write_transaction() as conn:
        existing = {}
        if keys:
            rows = conn.execute(select(jobs).where(
                jobs.c.producer_key_id == caller.id, jobs.c.idempotency_key.in_(set(keys))))
            existing = {row.idempotency_key: row for row in rows}
        results: list[tuple[Row, bool] | None] = [None] * len(new_jobs)
        to_insert: list[tuple[int, dict]] = []
        claimed_keys: dict[str, int] = {}
        for index, job in enumerate(new_jobs):
            digest = job.digest()
            key = job.idempotency_key
            # A 422 like any other: it names the field, so clients can treat every 422 alike.
            pointer = f"/jobs/{index}/idempotency_key" if batch else "/idempotency_key"
            if key and key in existing:
                if existing[key].request_digest != digest:
                    detail = f"idempotency key {key!r} was already used for a different request"
                    raise IdempotencyConflict(detail, errors=[{"pointer": pointer, "detail": detail}])
                results[index] = (existing[key], False)
                continue
            if key and key in claimed_keys:
                if new_jobs[claimed_keys[key]].digest() != digest:
                    detail = f"idempotency key {key!r} is used twice in this batch"
                    raise IdempotencyConflict(detail, errors=[{"pointer": pointer, "detail": detail}])
                continue
            if key:
                claimed_keys[key] = index
            to_insert.append((index, {
                "type": job.type, "payload": json.dumps(job.payload, separators=(",", ":")),
                "priority": job.priority, "status": PENDING, "retry_count": 0,
                "max_retries": job.max_retries, "stall_count": 0, "idempotency_key": key,
                "request_digest": digest, "producer_key_id": caller.id, "producer": caller.name,
                "run_at": job.run_at or now, "created_at": now, "updated_at": now,
            }))
        if to_insert:
            inserted = driver_sql.insert_jobs(conn, [values for _, values in to_insert], caller.actor, now)
            for (index, _), row in zip(to_insert, inserted):
                results[index] = (row, True)
            observe_changes([(row, None, "enqueued", caller.actor, None) for row in inserted])
            wakeup.jobs_ready(conn)
        # Items that repeated a key inside this batch share the job created for it.
        for index, job in enumerate(new_jobs):
            if results[index] is None:
                row, _ = results[claimed_keys[job.idempotency_key]]
                results[index] = (row, False)
    return results  # type: ignore[return-value]


# --- claim and the holding worker's actions ------------------------------------------------------

def claim(caller: Caller, types: list[str] | None = None, limit: int = 1,
          lease_seconds: int | None = None) -> list[Row]:
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
    with write_transaction() as conn:
        rows = claim_sql.claim(conn, now=now, types=wanted, limit=limit, worker=caller.name,
                              token=secrets.token_urlsafe(24), lease_until=now + lease, actor=caller.actor)
        observe_changes([(row, PENDING, "claimed", caller.actor, None) for row in rows])
    return sorted(rows, key=lambda row: (-row.priority, row.id))


def _held_by(caller: Caller, job_id: int, token: str):
    """The guard for a holding worker's action: running, held by this key, under this claim."""
    return and_(jobs.c.id == job_id, jobs.c.status == RUNNING,
                jobs.c.worker_id == caller.name, jobs.c.claim_token == token)


def complete(caller: Caller, job_id: int, token: str, result: dict | None = None) -> Row:
    """running → completed, only for the worker holding the current claim."""
    now = utcnow()
    with write_transaction() as conn:
        rows = _complete_held(conn, caller, [job_id], token, _result_text(result), now)
        if not rows:
            _refuse(conn, job_id, "complete")
    return rows[0]


def complete_many(caller: Caller, items: list[tuple[int, str, dict | None]]) -> list[Row | QueueError]:
    """Complete several held jobs, (id, claim_token, result) each, in one transaction.

    Each item passes the same guard as ``complete``; a refused item (404/409) is answered with its
    error in place of the row and does not undo the others. Items that share a claim token and a
    result (a batch claim acknowledged together) go in one guarded UPDATE; an id listed twice
    makes the batch go item by item, so the earlier item wins exactly as it would alone.
    """
    now = utcnow()
    outcomes: list[Row | QueueError | None] = [None] * len(items)
    with write_transaction() as conn:
        groups: dict[tuple, list[int]] = {}
        for index, (job_id, token, result) in enumerate(items):
            if job_id > max_job_id():
                # An id the column cannot hold names no job; binding it would fail in the driver.
                outcomes[index] = JobNotFound(f"job {job_id} does not exist")
                continue
            groups.setdefault((token, _result_text(result)), []).append(index)
        ids = [job_id for job_id, _, _ in items]
        if len(set(ids)) < len(ids):
            groups = _one_per_item(items, outcomes)
        for key, indexes in groups.items():
            token, result_text = key[-2:]
            held = {row.id: row for row in _complete_held(conn, caller, [ids[i] for i in indexes],
                                                          token, result_text, now)}
            for index in indexes:
                row = held.get(ids[index])
                if row is not None:
                    outcomes[index] = row
                    continue
                try:
                    _refuse(conn, ids[index], "complete")
                except QueueError as refusal:
                    outcomes[index] = refusal
    return outcomes  # type: ignore[return-value]


def _one_per_item(items, outcomes) -> dict:
    """Item-by-item groups, in order: keyed by position so equal (token, result) items stay apart."""
    return {(index, items[index][1], _result_text(items[index][2])): [index]
            for index in range(len(items)) if outcomes[index] is None}


def _result_text(result: dict | None) -> str | None:
    return None if result is None else json.dumps(result, separators=(",", ":"))


def _complete_held(conn: Connection, caller: Caller, job_ids: list[int], token: str,
                   result_text: str | None, now: datetime) -> list[Row]:
    """The guarded UPDATE behind a complete, with its events: the rows completed; the guard refused the others."""
    rows = driver_sql.complete_held(conn, job_ids, caller.name, token, result_text, now, caller.actor)
    observe_changes([(row, RUNNING, "completed", caller.actor, None) for row in rows])
    return rows


def fail(caller: Caller, job_id: int, token: str, error: str | None, retryable: bool = True) -> Row:
    """running → pending with backoff while retries remain, else → failed."""
    config = current_app.config
    error = scrub_error(error, config["MAX_ERROR_CHARS"])
    now = utcnow()
    with write_transaction() as conn:
        current = conn.execute(
            select(jobs.c.retry_count, jobs.c.max_retries).where(_held_by(caller, job_id, token))
            .with_for_update()
        ).first()
        if current is None:
            _refuse(conn, job_id, "fail")
        if retryable and current.retry_count < current.max_retries:
            values = _requeue_values(now, current.retry_count, error)
            values["run_at"] = now + backoff_delay(current.retry_count)
            event = "requeued"
        else:
            values = {"status": FAILED, "error": error, "claim_token": None, "lease_expires_at": None,
                      "updated_at": now}
            event = "failed"
        row = conn.execute(
            update(jobs).where(_held_by(caller, job_id, token)).values(**values).returning(*jobs.c)
        ).one()
        _record(conn, [(row, RUNNING, event, caller.actor, error)], now)
        if event == "requeued":
            wakeup.jobs_ready(conn)
    return row


def backoff_delay(retry_count: int) -> timedelta:
    """BASE × 2^retry_count seconds, capped at MAX, with jitter so failed jobs do not return in step."""
    base = current_app.config["RETRY_BACKOFF_BASE"]
    cap = current_app.config["RETRY_BACKOFF_MAX"]
    delay = min(cap, base * (2 ** min(retry_count, 40)))
    return timedelta(seconds=delay * random.uniform(0.5, 1.0))


def heartbeat(caller: Caller, job_id: int, token: str, lease_seconds: int | None = None) -> Row:
    """Extend the lease of a job the caller holds."""
    now = utcnow()
    lease = timedelta(seconds=lease_seconds or current_app.config["LEASE_SECONDS"])
    with write_transaction() as conn:
        row = conn.execute(
            update(jobs).where(_held_by(caller, job_id, token))
            .values(lease_expires_at=now + lease, heartbeat_at=now, updated_at=now)
            .returning(*jobs.c)
        ).first()
        if row is None:
            _refuse(conn, job_id, "heartbeat")
    return row


def release(job_id: int, actor: str, caller: Caller | None = None, token: str | None = None) -> Row:
    """running → pending without counting a failure: a worker shutting down, or an admin giving it back."""
    now = utcnow()
    if caller is not None:
        guard = _held_by(caller, job_id, token or "")
    else:
        guard = and_(jobs.c.id == job_id, jobs.c.status == RUNNING)
    with write_transaction() as conn:
        values = {"status": PENDING, "worker_id": None, "claimed_at": None, "claim_token": None,
                  "lease_expires_at": None, "heartbeat_at": None, "run_at": now, "updated_at": now}
        row = conn.execute(update(jobs).where(guard).values(**values).returning(*jobs.c)).first()
        if row is None:
            _refuse(conn, job_id, "release")
        _record(conn, [(row, RUNNING, "released", actor, None)], now)
        wakeup.jobs_ready(conn)
    return row


def give_back_unanswered(rows: list[Row]) -> None:
    """running → pending, no failure counted: jobs claimed for a client that hung up before the answer.

    Nobody would run them or renew their lease; given back at once they are not stuck until reaped.
    Each is guarded by the claim token it was just given, so a job already moved on is left alone.
    """
    now = utcnow()
    values = {"status": PENDING, "worker_id": None, "claimed_at": None, "claim_token": None,
              "lease_expires_at": None, "heartbeat_at": None, "updated_at": now}
    with write_transaction() as conn:
        given_back = []
        for claimed in rows:
            row = conn.execute(
                update(jobs).where(jobs.c.id == claimed.id, jobs.c.status == RUNNING,
                                   jobs.c.claim_token == claimed.claim_token)
                .values(**values).returning(*jobs.c)
            ).first()
            if row is not None:
                given_back.append((row, RUNNING, "released", SERVER, "the claiming worker hung up before the answer"))
        if given_back:
            _record(conn, given_back, now)
            wakeup.jobs_ready(conn)


# --- producer and admin actions ------------------------------------------------------------------

def cancel(job_id: int, actor: str, owner_key_id: int | None = None) -> Row:
    """pending → cancelled. ``owner_key_id`` limits a producer to its own jobs (others are 'not found')."""
    now = utcnow()
    guard = [jobs.c.id == job_id]
    if owner_key_id is not None:
        guard.append(jobs.c.producer_key_id == owner_key_id)
    with write_transaction() as conn:
        row = conn.execute(
            update(jobs).where(*guard, jobs.c.status == PENDING)
            .values(status=CANCELLED, updated_at=now).returning(*jobs.c)
        ).first()
        if row is None:
            _refuse(conn, job_id, "cancel", owner_key_id=owner_key_id)
        _record(conn, [(row, PENDING, "cancelled", actor, None)], now)
    return row


def retry(job_id: int, actor: str) -> Row:
    """failed or cancelled → pending with a fresh retry budget (an admin's decision)."""
    rows = retry_many([job_id], actor)
    if not rows:
        with write_transaction() as conn:
            _refuse(conn, job_id, "retry")
    return rows[0]


def retry_many(job_ids: list[int], actor: str) -> list[Row]:
    """Retry every listed job that is failed or cancelled; others are left as they are."""
    if not job_ids:
        return []
    now = utcnow()
    with write_transaction() as conn:
        before = {row.id: row.status for row in conn.execute(
            select(jobs.c.id, jobs.c.status).where(jobs.c.id.in_(job_ids), jobs.c.status.in_([FAILED, CANCELLED]))
        )}
        if not before:
            return []
        rows = conn.execute(
            update(jobs).where(jobs.c.id.in_(list(before)), jobs.c.status.in_([FAILED, CANCELLED]))
            .values(status=PENDING, retry_count=0, stall_count=0, worker_id=None, claimed_at=None,
                    claim_token=None, lease_expires_at=None, heartbeat_at=None, completed_at=None,
                    run_at=now, updated_at=now)
            .returning(*jobs.c)
        ).all()
        _record(conn, [(row, before[row.id], "retried", actor, None) for row in rows], now)
        wakeup.jobs_ready(conn)
    return sorted(rows, key=lambda row: row.id)


# --- reaping -------------------------------------------------------------------------------------

def reap(older_than: int | None = None, dry_run: bool = False, now: datetime | None = None,
         actor: str = REAPER) -> ReapReport:
    """Give back running jobs whose lease ran out (or claimed more than ``older_than`` seconds ago).

    Each goes to pending with retry_count + 1, or to failed when no retry is left; a job whose
    workers died holding it MAX_STALLS times is quarantined as failed, so it cannot take down the fleet.
    A job completed meanwhile is never touched: every update re-checks status and claim token.
    ``actor`` is who asked, for the event log: the cron reaper, or an admin pressing "reap now".
    """
    now = now or utcnow()
    max_stalls = current_app.config["MAX_STALLS"]
    stalled = jobs.c.lease_expires_at < now
    if older_than is not None:
        stalled = or_(stalled, jobs.c.claimed_at < now - timedelta(seconds=older_than))
    report = ReapReport()
    with write_transaction() as conn:
        candidates = conn.execute(
            select(jobs.c.id, jobs.c.claim_token, jobs.c.worker_id, jobs.c.retry_count,
                   jobs.c.max_retries, jobs.c.stall_count)
            .where(jobs.c.status == RUNNING, stalled).order_by(jobs.c.id)
            .with_for_update(skip_locked=True)
        ).all()
        for job in candidates:
            stalls = job.stall_count + 1
            if stalls >= max_stalls:
                outcome, bucket = FAILED, report.quarantined
                error = f"quarantined: its worker died {stalls} times"
            elif job.retry_count < job.max_retries:
                outcome, bucket = PENDING, report.requeued
                error = f"worker {job.worker_id} stopped heartbeating; its lease expired"
            else:
                outcome, bucket = FAILED, report.failed
                error = f"worker {job.worker_id} stopped heartbeating and no retries are left"
            bucket.append(job.id)
            if dry_run:
                continue
            if outcome == PENDING:
                values = _requeue_values(now, job.retry_count, error)
            else:
                values = {"status": FAILED, "error": error, "claim_token": None,
                          "lease_expires_at": None, "updated_at": now}
            values["stall_count"] = stalls
            row = conn.execute(
                update(jobs).where(jobs.c.id == job.id, jobs.c.status == RUNNING,
                                   jobs.c.claim_token == job.claim_token)
                .values(**values).returning(*jobs.c)
            ).first()
            if row is None:  # finished between our read and our write: leave it alone
                bucket.remove(job.id)
                continue
            _record(conn, [(row, RUNNING, "reaped", actor, error)], now)
            if outcome == PENDING:
                wakeup.jobs_ready(conn)
    return report


# --- helpers ------------------------------------------------------------------------------------

def _requeue_values(now: datetime, retry_count: int, error: str | None) -> dict:
    return {"status": PENDING, "retry_count": retry_count + 1, "error": error, "worker_id": None,
            "claimed_at": None, "claim_token": None, "lease_expires_at": None, "heartbeat_at": None,
            "run_at": now, "updated_at": now}


def _refuse(conn: Connection, job_id: int, action: str, owner_key_id: int | None = None):
    """Explain why a guarded update matched nothing: no such job (404) or the wrong state (409)."""
    row = conn.execute(select(jobs.c.status, jobs.c.producer_key_id).where(jobs.c.id == job_id)).first()
    if row is None or (owner_key_id is not None and row.producer_key_id != owner_key_id):
        raise JobNotFound(f"job {job_id} does not exist")
    if action in {"complete", "fail", "heartbeat", "release"}:
        raise StateConflict(
            f"cannot {action} job {job_id}: it is {row.status} and not held by this worker under this claim token",
            job_status=row.status)
    allowed = {"cancel": "pending", "retry": "failed or cancelled"}[action]
    raise StateConflict(f"cannot {action} job {job_id}: it is {row.status}, not {allowed}", job_status=row.status)


def _record(conn: Connection, entries: list[tuple], now: datetime) -> None:
    """Append to the event log in the same transaction as the change it records."""
    conn.execute(insert(events), [
        {"job_id": row.id, "event": event, "from_status": from_status, "to_status": row.status,
         "actor": actor, "attempt": row.retry_count, "error": error, "at": now}
        for row, from_status, event, actor, error in entries
    ])
    observe_changes(entries)  # metrics counters and the state-change log line
