"""Long-poll claims: ``POST /jobs/claim`` with ``wait`` holds its request until a job can be claimed.

A waiting claim holds no transaction, lock or database connection (``wakeup`` says who wakes it),
and sleeps no longer than until the next pending job it could claim comes due (``_NextDue``), so a
scheduled job or a retry's backoff ends in a claim on time. It does hold a server thread: gunicorn's
gthread worker serves one request per thread. So:

- **A cap per server process.** A waiting claim takes one of the process's places for waiting requests
  (``waiting_places``, shared with producers waiting for a job's end), so the rest of its threads stay
  free for producers and acknowledgements. A claim that finds none does not wait: it takes a job if one
  is due, else it is answered at once with 503 and ``Retry-After`` (``LongPollsFull``). It is refused
  before it claims anything, so a refusal never strands a job.
- **A client that hung up gets nothing.** A waiting claim whose worker closed its connection
  (``waiting_places.client_gone``) stops without claiming, and gives its place back; a job claimed in
  the window between that check and the answer is given straight back (``give_back``), because a job
  claimed for nobody would sit ``running`` until its lease ran out and ``flask reap`` came by.
- **A stopping server answers at once** (``wakeup.stop_waiting``).
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime

from flask import current_app

from .. import sql
from ..core.clock import utcnow
from ..core.errors import LongPollsFull
from ..core.patterns import Priority
from ..database.transactions import single_statement_read
from .waiting_places import client_gone, place_if_free, retry_after_seconds, waiting_limit
from .wakeup import Waker, claim_floor, shutting_down, waker_for_current_app

log = logging.getLogger("queuelog.longpoll")


def claim_or_wait(
    claim_once: Callable[[], list], wait: float, types: Sequence[str] | None, give_back: Callable[[list], None]
) -> list:
    """Claim now; if nothing is due, wait up to ``wait`` seconds for a job and claim it then.

    ``claim_once`` is the normal atomic claim; ``types`` limits the cheap due-check to the job
    types that claim would take (None: any); ``give_back`` returns claimed rows to the queue when
    the client turns out to have hung up. Returns what the client gets: the claimed rows, or [].
    Raises ``LongPollsFull`` when this process already holds as many waiting claims as it may.
    """
    if wait <= 0:
        rows = claim_once()
    else:
        limit = waiting_limit()
        with place_if_free(limit) as placed:
            rows = _wait_and_claim(claim_once, wait, types) if placed else _claim_if_due(claim_once, types, limit)
    if rows and client_gone():
        # It hung up while we claimed: nobody will run these jobs or heartbeat them.
        give_back(rows)
        log.info("claim_given_back jobs=%s reason=client_hung_up", ",".join(str(row.id) for row in rows))
        return []
    return rows


def _claim_if_due(claim_once: Callable[[], list], types: Sequence[str] | None, limit: int) -> list:
    """A claim over the cap: take what is due now, or be told when to come back (no waiting)."""
    # The due-check is a read, often answered from memory: refusals, dozens a second when many
    # workers are idle, neither take SQLite's write lock nor each cost a query.
    waker = waker_for_current_app()
    rows = [] if _nothing_due.lately(types, waker) or not _something_due(types, waker) else claim_once()
    if not rows:
        retry_after = retry_after_seconds()
        raise LongPollsFull(
            f"this server process is holding as many waiting claims as it can ({limit}) "
            f"and nothing is due; claim again in {retry_after} s",
            retry_after=retry_after,
        )
    return rows


def _wait_and_claim(claim_once: Callable[[], list], wait: float, types: Sequence[str] | None) -> list:
    waker = waker_for_current_app()
    deadline = time.monotonic() + wait
    seen = waker.generation
    looked_at = utcnow()  # what came due after this, the waiter has not looked for yet
    rows = claim_once()
    recheck_at = time.monotonic() + waker.current_recheck()
    while not rows and not shutting_down():
        now = time.monotonic()
        remaining = deadline - now
        if remaining <= 0:
            break
        look_in = min(remaining, max(0.0, recheck_at - now), _next_due.seconds_until(types, waker, looked_at))
        woken = waker.wait(seen, look_in)
        seen = waker.generation
        if client_gone():
            break  # claiming now would hand jobs to nobody; its place is free again
        with _claiming_turn:
            looked_at = utcnow()
            if (woken and _claiming_turn.first_after(waker, seen)) or _something_due(types, waker):
                rows = claim_once()
        recheck_at = time.monotonic() + waker.current_recheck()
    return rows


class _ClaimingTurn:
    """The waiters of a process claim one at a time after a wake-up; the first claims straight away.

    Every waiter of the process wakes for every announcement. The first to take its turn after one
    goes straight to the claim: a job was just announced, so asking first (a read) would only delay
    it, and most on a machine that was idle (a read's round trip costs more there). Each after it asks (the read)
    whether anything it could claim is still due, instead of each running a write that finds nothing.
    A waiter woken by its own timer (a recheck, a due time) always asks first.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._claimed_after: tuple[Waker, int] | None = None  # the wake-up whose first claim has been made

    def __enter__(self):
        self._lock.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self._lock.release()

    def first_after(self, waker: Waker, generation: int) -> bool:
        """Is this the first claim after ``waker``'s wake-up ``generation``? (Call during one's turn.)"""
        wake_up = (waker, generation)
        first, self._claimed_after = self._claimed_after != wake_up, wake_up
        return first


_claiming_turn = _ClaimingTurn()


def _something_due(types: Sequence[str] | None, waker: Waker) -> bool:
    """Read-only, lock-free: is any job of these types claimable? (Saves a write lock per poll.)

    The same condition as the claim's own (CLAIMABLE in queuelog.sql), so the two cannot disagree.
    """
    generation, asked_at = waker.generation, time.monotonic()
    # One SELECT outside any transaction: a waiter's recheck never leaves a session idle in one.
    with single_statement_read() as conn:
        due = sql.something_due(conn, utcnow(), types, claim_floor(conn.engine))
    if not due:
        _nothing_due.note(types, generation, asked_at)
    return due


class _NothingDue:
    """Recent answers "nothing of these types is due", trusted until the next wake-up or recheck.

    Nothing becomes claimable unannounced except what the waiters' own recheck is for (a job whose
    run_at comes, and on SQLite one enqueued by another process), so an answer holds for as long as
    a waiter would go without asking again: the refusals of a large idle fleet reuse the answers
    the waiting claims get anyway.
    """

    MAX_TYPE_SETS = 1000

    def __init__(self):
        self._answers: dict[frozenset | None, tuple[int, float]] = {}

    def lately(self, types: Sequence[str] | None, waker: Waker) -> bool:
        """Was "nothing due" the answer since the last wake-up, within a recheck interval?"""
        answer = self._answers.get(_type_set(types))
        return (
            answer is not None
            and answer[0] == waker.generation
            and time.monotonic() - answer[1] < waker.current_recheck()
        )

    def note(self, types: Sequence[str] | None, generation: int, asked_at: float) -> None:
        if len(self._answers) >= self.MAX_TYPE_SETS:
            self._answers.clear()
        self._answers[_type_set(types)] = (generation, asked_at)


def _type_set(types: Sequence[str] | None) -> frozenset | None:
    return None if types is None else frozenset(types)


_nothing_due = _NothingDue()


# --- when the next job comes due -------------------------------------------------------------------


class _NextDue:
    """When the next pending job of these types comes due after a waiter last looked, as last read, shared by
    the process's waiters.

    An answer holds until the next wake-up, which may announce an earlier job, or until a waiter has looked
    since that moment: then the job is claimed, or held back by something that will announce it, and what
    comes next is read again. A job that came due after the asking waiter last looked is due now (0 s): a
    waiter that claimed just before a job's run_at, and asks when the next job comes once that moment has
    passed, takes it then, not at its next recheck. A job written unannounced (by hand) is not waited for
    here; the recheck finds it once it is due.
    """

    MAX_ANSWERS = 1000
    #: Wake a hair after the due time, not before it: the claim compares run_at with its own clock.
    LATE_BY_SECONDS = 0.001

    def __init__(self):
        self._answers: dict[tuple[Waker, frozenset | None], tuple[int, datetime | None]] = {}
        # One waiter reads while the others of the process, woken by the same announcement, wait for its answer.
        self._reading = threading.Lock()

    def seconds_until(self, types: Sequence[str] | None, waker: Waker, looked_at: datetime) -> float:
        """Seconds until the next pending job of these types that comes due after ``looked_at``, when the waiter
        last claimed or asked whether anything was due (0: it is due now; inf: none is pending)."""
        key = (waker, _type_set(types))
        with self._reading:
            answer = self._answers.get(key)
            if answer is None or answer[0] != waker.generation or (answer[1] is not None and answer[1] <= looked_at):
                # The generation first: nothing slips between. Any waiter's answer serves them all: what came due
                # before another waiter looked, that waiter's claim took, or found held back.
                answer = (waker.generation, _earliest_run_at(types, looked_at))
                if len(self._answers) >= self.MAX_ANSWERS:
                    self._answers.clear()
                self._answers[key] = answer
        due_at = answer[1]
        if due_at is None:
            return math.inf
        return max(0.0, (due_at - utcnow()).total_seconds()) + self.LATE_BY_SECONDS


_next_due = _NextDue()
#: Statements stay well below SQLite's limit of 500 SELECTs in one compound statement.
_SEEKS_PER_STATEMENT = 100


def _earliest_run_at(types: Sequence[str] | None, after: datetime) -> datetime | None:
    """The earliest run_at after ``after`` of a pending job of these types (None: any of the app's job types).

    Only those due after the waiter last looked: a job due before that, which its claim did not take, is held
    back by something else (a paused type, a concurrency or rate limit), and waiting "until it is due" would
    spin; what frees it announces itself, or the recheck finds it.
    """
    wanted = tuple(types) if types is not None else tuple(current_app.config["JOB_TYPES"])
    earliest = []
    for seeks in _seeks(wanted):
        # One SELECT, outside a transaction: the waiter sleeps right after it, holding nothing.
        with single_statement_read() as conn:
            earliest.append(sql.next_run_at(conn, after, seeks))
    return min((run_at for run_at in earliest if run_at is not None), default=None)


@functools.lru_cache(maxsize=256)
def _seeks(types: tuple[str, ...]) -> list[tuple[tuple[str, int], ...]]:
    """The reads behind ``_earliest_run_at`` (NEXT_RUN_AT), each up to _SEEKS_PER_STATEMENT (type, priority).

    One seek per type and priority, however many jobs are scheduled (queuelog.sql says how). A job of a
    priority or type the API does not give (written by hand, or of a type since dropped from
    QUEUELOG_JOB_TYPES) is found by the recheck instead.
    """
    seeks = [(job_type, priority.value) for job_type in types for priority in Priority]
    return [tuple(seeks[start : start + _SEEKS_PER_STATEMENT]) for start in range(0, len(seeks), _SEEKS_PER_STATEMENT)]
