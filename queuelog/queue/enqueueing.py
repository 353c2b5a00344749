"""Enqueue: new jobs, all-or-nothing, the idempotency keys that make a repeated request safe, and the
producer quotas that may refuse them (queuelog/quotas.py).

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
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from flask import current_app
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from .. import quotas, sql
from ..clock import rfc3339, utcnow
from ..database.transactions import single_statement_write, write_transaction
from ..errors import Forbidden, IdempotencyConflict, InvalidRequest
from ..keys import Caller
from ..models import Role
from ..patterns import Priority
from ..sql import JobRow, NewJobRow, Window
from ..states import BY_ACTION, RunWhen
from . import dependencies, windows
from .moves import ENQUEUE, changed, event_row

ENQUEUE_WAITING = BY_ACTION["enqueue_waiting"]
#: A producer may name as parents only its own jobs (as it may see only those); an admin any job.
_ANY_OWNER = None


@dataclass(frozen=True)
class NewJob:
    """A validated enqueue request."""

    type: str
    payload: dict
    priority: int = Priority.LOW.value
    max_retries: int = 3
    idempotency_key: str | None = None
    run_at: datetime | None = None
    concurrency_key: str | None = None
    unique_for: int | None = None        # seconds: a dedupe window on (type, unique key)
    unique_key: str | None = None        # None: a digest of type and payload (only with unique_for)
    expires_at: datetime | None = None   # not claimed by then: never run
    timeout_seconds: int | None = None   # how long a run may take
    schedule: str | None = None             # set only by a schedule's tick (queuelog/schedules), never by a request
    scheduled_for: datetime | None = None
    depends_on: tuple[int | str, ...] = ()   # job ids, or (in a batch) the refs of other items
    run_when: str | None = None               # states.RunWhen; None: "completed" when it has parents
    ref: str | None = None                    # a batch item's name, for other items' depends_on

    def digest(self) -> str:
        """Fingerprint of the request, to tell a retry of it from a different request under one key."""
        body = {"type": self.type, "payload": self.payload, "priority": self.priority,
                "max_retries": self.max_retries, "run_at": rfc3339(self.run_at)}
        # Each only when given, so a request without them keeps the fingerprint it had before they existed.
        optional = {"concurrency_key": self.concurrency_key, "unique_for": self.unique_for,
                    "unique_key": self.unique_key, "expires_at": rfc3339(self.expires_at),
                    "timeout_seconds": self.timeout_seconds}
        body.update({name: value for name, value in optional.items() if value is not None})
        if self.depends_on:
            body["depends_on"] = list(self.depends_on)
            body["run_when"] = self.run_when or RunWhen.COMPLETED.value
        return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    def window_key(self) -> str | None:
        """The key of the job's dedupe window: ``unique_key``, or a digest of type and payload; None without
        ``unique_for``."""
        if self.unique_for is None:
            return None
        if self.unique_key is not None:
            return self.unique_key
        canonical = json.dumps(self.payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(f"{self.type}\n{canonical}".encode()).hexdigest()


class Enqueued(NamedTuple):
    """An enqueue's answer for one job: the job, whether this request created it, and whether it is another
    enqueue's job whose dedupe window (unique_for) this one fell in. ``job`` is None for a deduplicated item
    whose window another producer's job holds (a type's shared window): the caller learns nothing of it."""

    job: JobRow | None
    created: bool    # False: the request repeats an idempotency key, or was deduplicated
    deduplicated: bool = False


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


class _Deduped(NamedTuple):
    """An item whose dedupe window another job holds: answered with that job, nothing stored."""

    job: JobRow


class _Hidden(NamedTuple):
    """An item whose dedupe window a job the caller may not see holds: nothing stored, nothing of that job
    answered (it holds no field of it, so no answer can show one)."""


class _SameWindow(NamedTuple):
    """An item in the dedupe window of an earlier item of this batch: answered with that item's job."""

    index: int


_Step = _Insert | _Earlier | _AsItem | _Deduped | _Hidden | _SameWindow


