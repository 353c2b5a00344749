"""The tick: enqueue each due schedule's job, exactly once per tick, whatever the number of tickers.

Every process's ticker may find the same schedule due, and each tries to fire it. Firing one schedule is a
compare-and-set that moves its ``next_run_at`` on (``WHERE id = :id AND next_run_at = :due``) and, only if
that update matched, the enqueue of the tick's job through the normal enqueue (``queue.enqueue_in``: event
row, wake-up of waiting claims), in the same write transaction. The job carries the schedule's name and the
tick (``scheduled_for``); a unique index on the pair refuses a second job for one tick should anything ever
get past the compare-and-set.

A pass reads the due schedules once and fires them in batches, each batch one write transaction holding
every schedule's own compare-and-set and enqueue: one durable commit (an fsync) for the batch, not one per
schedule, which is what lets one process fire a thousand every-second schedules on time. A batch is
bounded, in schedules and in time, because on SQLite it holds the one write lock that every request's
write waits for; between two batches the ticker gives its turn back (``ticker``).
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from flask import current_app
from sqlalchemy import and_, bindparam, case, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from ..core.clock import utcnow
from ..database.transactions import single_statement_read, write_transaction
from ..sql import JobRow
from .operations import ScheduleState, enqueue_job, schedules

log = logging.getLogger("queuelog.schedules")

#: With ``catch_up: "none"``, a tick fired later than this after its time counts as missed (no job): no
#: server process was up when it came due. Tickers fire on time to within a fraction of a second.
MISSED_AFTER = timedelta(seconds=30)
#: At most this many due schedules read by one pass (QUEUELOG_MAX_SCHEDULES bounds them anyway); the rest
#: wait for the next pass.
PASS_MOST = 10_000
#: At most this many schedules fired in one write transaction; a pass fires the rest in the next ones.
FIRE_BATCH = 200
#: A batch takes no more schedules once its transaction has been open this long (a loaded machine, a slow
#: disk): a request's write waits for the write lock about this long at most behind a batch.
BATCH_SECONDS = 0.05

#: Schedules moved on by one compare-and-set statement (one round trip to PostgreSQL for them all); a batch
#: checks its time between two such.
CAS_CHUNK = 50

# Built once: building a statement cost more than running it, a thousand times a second.
_SET_LAST_JOB = (
    update(schedules)
    .where(schedules.c.id == bindparam("b_id"))
    .values(last_run_at=bindparam("b_tick"), last_job_id=bindparam("b_job"))
)


@dataclass(frozen=True)
class Due:
    """How one due schedule fires at ``now``: the tick it enqueues (or passes), and its next tick."""

    state: ScheduleState
    tick: datetime
    next_run_at: datetime
    enqueues: bool


@dataclass(frozen=True)
class _Fired:
    """One schedule's firing: ``won`` its compare-and-set (else another ticker moved it on first), and the
    tick's job it enqueued, if any."""

    due: Due
    won: bool
    job: JobRow | None


def fire_due(now: datetime | None = None) -> int:
    """Fire every active schedule whose tick has come (by ``now``), batch after batch; returns how many jobs
    this call enqueued."""
    now = now or utcnow()
    left, fired = due_at(now), 0
    while left:
        done, left = fire_batch(left, now)
        fired += done
    return fired


def due_at(now: datetime) -> list[Due]:
    """The active schedules whose tick has come by ``now``, earliest first, each with how it fires."""
    # One SELECT outside any transaction: every server process asks this a few times a second. The most
    # overdue first, then by id: tickers that read the same due schedules chunk them alike.
    with single_statement_read() as conn:
        rows = conn.execute(
            select(schedules)
            .where(schedules.c.paused.is_(False), schedules.c.next_run_at <= now)
            .order_by(schedules.c.next_run_at, schedules.c.id)
            .limit(PASS_MOST)
        ).all()
    return [_due(ScheduleState.of_row(row), now) for row in rows]


def fire_batch(due: list[Due], now: datetime) -> tuple[int, list[Due]]:
    """Fire the first of ``due`` in one write transaction, at most FIRE_BATCH of them and for BATCH_SECONDS;
    returns how many jobs it enqueued, and the schedules left for the next batch.

    Should the transaction fail on a constraint (a tick's job exists already: the belt), the batch is fired
    again one schedule at a time, so only the culprit's tick goes without a job and the others fire.
    """
    batch = due[:FIRE_BATCH]
    try:
        done = _fire_together(batch, now)
    except IntegrityError:
        return sum(_fire_alone(each, now) for each in batch), due[len(batch) :]
    return sum(fired.job is not None for fired in done), due[len(done) :]


