"""The claim and the moves of the worker holding a job (complete, fail, heartbeat, release), and the server's
give-back of a claim nobody received. A producer's or admin's moves are in actions.py, the reaper in reaping.py.
"""

from __future__ import annotations

import json
import random
import secrets
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import NamedTuple

from flask import current_app
from sqlalchemy.engine import Connection

from .. import sql
from ..auth.keys import Caller
from ..core.clock import utcnow
from ..core.errors import Forbidden, JobNotFound, QueueError
from ..core.scrub import scrub_error
from ..database.transactions import (
    read_connection,
    retried_when_moved,
    single_statement_write,
    statements_commit_alone,
    write_transaction,
)
from ..ops.metrics import count_refusals
from ..reads.queries import max_job_id
from ..sql import Claim, JobRow, Leave
from ..waiting import wakeup
from . import flow, served_turns, worker_processes
from .moves import (
    CLAIM,
    COMPLETE,
    FAIL_FINAL,
    FAIL_RETRY,
    HEARTBEAT,
    RELEASE,
    SERVER,
    changed,
    event_row,
    failed,
    given_back,
    refusal,
    refuse,
    requeued,
)
from .worker_processes import Command


class Completion(NamedTuple):
    """One item of a batch complete: the job, the claim token it is held under, its result."""

    job_id: int
    token: str
    result: dict | None


# --- claim and the holding worker's moves ---------------------------------------------------------


@retried_when_moved
def claim(
    caller: Caller,
    types: list[str] | None = None,
    limit: int = 1,
    lease_seconds: int | None = None,
    process: int | None = None,
    for_push: bool = False,
) -> list[JobRow]:
    """Atomically take up to ``limit`` due jobs: highest priority first, concurrency keys taking turns,
    oldest first within a key; nothing of a paused type, nothing past a type's limits.

    ``process``: the caller's registered worker process claiming (written on the jobs); one told to quiet or
    stop gets nothing, one not of the caller's key is refused (422). A worker's claim never takes a job of
    a type with a push target: those are the server's to claim for the target (``for_push``).
    """
    if types is not None:
        refused = [t for t in types if not caller.may_use_type(t)]
        if refused:
            raise Forbidden(f"this key may not claim jobs of type {refused[0]!r}")
        wanted: tuple[str, ...] | None = tuple(types)
    else:
        wanted = caller.allowed_types
    lease = timedelta(seconds=lease_seconds or current_app.config["LEASE_SECONDS"])
    # The copy of the settings shapes the claim, and the claim's statement checks that it is the current one:
    # shaped by an older one, it takes nothing (None) and is made again with the settings read afresh. A
    # change between that read and the claim sends it round once more; changes come one at a time.
    controlled = flow.controlled_for_claim()
    for _attempt in range(CLAIM_ATTEMPTS):
        claimable = wanted if for_push else controlled.pulled_among(wanted, current_app.config["JOB_TYPES"])
        if claimable == () and controlled is not (controlled := flow.controlled()):
            continue  # every type asked for is pushed, as a copy over CACHE_SECONDS old says: look again
        if claimable == ():
            return []  # no statement runs to find the copy out of date, so it is trusted CACHE_SECONDS only
        shaped = _claim_shaped_by(controlled, caller, claimable, limit, lease, process)
        if shaped is not None:
            break
        controlled = flow.read_afresh()
    else:
        return []
    rows, now, flow_on = shaped
    if len(rows) < limit and flow_on:
        _count_refusals(wanted, now)
    return sorted(rows, key=lambda row: (-row.priority, row.fair_tag, row.id))


#: How many times a claim is made when the settings keep changing under it (each time read afresh).
CLAIM_ATTEMPTS = 5


