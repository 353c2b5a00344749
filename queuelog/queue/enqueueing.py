"""Enqueue: new jobs, all-or-nothing, the idempotency keys that make a repeated request safe, and the
producer quotas that may refuse them (queuelog/auth/quotas.py).

Each new job also gets its turn (``fair_tag``): claims go by priority, then turn, then id, so that
concurrency keys take turns. A job's turn follows its key's last turn at its priority, and is never before
the head of its type's queue (the turn of its first pending job): a key with nothing waiting joins at the
head. So a tenant enqueueing 10 jobs behind another's 100,000 gets turns next to the big tenant's first
ones: its first job is claimed within one round of the keys that are waiting, not after the 100,000. Jobs
without a key are one group like any key, across types, so without keys the claim order is the order of
enqueueing, as it always was. Start-time fair queuing with the queue's head as its virtual time, read from
the indexes (FAIR_TAGS), not kept in a row every enqueue would have to lock.

A job enqueued with ``unique_for`` holds a dedupe window on (type, unique key) in ``unique_slots``: an enqueue
of the same type and key while the window holder is younger than the new request's ``unique_for`` and not
finished creates nothing and answers with that job (``deduplicated``). Idempotency keys are looked at first
(a replay answers with its own job); a deduplicated item stores nothing, its idempotency key included, and
is not counted by the producer's quotas. The windows are taken in the enqueue's transaction, one guarded
INSERT … ON CONFLICT per window (UNIQUE_TAKE says why a race cannot make two jobs). Each producer key has its
own windows unless an admin shares a type's (queue/windows.py); a hit on a job the caller may not see
answers only that it was deduplicated (``_Hidden``, which carries nothing of the job) and cannot be a
``ref`` parent (422).

How each item's step is decided (a new job, or an answer with an existing one) is in steps.py; a workflow's
parents are checked, linked and decided in parents.py, after graph.py checked the batch's refs.
"""

from __future__ import annotations

from dataclasses import replace

from flask import current_app
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from .. import sql
from ..auth import quotas
from ..auth.keys import Caller
from ..core import telemetry
from ..core.clock import utcnow
from ..core.errors import Forbidden, InvalidRequest
from ..core.patterns import Priority
from ..database.transactions import single_statement_write, write_transaction
from ..models import Role
from ..sql import JobRow, NewJobRow
from . import served_turns
from .graph import check_graph
from .moves import ENQUEUE, changed, event_row
from .new_jobs import Enqueued, NewJob
from .parents import _link, _with_parents
from .steps import _Deduped, _Earlier, _enqueue_steps, _Hidden, _Insert, _SameWindow, _take_windows

#: A producer may name as parents only its own jobs (as it may see only those); an admin any job.
_ANY_OWNER = None


def enqueue(caller: Caller, new_jobs: list[NewJob], batch: bool = False) -> list[Enqueued]:
    """Add jobs all-or-nothing; returns (job, created) per item, created=False for an idempotent replay.

    ``batch`` says the jobs came as a list, so a refusal points at /jobs/<index>/… even for a list of one.
    """
    check_graph(new_jobs, batch)
    _check_enqueue_policy(caller, new_jobs, batch)
    if not telemetry.enabled():
        return _enqueue_retrying(caller, new_jobs, batch)
    # A PRODUCER span per job; a job whose producer sent no trace context takes the span's, when it records.
    with telemetry.sending([(job.type, job.traceparent, job.tracestate) for job in new_jobs]) as sends:
        traced = [
            replace(job, traceparent=send.traceparent, tracestate=send.tracestate)
            for job, send in zip(new_jobs, sends, strict=True)
        ]
        answers = _enqueue_retrying(caller, traced, batch)
        for send, answer in zip(sends, answers, strict=True):
            send.sent(None if answer.job is None else answer.job.id)
    return answers


def _enqueue_retrying(caller: Caller, new_jobs: list[NewJob], batch: bool) -> list[Enqueued]:
    """``_insert_jobs``, again when a concurrent request took one of its idempotency keys first."""
    for attempt in range(3):
        try:
            return _insert_jobs(caller, new_jobs, batch)
        except (IntegrityError, _KeyTakenMeanwhile):
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


def _insert_jobs(caller: Caller, new_jobs: list[NewJob], batch: bool) -> list[Enqueued]:
    """One transaction (``enqueue_in``): find the jobs the request's idempotency keys already name, insert the rest.

    A key with a quota takes its turn first, so a replay racing its original finds the original's job
    (instead of being counted as new), and the quota's check sees every job committed before it.
    """
    with single_statement_write() if _one_insert(caller, new_jobs) else write_transaction() as conn:
        return enqueue_in(conn, caller, new_jobs, batch)


def _one_insert(caller: Caller, new_jobs: list[NewJob]) -> bool:
    """Is this enqueue one statement: a lone job that reads and locks nothing before its INSERT?

    Such a job takes its turn, logs its event and (PostgreSQL) wakes the waiting claims in the INSERT itself,
    so it needs no transaction around it: on PostgreSQL one round trip instead of four (BEGIN, INSERT, NOTIFY,
    COMMIT), no less durable. An idempotency key or a dedupe window is read first, a quota counts, and a
    workflow's parents are locked: those take a transaction.
    """
    if len(new_jobs) != 1 or caller.quota is not None:
        return False
    [job] = new_jobs
    return job.idempotency_key is None and job.unique_for is None and job.unique_key is None and not job.depends_on