def fire(state: ScheduleState, now: datetime) -> bool:
    """Fire one due schedule in a transaction of its own: move it on to its next tick and, if this call did
    (the compare-and-set matched), enqueue the job of the tick it fires. True: this call enqueued a job."""
    return _fire_alone(_due(state, now), now)


def _fire_alone(due: Due, now: datetime) -> bool:
    """``fire`` of a schedule read due. Should its job for the tick exist already (the compare-and-set let two
    through: it cannot; this is the belt), the schedule moves on without a job, so that tick is not tried
    again on every pass."""
    try:
        [fired] = _fire_together([due], now)
    except IntegrityError:
        log.error(
            "schedule %s: a job for tick %s exists already; not enqueued again",
            due.state.spec.name,
            due.tick.isoformat(),
        )
        _fire_together([Due(due.state, due.tick, due.next_run_at, enqueues=False)], now, quiet=True)
        return False
    return fired.job is not None


def _due(state: ScheduleState, now: datetime) -> Due:
    """After downtime only the latest missed tick gets a job (catch_up "one"), or none at all ("none")."""
    spec = state.spec
    tick = spec.timing.latest_at_or_before(now, state.next_run_at)
    enqueues = spec.catch_up == "one" or now - tick <= MISSED_AFTER
    if enqueues and spec.job.type not in current_app.config["JOB_TYPES"]:
        log.warning(
            "schedule %s: job type %r is no longer on QUEUELOG_JOB_TYPES; tick %s skipped",
            spec.name,
            spec.job.type,
            tick.isoformat(),
        )
        enqueues = False
    return Due(state, tick, spec.timing.next_after(tick), enqueues)


def _fire_together(batch: list[Due], now: datetime, quiet: bool = False) -> list[_Fired]:
    """Fire ``batch`` in order in one write transaction, CAS_CHUNK schedules at a time until BATCH_SECONDS have
    passed; returns those fired (at least the first chunk)."""
    done: list[_Fired] = []
    if not batch:
        return done
    with write_transaction() as conn:
        deadline = time.monotonic() + BATCH_SECONDS
        for start in range(0, len(batch), CAS_CHUNK):
            chunk = batch[start : start + CAS_CHUNK]
            won = _move_on(conn, chunk, now)
            done.extend(
                _Fired(
                    due,
                    due.state.id in won,
                    enqueue_job(conn, due.state.spec, due.tick, None) if due.state.id in won and due.enqueues else None,
                )
                for due in chunk
            )
            if time.monotonic() >= deadline:
                break
        last_jobs = [
            {"b_id": fired.due.state.id, "b_tick": fired.due.tick, "b_job": fired.job.id}
            for fired in done
            if fired.job is not None
        ]
        if last_jobs:
            conn.execute(_SET_LAST_JOB, last_jobs)
    if not quiet:
        for fired in done:
            _log_late(fired)
    return done


def _move_on(conn: Connection, chunk: list[Due], now: datetime) -> set[int]:
    """The compare-and-set of each schedule of ``chunk``, in one statement: those still at the tick read (and
    active) move on to their next; returns their ids. Another ticker that moved one on first won it."""
    params: dict = {"b_now": now}
    for index, due in enumerate(chunk):
        params.update(
            {f"b_id{index}": due.state.id, f"b_due{index}": due.state.next_run_at, f"b_next{index}": due.next_run_at}
        )
    return set(conn.execute(_move_on_statement(len(chunk)), params).scalars())


@functools.cache
def _move_on_statement(size: int):
    """``_move_on``'s statement for ``size`` schedules, built once per size: building it took longer than
    running it."""
    table, column = schedules, schedules.c.next_run_at
    ids = [bindparam(f"b_id{index}", type_=table.c.id.type) for index in range(size)]
    return (
        update(table)
        .where(
            table.c.paused.is_(False),
            or_(
                *(
                    and_(table.c.id == ids[index], column == bindparam(f"b_due{index}", type_=column.type))
                    for index in range(size)
                )
            ),
        )
        .values(
            next_run_at=case(
                *((table.c.id == ids[index], bindparam(f"b_next{index}", type_=column.type)) for index in range(size))
            ),
            updated_at=bindparam("b_now", type_=table.c.updated_at.type),
        )
        .returning(table.c.id)
    )


def _log_late(fired: _Fired) -> None:
    """A tick fired late (after downtime), or passed without a job: said once, by the ticker that won it."""
    due, was_due = fired.due, fired.due.state.next_run_at
    if fired.won and (due.tick != was_due or not due.enqueues):
        log.info(
            "schedule %s: tick %s %s",
            due.state.spec.name,
            was_due.isoformat(),
            f"and later ones missed while no server ran; one job for {due.tick.isoformat()}"
            if fired.job is not None
            else "passed without a job",
        )