def _claim_shaped_by(
    controlled: flow.Controlled,
    caller: Caller,
    wanted: tuple[str, ...] | None,
    limit: int,
    lease: timedelta,
    process: int | None,
) -> tuple[list[JobRow], datetime, bool] | None:
    """One claim, shaped by ``controlled``: (the rows, the claim's time, whether flow control was on), or None
    when the settings are no longer those of ``controlled`` (nothing taken)."""
    flow_on = controlled.any_among(wanted)
    to_lock = controlled.limited_among(wanted)
    # Without a limited type the claim is one statement (its events logged in it on PostgreSQL): then it needs
    # no transaction around it. With one, FLOW_LOCK comes first and the claims are recorded after it.
    with write_transaction() if to_lock else single_statement_write() as conn:
        # Limited types first take their turn (FLOW_LOCK), so that the claim counts what the claims
        # before it did; the statement gives a limited type it did not lock no room.
        held = sql.lock_flow(conn, to_lock) if to_lock else []
        # The time is read once the claim holds its turn (SQLite: the write lock; limited types: FLOW_LOCK),
        # so claims that take turns are also timed in that order, which a rate limit's window relies on.
        now = utcnow()
        log = event_row(CLAIM, caller.actor, now)
        rows = sql.claim(
            conn,
            now=now,
            lease_until=now + lease,
            worker=caller.name,
            token=secrets.token_urlsafe(24),
            limit=limit,
            types=wanted,
            flow=flow_on,
            locked_types=[row.type for row in held],
            version=controlled.version,
            log=log,
            process=process,
            key_id=caller.id,
            floor=wakeup.claim_floor(conn.engine),
        )
        if rows is None:
            return None
        if not rows and process is not None and worker_processes.claim_command(conn, caller, process) != Command.RUN:
            return [], now, False  # quiet or stopping: nothing held it back but the admin (no refusal to count)
        _record_rate_limited(conn, held, rows, now)
        changed(conn, CLAIM, rows, log)
        served_turns.note(conn.engine, rows)
    return rows, now, flow_on


def _record_rate_limited(conn: Connection, held: list[sql.FlowRow], rows: list[JobRow], now: datetime) -> None:
    """Count the claimed jobs of rate-limited types against their window (in the claim's transaction)."""
    for limits in held:
        if limits.rate_limit_jobs is None:
            continue
        claimed = sum(1 for row in rows if row.type == limits.type)
        if claimed:
            sql.record_claims(conn, limits.type, claimed, now, now + timedelta(seconds=limits.rate_limit_seconds))


def _count_refusals(types: tuple[str, ...] | None, now: datetime) -> None:
    """A claim came back short while flow control is on: count which types held due jobs back, and why."""
    with read_connection() as conn:
        refusals = sql.flow_refusals(conn, now, types)
    count_refusals(refusals)


@retried_when_moved
def complete(caller: Caller, job_id: int, token: str, result: dict | None = None) -> JobRow:
    """running → completed, only for the worker holding the current claim."""
    now = utcnow()
    results = {job_id: _json(result)}
    if statements_commit_alone():
        # Most completes move a job that nothing else hangs on: then the move is one statement with no transaction
        # around it (one round trip instead of three). A job with children to decide, a producer waiting for it
        # or a limited type's slot to free, and one the statement does not find held, go the way below.
        limited = flow.controlled().limited  # read (when stale) before the statement's connection: one at a time
        with single_statement_write() as conn:
            rows = _complete_held(conn, caller, token, results, now, ends_alone_unless=limited)
        if rows:
            return rows[0]
    with write_transaction() as conn:
        rows = _complete_held(conn, caller, token, results, now)
        if not rows:
            refuse(conn, job_id, "complete", COMPLETE)
    return rows[0]