def _insert_jobs(caller: Caller, new_jobs: list[NewJob], batch: bool) -> list[Enqueued]:
    """One transaction (``enqueue_in``): find the jobs the request's idempotency keys already name, insert the rest.

    A key with a quota takes its turn first, so a replay racing its original finds the original's job
    (instead of being counted as new), and the quota's check sees every job committed before it.
    """
    with (single_statement_write() if _one_insert(caller, new_jobs) else write_transaction()) as conn:
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
        made = sql.insert_jobs(conn, inserts, log)
        changed(conn, ENQUEUE, made, log, notified=True)
        for row in made:
            window = taken.get((row.type, row.unique_key))
            if window is not None:
                sql.unique_set(conn, window, row.id)
    answers = _answers(steps, made)
    if workflow and made:
        answers = _link(conn, new_jobs, steps, answers, now)
    return answers


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


def _take_windows(conn, caller: Caller, new_jobs: list[NewJob], steps: list[_Step],
                  now: datetime) -> tuple[list[_Step], dict[tuple[str, str], Window]]:
    """Each new job with ``unique_for`` takes its dedupe window (queue/windows.py), or is answered with the job
    holding it (``_Deduped``; ``_Hidden`` when the caller may not see that job), or with the job of an
    earlier item of the batch in the same window.

    Returns the steps and the windows taken, by (type, key) (their job_id is set once the jobs are inserted).
    """
    first_in_window: dict[tuple[str, str], int] = {}
    for index, step in enumerate(steps):
        if isinstance(step, _Insert) and step.row.unique_key is not None:
            first_in_window.setdefault((step.row.type, step.row.unique_key), index)
    if not first_in_window:
        return steps, {}
    outcome = windows.take(conn, caller, {window: new_jobs[index].unique_for
                                          for window, index in first_in_window.items()}, now)
    steps = list(steps)
    taken: dict[tuple[str, str], Window] = {}
    for window, index in first_in_window.items():
        result = outcome[window]
        if isinstance(result, Window):
            taken[window] = result
        else:
            steps[index] = _Hidden() if isinstance(result, windows.Unseen) else _Deduped(result.job)
    for index, step in enumerate(steps):
        if isinstance(step, _Insert) and step.row.unique_key is not None:
            first = first_in_window[(step.row.type, step.row.unique_key)]
            if first != index:
                steps[index] = _SameWindow(first)
    return steps, taken


def _with_parents(conn, caller: Caller, new_jobs: list[NewJob], steps: list, batch: bool) -> list:
    """The steps, with each new job that has parents made ``waiting`` (run_when set), and each new job that
    a new job of this batch depends on marked as having dependents.

    The existing parents (job ids, and items answered with an earlier job) are marked and locked first
    (MARK_PARENTS): each must exist and be the caller's to see, else the request is refused (422, pointing
    at the id), and none can finish unseen before this transaction commits. A ref to an item answered by a
    job the caller may not see is refused too, pointing at the depends_on entry that names the ref.
    """
    existing, depended_on, problems = _parents_named(new_jobs, steps, batch)
    if existing:
        found = {mark.id: mark for mark in sql.mark_parents(conn, list(existing))}
        problems += [{"pointer": pointer, "detail": f"job {parent_id} does not exist"}
                     for parent_id, pointers in existing.items() for pointer in pointers
                     if parent_id not in found or not caller.owns_or_oversees(found[parent_id].producer_key_id)]
    if problems:
        raise InvalidRequest(sorted(problems, key=lambda problem: problem["pointer"]))
    shaped = []
    for index, (job, step) in enumerate(zip(new_jobs, steps, strict=True)):
        if isinstance(step, _Insert):
            row = step.row
            if job.depends_on:
                row = row._replace(status=ENQUEUE_WAITING.to_status.value,
                                   run_when=job.run_when or RunWhen.COMPLETED.value)
            if index in depended_on:
                row = row._replace(has_dependents=True)
            step = _Insert(row)
        shaped.append(step)
    return shaped


def _parents_named(new_jobs: list[NewJob], steps: list, batch: bool) -> tuple[dict[int, list[str]], set[int],
                                                                              list[dict]]:
    """What the new jobs' depends_on name: existing jobs (id → the pointers naming it), the items of this
    batch that new items depend on, and the refused refs (to an item answered by a job the caller may not
    see, whose id it must not learn nor depend on)."""
    ref_index = {job.ref: index for index, job in enumerate(new_jobs) if job.ref is not None}
    existing: dict[int, list[str]] = {}
    depended_on: set[int] = set()
    refused: list[dict] = []
    for index, (job, step) in enumerate(zip(new_jobs, steps, strict=True)):
        if not isinstance(step, _Insert):
            continue
        for position, parent in enumerate(job.depends_on):
            pointer = f"/jobs/{index}/depends_on/{position}" if batch else f"/depends_on/{position}"
            if not isinstance(parent, str):
                existing.setdefault(parent, []).append(pointer)
                continue
            parent_index = _answered_by(steps, ref_index[parent])
            parent_step = steps[parent_index]
            if isinstance(parent_step, _Hidden):
                refused.append({"pointer": pointer, "detail": f"the item with ref {parent!r} was deduplicated into "
                                                              "a job this key may not see: it cannot be a parent"})
            elif isinstance(parent_step, _Earlier | _Deduped):
                # the caller's own earlier job, or the job holding the item's dedupe window: MARK_PARENTS checks
                # that the caller may see it, as it checks a parent named by its id
                existing.setdefault(parent_step.job.id, []).append(pointer)
            else:
                depended_on.add(parent_index)
    return existing, depended_on, refused