def enqueue_in(conn: Connection, caller: Caller, new_jobs: list[NewJob], batch: bool = False) -> list[Enqueued]:
    """The enqueue's work inside the caller's write transaction: a schedule's tick enqueues its job in the
    transaction that moves the schedule on (queuelog/schedules), so the two commit or roll back together."""
    now = utcnow()
    keys = [job.idempotency_key for job in new_jobs if job.idempotency_key]
    if caller.quota is not None:
        quotas.take_turn(conn, caller.id)
    earlier = {row.idempotency_key: row for row in sql.jobs_by_key(conn, caller.id, keys)} if keys else {}
    steps = _enqueue_steps(caller, new_jobs, earlier, batch, now)
    steps, taken = _take_windows(conn, caller, new_jobs, steps, now)
    inserts = [step.row for step in steps if isinstance(step, _Insert)]
    made: list[JobRow] = []
    if inserts and caller.quota is not None:
        # Only new jobs count; refused, the transaction rolls back and nothing is stored.
        quotas.admit(conn, caller.id, caller.name, caller.quota, len(inserts))
    workflow = any(job.depends_on for job in new_jobs)
    if workflow:
        steps = _with_parents(conn, caller, new_jobs, steps, batch)
        inserts = [step.row for step in steps if isinstance(step, _Insert)]
    if inserts:
        inserts = _with_turns(conn, inserts)
        log = event_row(ENQUEUE, caller.actor, now)
        lone = inserts[0]
        floor = served_turns.floor(conn.engine, lone.type, lone.priority) if lone.fair_tag is None else 0
        made = sql.insert_jobs(conn, inserts, log, turn_floor=floor)
        if keys and conn.dialect.name == "postgresql":
            _check_keys_still_ours(conn, caller, made)
        changed(conn, ENQUEUE, made, log, notified=True)
        for row in made:
            window = taken.get((row.type, row.unique_key))
            if window is not None:
                sql.unique_set(conn, window, row.id)
    answers = _answers(steps, made)
    if workflow and made:
        answers = _link(conn, new_jobs, steps, answers, now)
    return answers


class _KeyTakenMeanwhile(Exception):
    """Another job holds one of the idempotency keys just inserted (``_check_keys_still_ours``)."""


def _check_keys_still_ours(conn: Connection, caller: Caller, made: list[JobRow]) -> None:
    """On PostgreSQL the unique index on idempotency keys covers the live jobs only (docs/storage.md): a job
    that held a key and finished between this enqueue's read of the keys and its insert is in history, where
    the insert did not look. Read the keys again, now that the insert is in: any other job under one of them
    means the insert must not stand (the retry answers with that job)."""
    ours = {row.idempotency_key: row.id for row in made if row.idempotency_key}
    if any(row.id != ours[row.idempotency_key] for row in sql.jobs_by_key(conn, caller.id, list(ours))):
        raise _KeyTakenMeanwhile


def _answers(steps: list, made: list[JobRow]) -> list[Enqueued]:
    """The new jobs came back in the order of their items; an item repeating one of this batch comes after it."""
    created = iter(made)
    answers: list[Enqueued] = []
    for step in steps:
        if isinstance(step, _Insert):
            answers.append(Enqueued(next(created), True))
        elif isinstance(step, _Earlier | _Deduped):
            answers.append(Enqueued(step.job, False, isinstance(step, _Deduped)))
        elif isinstance(step, _Hidden):
            answers.append(Enqueued(None, False, True))
        elif isinstance(step, _SameWindow):
            answers.append(Enqueued(answers[step.index].job, False, True))
        else:
            answers.append(answers[step.index]._replace(created=False))
    return answers


def _with_turns(conn, rows: list[NewJobRow]) -> list[NewJobRow]:
    """The rows with their fair_tag: each takes its key's next turn at its priority, in the order of the rows,
    never before the head of its type's queue (FAIR_TAGS says where each (type, key, priority) may start; the
    head is read from the turn this process last served there, served_turns says why).

    A lone job is left without one (None): the INSERT takes its turn by the same rule, one statement fewer.
    """
    if len(rows) == 1:
        return [rows[0]._replace(fair_tag=None)]
    if not rows:
        return rows
    groups: dict[tuple[str, str, int], int] = {}
    for row in rows:
        groups.setdefault((row.type, row.concurrency_key, row.priority), len(groups))
    engine = conn.engine
    starts = sql.fair_tags(conn, [(*group, served_turns.floor(engine, group[0], group[2])) for group in groups])
    last: dict[tuple[str, int], int] = {}  # the turn a key last took in this batch, by (key, priority)
    turned = []
    for row in rows:
        key = (row.concurrency_key, row.priority)
        tag = starts[groups[(row.type, row.concurrency_key, row.priority)]]
        if key in last:
            tag = max(tag, last[key] + 1)
        last[key] = tag
        turned.append(row._replace(fair_tag=tag))
    return turned