@retried_when_moved
def complete_many(
    caller: Caller,
    items: list[tuple[int, str, dict | None]],
    first: Callable[[Connection], None] | None = None,
) -> list[JobRow | QueueError]:
    """Complete several held jobs, (id, claim_token, result) each, in one transaction.

    Each item passes the same guard as ``complete``; a refused item (404/409) is answered with its
    error in place of the row and does not undo the others. ``first`` writes what must precede the
    completions in the same transaction (the push deliveries they answer).
    """
    completions = [Completion(*item) for item in items]
    outcomes: dict[int, JobRow | QueueError] = {
        # An id the column cannot hold names no job; binding it would fail in the driver.
        index: JobNotFound(f"job {item.job_id} does not exist")
        for index, item in enumerate(completions)
        if item.job_id > max_job_id()
    }
    now = utcnow()
    with write_transaction() as conn:
        if first is not None:
            first(conn)
        for batch in _completion_batches(completions, skip=outcomes.keys()):
            done = {row.id: row for row in _complete_held(conn, caller, batch.token, batch.results, now)}
            for index in batch.indexes:
                job_id = completions[index].job_id
                outcomes[index] = done[job_id] if job_id in done else refusal(conn, job_id, "complete", COMPLETE)
    return [outcomes[index] for index in range(len(completions))]


class _CompletionBatch(NamedTuple):
    """Items completed by one guarded statement: they share a claim token, each with its own result."""

    token: str
    results: dict[int, str | None]  # job id → result, JSON text
    indexes: list[int]


def _completion_batches(items: list[Completion], skip) -> list[_CompletionBatch]:
    """Items that share a token (a batch claim acknowledged together) go in one statement, whatever their results.

    An id listed twice makes every item its own statement, in order, so the earlier item wins exactly
    as it would alone.
    """
    todo = [index for index in range(len(items)) if index not in skip]
    ids = [item.job_id for item in items]
    if len(set(ids)) < len(ids):
        return [_CompletionBatch(items[i].token, {items[i].job_id: _json(items[i].result)}, [i]) for i in todo]
    batches: dict[str, list[int]] = {}
    for index in todo:
        batches.setdefault(items[index].token, []).append(index)
    return [
        _CompletionBatch(token, {items[i].job_id: _json(items[i].result) for i in indexes}, indexes)
        for token, indexes in batches.items()
    ]


def _complete_held(
    conn: Connection,
    caller: Caller,
    token: str,
    results: dict[int, str | None],
    now: datetime,
    ends_alone_unless: frozenset[str] | None = None,
) -> list[JobRow]:
    """FINISH as a complete of the jobs in ``results`` (id → result, JSON text), in one statement; those the caller
    does not hold under ``token`` stay as they are, and with ``ends_alone_unless`` (the limited types) so do those
    whose completion needs more than the statement (ENDS_ALONE)."""
    if len(set(results.values())) == 1:  # one job, or all with the same result: the plain statement
        leave = Leave(COMPLETE.to_status, Claim.END, now, completes=True, result=next(iter(results.values())))
    else:
        each = json.dumps({str(job_id): text for job_id, text in results.items()}, separators=(",", ":"))
        leave = Leave(COMPLETE.to_status, Claim.END, now, completes=True, results=each)
    log = event_row(COMPLETE, caller.actor, now)
    rows = sql.finish(conn, list(results), caller.name, token, leave, log, ends_alone_unless)
    changed(conn, COMPLETE, rows, log)
    return rows


@retried_when_moved
def fail(caller: Caller, job_id: int, token: str, error: str | None, retryable: bool = True) -> JobRow:
    """running → pending with backoff while retries remain, else → failed."""
    error = scrub_error(error, current_app.config["MAX_ERROR_CHARS"])
    now = utcnow()
    with write_transaction() as conn:
        # The retry budget read here cannot change while this claim stands: every move that changes it
        # ends the claim, and FINISH, guarded by the claim, then matches nothing.
        job = sql.job(conn, job_id)
        if job is not None and retryable and job.retry_count < job.max_retries:
            transition, leave = FAIL_RETRY, requeued(now, error, run_at=now + backoff_delay(job.retry_count))
        else:
            transition, leave = FAIL_FINAL, failed(now, error)
        log = event_row(transition, caller.actor, now, error=error)
        rows = sql.finish(conn, [job_id], caller.name, token, leave, log)
        if not rows:
            refuse(conn, job_id, "fail", transition)
        changed(conn, transition, rows, log)
    return rows[0]