def _answered_by(steps: list[_Step], index: int) -> int:
    """The item whose step answers item ``index``: an item repeating an earlier one, or in its dedupe window,
    is answered by that one (which may in turn be in another's window)."""
    while isinstance(steps[index], _AsItem | _SameWindow):
        index = steps[index].index
    return index


def _link(conn, new_jobs: list[NewJob], steps: list, answers: list[Enqueued], now: datetime) -> list[Enqueued]:
    """The new jobs' edges to their parents; then each new waiting job is decided at once (its parents may
    all be final already: it is pending, or cancelled, before the request is answered)."""
    # A ref answered by no job the caller may see names no parent (_with_parents refused any depends_on on it).
    ids_by_ref = {job.ref: answers[index].job.id for index, job in enumerate(new_jobs)
                  if job.ref is not None and answers[index].job is not None}
    edges: list[tuple[int, int]] = []
    waiting: list[int] = []
    for job, step, answer in zip(new_jobs, steps, answers, strict=True):
        if isinstance(step, _Insert) and job.depends_on:
            child = answer.job.id
            waiting.append(child)
            parents = dict.fromkeys(ids_by_ref[p] if isinstance(p, str) else p for p in job.depends_on)
            edges += [(child, parent) for parent in parents]
    sql.insert_dependencies(conn, edges)
    decided = dependencies.settle(conn, waiting, now)
    return [answer._replace(job=decided.get(answer.job.id, answer.job)) for answer in answers]


def _enqueue_steps(caller: Caller, new_jobs: list[NewJob], earlier: dict[str, JobRow], batch: bool,
                   now: datetime) -> list[_Step]:
    """What each item does: insert a new job, or answer with the job an idempotency key already names."""
    first_with_key: dict[str, int] = {}
    steps: list[_Step] = []
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
                run_at=job.run_at or now, created_at=now, updated_at=now, concurrency_key=job.concurrency_key or "",
                fair_tag=0, unique_key=job.window_key(), expires_at=job.expires_at,
                timeout_seconds=job.timeout_seconds, schedule=job.schedule, scheduled_for=job.scheduled_for)))
    return steps


def _with_turns(conn, rows: list[NewJobRow]) -> list[NewJobRow]:
    """The rows with their fair_tag: each takes its key's next turn at its priority, in the order of the rows,
    never before the head of its type's queue (FAIR_TAGS says where each (type, key, priority) may start).

    A lone job is left without one (None): the INSERT takes its turn by the same rule, one statement fewer.
    """
    if len(rows) == 1:
        return [rows[0]._replace(fair_tag=None)]
    if not rows:
        return rows
    groups: dict[tuple[str, str, int], int] = {}
    for row in rows:
        groups.setdefault((row.type, row.concurrency_key, row.priority), len(groups))
    starts = sql.fair_tags(conn, list(groups))
    last: dict[tuple[str, int], int] = {}   # the turn a key last took in this batch, by (key, priority)
    turned = []
    for row in rows:
        key = (row.concurrency_key, row.priority)
        tag = starts[groups[(row.type, row.concurrency_key, row.priority)]]
        if key in last:
            tag = max(tag, last[key] + 1)
        last[key] = tag
        turned.append(row._replace(fair_tag=tag))
    return turned


def _key_reused(detail: str, index: int, batch: bool) -> IdempotencyConflict:
    # A 422 like any other: it names the field, so clients can treat every 422 alike.
    pointer = f"/jobs/{index}/idempotency_key" if batch else "/idempotency_key"
    return IdempotencyConflict(detail, errors=[{"pointer": pointer, "detail": detail}])