def backoff_delay(retry_count: int) -> timedelta:
    """BASE × 2^retry_count seconds, capped at MAX, with jitter so failed jobs do not return in step."""
    base = current_app.config["RETRY_BACKOFF_BASE"]
    cap = current_app.config["RETRY_BACKOFF_MAX"]
    delay = min(cap, base * (2 ** min(retry_count, 40)))
    return timedelta(seconds=delay * random.uniform(0.5, 1.0))


@retried_when_moved
def heartbeat(
    caller: Caller, job_id: int, token: str, lease_seconds: int | None = None, progress: dict | None = None
) -> JobRow:
    """Extend the lease of a job the caller holds, storing its progress report when given (no event: its
    status does not change)."""
    now = utcnow()
    lease = timedelta(seconds=lease_seconds or current_app.config["LEASE_SECONDS"])
    leave = Leave(HEARTBEAT.to_status, Claim.KEEP, now, lease_until=now + lease, progress=_json(progress))
    with write_transaction() as conn:
        rows = sql.finish(conn, [job_id], caller.name, token, leave, log=None)
        if not rows:
            refuse(conn, job_id, "heartbeat", HEARTBEAT)
    return rows[0]


@retried_when_moved
def release(
    job_id: int,
    actor: str,
    caller: Caller | None = None,
    token: str | None = None,
    delay: timedelta = timedelta(0),
    why: str | None = None,
) -> JobRow:
    """running → pending without counting a failure: a worker shutting down, an admin giving it back, or a push
    target asking to be sent it again later (``delay``, and ``why`` for the event)."""
    now = utcnow()
    leave = given_back(now, run_at=now + delay)
    log = event_row(RELEASE, actor, now, error=why)
    with write_transaction() as conn:
        if caller is not None:
            rows = sql.finish(conn, [job_id], caller.name, token or "", leave, log)
        else:
            rows = sql.take_back(conn, [job_id], None, leave, log)  # an admin: whatever claim is current
        if not rows:
            refuse(conn, job_id, "release", RELEASE)
        changed(conn, RELEASE, rows, log)
    return rows[0]


@retried_when_moved
def give_back_unanswered(rows: list[JobRow]) -> None:
    """running → pending, no failure counted: jobs claimed for a client that hung up before the answer.

    Nobody would run them or renew their lease; given back at once they are not stuck until reaped.
    Each is guarded by the claim token it was just given, so a job already moved on is left alone;
    each keeps its run_at, so its place in the queue.
    """
    now = utcnow()
    leave = given_back(now, run_at=None)
    log = event_row(RELEASE, SERVER, now, error="the claiming worker hung up before the answer")
    by_token: dict[str, list[int]] = {}
    for claimed in rows:
        if claimed.claim_token:  # TAKE_BACK without a token takes any claim: only an admin may ask that
            by_token.setdefault(claimed.claim_token, []).append(claimed.id)
    with write_transaction() as conn:
        for token, ids in by_token.items():
            changed(conn, RELEASE, sql.take_back(conn, ids, token, leave, log), log)


@retried_when_moved
def deregister_process(caller: Caller, process_id: int) -> list[JobRow]:
    """A worker process's clean exit: it leaves the list, and the jobs still ``running`` under it go back to
    pending, no failure counted. A runner deregisters only once it has acknowledged or released every job it
    knows it holds, so any job left is one whose claim answer never reached it: a long-poll cut short by the
    shutdown just as the server answered. Nobody would run it or renew its lease until the reaper came by.
    """
    now = utcnow()
    leave = given_back(now, run_at=None)
    log = event_row(RELEASE, SERVER, now, error="its worker process exited without holding it")
    with write_transaction() as conn:
        ids = worker_processes.deregister(conn, caller, process_id)
        rows = sql.take_back(conn, ids, None, leave, log) if ids else []
        changed(conn, RELEASE, rows, log)
    return rows


def _json(result: dict | None) -> str | None:
    return None if result is None else json.dumps(result, separators=(",", ":"))
