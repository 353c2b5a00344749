"""The job state machine as data: every status, every event, and every move between them.

Read this file to learn what may happen to a job. ``queuelog.queue`` decides which transition a
request asks for; the statements in ``queuelog.sql`` carry it out, guarded in their WHERE clause by
the same from-statuses listed here; messages, pages, the OpenAPI document and the metrics read their
names from here, so a new status or event is added in one place.

Each status's comment says who moves a job out of it; TRANSITIONS says exactly how.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class JobStatus(enum.StrEnum):
    """A job's state, and who moves it on (see TRANSITIONS for the exact moves).

    A StrEnum, so f-strings and templates show the plain name (``pending``).
    """

    WAITING = "waiting"  # left by: the server, when its parents finish (→ pending, or → cancelled when one
    #                          failed and it runs only after all completed); a producer's or admin's cancel
    PENDING = "pending"  # left by: a worker's claim; a producer's or admin's cancel; the reaper's expiry
    RUNNING = "running"  # left by: the holding worker (complete, fail, release), an admin's give-back,
    #                          the server giving back a claim nobody received, the reaper (`flask reap`, Reap now):
    #                          a lease that ran out, or a run past its timeout
    COMPLETED = "completed"  # final; only purging removes it
    FAILED = "failed"  # left by: an admin's retry
    CANCELLED = "cancelled"  # left by: an admin's retry


class Event(enum.StrEnum):
    """A line of a job's event log: what happened to it."""

    ENQUEUED = "enqueued"
    CLAIMED = "claimed"
    COMPLETED = "completed"
    REQUEUED = "requeued"  # a failed attempt that goes back for another try
    FAILED = "failed"
    RELEASED = "released"  # given back without counting a failure
    REAPED = "reaped"  # taken back from a worker whose lease ran out
    CANCELLED = "cancelled"
    RETRIED = "retried"
    EXPIRED = "expired"  # never claimed before its expires_at: cancelled
    TIMED_OUT = "timed_out"  # a run outlived its timeout_seconds: taken back even while heartbeating
    RESCHEDULED = "rescheduled"  # an admin made a scheduled (or backing-off) job due now
    DEPENDENCIES_MET = "dependencies_met"  # its parents finished as its run_when asks: it may run
    DEPENDENCY_FAILED = "dependency_failed"  # a parent failed or was cancelled: it will not run
    DEPENDENCY_RETRIED = "dependency_retried"  # an admin retried the parent that cancelled it: it waits again
    DELIVERED = "delivered"  # the server pushed it to its type's target: the HTTP status, or why none came


class Actor(enum.StrEnum):
    """Who may ask for a transition."""

    PRODUCER = "producer"  # the key that enqueued the job
    HOLDER = "holding worker"  # the worker key holding the current claim, with its claim token
    ADMIN = "admin"  # an admin key or a signed-in admin
    SERVER = "server"  # the server itself (a claim whose client hung up)
    REAPER = "reaper"  # `flask reap` from cron, or an admin's "Reap now"


W, P, R, C, F, X = (
    JobStatus.WAITING,
    JobStatus.PENDING,
    JobStatus.RUNNING,
    JobStatus.COMPLETED,
    JobStatus.FAILED,
    JobStatus.CANCELLED,
)

#: Statuses a job never leaves by itself: only people act on them (or purging removes them).
FINAL = frozenset({C, F, X})
#: Statuses of a job still in flight: the claim, the heartbeat and the finish act on these alone. On PostgreSQL
#: they are the rows of the live table, apart from history (docs/storage.md).
LIVE = frozenset(JobStatus) - FINAL
#: Statuses an admin's retry takes a job out of.
RETRYABLE = frozenset({F, X})
#: The one status in which a worker holds a job (claim token, lease).
HELD = frozenset({R})
#: Statuses purging may delete (never a job that a job still waiting or running depends on).
PURGEABLE = FINAL
#: Statuses a job may be cancelled from, by its producer or an admin.
CANCELLABLE = frozenset({W, P})
#: The final statuses that cancel a waiting child whose run_when is "completed".
BROKEN = frozenset({F, X})
#: Statuses a producer key's max-pending quota counts: its jobs not yet claimed. Waiting ones too: they
#: become pending by themselves when their parents finish, with no enqueue that could be refused then.
BACKLOG = frozenset({W, P})


class RunWhen(enum.StrEnum):
    """When a job with dependencies may run."""

    COMPLETED = "completed"  # every parent completed; a parent failed or cancelled cancels it
    FINISHED = "finished"  # every parent reached a final state, whichever (cleanups, callbacks)


#: Statuses an admin may delete a job in (with its event log): nothing will happen to it any more, so
#: nothing in flight is lost. A pending or running job is cancelled first, or left to finish.
DELETABLE = FINAL


@dataclass(frozen=True)
class Transition:
    """One move: ``action`` takes a job in any of ``from_statuses`` to ``to_status``, logging ``event``."""

    action: str
    from_statuses: frozenset[JobStatus]
    to_status: JobStatus
    event: Event | None  # None: the job's status does not change and nothing is logged (heartbeat)
    actors: tuple[Actor, ...]
    description: str


TRANSITIONS: tuple[Transition, ...] = (
    Transition(
        "enqueue", frozenset(), P, Event.ENQUEUED, (Actor.PRODUCER, Actor.ADMIN), "a new job, due at its run_at"
    ),
    Transition(
        "enqueue_waiting",
        frozenset(),
        W,
        Event.ENQUEUED,
        (Actor.PRODUCER, Actor.ADMIN),
        "a new job whose parents (depends_on) have not all finished",
    ),
    Transition(
        "dependencies_met",
        frozenset({W}),
        P,
        Event.DEPENDENCIES_MET,
        (Actor.SERVER,),
        "its last parent finished as its run_when asks, in that parent's transaction",
    ),
    Transition(
        "dependency_failed",
        frozenset({W}),
        X,
        Event.DEPENDENCY_FAILED,
        (Actor.SERVER,),
        "a parent failed for good or was cancelled and its run_when is completed; so on down the graph",
    ),
    Transition(
        "dependency_retried",
        frozenset({X}),
        W,
        Event.DEPENDENCY_RETRIED,
        (Actor.ADMIN,),
        "an admin retried the parent whose failure cancelled it (dependency_failed): it waits again",
    ),
    Transition(
        "claim",
        frozenset({P}),
        R,
        Event.CLAIMED,
        (Actor.HOLDER,),
        "a worker takes the next due job under a fresh claim token and lease",
    ),
    Transition("heartbeat", HELD, R, None, (Actor.HOLDER,), "the holding worker extends its lease"),
    Transition(
        "deliver",
        HELD,
        R,
        Event.DELIVERED,
        (Actor.HOLDER,),
        "the server POSTed it to its type's push target and logs the answer; what it decides comes next",
    ),
    Transition(
        "complete",
        HELD,
        C,
        Event.COMPLETED,
        (Actor.HOLDER,),
        "the holding worker finished the job, with an optional result",
    ),
    Transition(
        "fail_retry",
        HELD,
        P,
        Event.REQUEUED,
        (Actor.HOLDER,),
        "the holding worker failed a retryable attempt with retries left: back after a backoff",
    ),
    Transition(
        "fail_final",
        HELD,
        F,
        Event.FAILED,
        (Actor.HOLDER,),
        "the holding worker failed the job for good (not retryable, or retries spent)",
    ),
    Transition(
        "release",
        HELD,
        P,
        Event.RELEASED,
        (Actor.HOLDER, Actor.ADMIN, Actor.SERVER),
        "given back to the queue without counting a failure",
    ),
    Transition(
        "reap_retry",
        HELD,
        P,
        Event.REAPED,
        (Actor.REAPER,),
        "the lease ran out and retries remain: back to pending, one retry counted",
    ),
    Transition(
        "reap_final",
        HELD,
        F,
        Event.REAPED,
        (Actor.REAPER,),
        "the lease ran out with no retries left, or its workers died MAX_STALLS times (quarantine)",
    ),
    Transition(
        "timeout_retry",
        HELD,
        P,
        Event.TIMED_OUT,
        (Actor.REAPER,),
        "the run outlived its timeout_seconds and retries remain: back to pending, one retry counted",
    ),
    Transition(
        "timeout_final",
        HELD,
        F,
        Event.TIMED_OUT,
        (Actor.REAPER,),
        "the run outlived its timeout_seconds with no retries left",
    ),
    Transition(
        "cancel",
        CANCELLABLE,
        X,
        Event.CANCELLED,
        (Actor.PRODUCER, Actor.ADMIN),
        "a waiting or pending job will not run",
    ),
    Transition(
        "expire",
        frozenset({P}),
        X,
        Event.EXPIRED,
        (Actor.REAPER,),
        "no worker claimed it before its expires_at: it will never run",
    ),
    Transition(
        "run_now",
        frozenset({P}),
        P,
        Event.RESCHEDULED,
        (Actor.ADMIN,),
        "an admin makes a job scheduled for later (or waiting out a backoff) due now",
    ),
    Transition(
        "retry",
        RETRYABLE,
        P,
        Event.RETRIED,
        (Actor.ADMIN,),
        "an admin puts a failed or cancelled job back, retries reset",
    ),
)

BY_ACTION: dict[str, Transition] = {transition.action: transition for transition in TRANSITIONS}

#: Statuses some bulk action of the jobs page takes a job out of (retry, cancel, delete): all but running.
BULK_ACTIONABLE = RETRYABLE | BY_ACTION["cancel"].from_statuses | DELETABLE


def exits(status: JobStatus) -> tuple[Transition, ...]:
    """The transitions that take a job out of (or keep it in) ``status``."""
    return tuple(t for t in TRANSITIONS if status in t.from_statuses)


def allowed(action: str, status: JobStatus | str) -> bool:
    """Whether ``action`` may move a job that is ``status``."""
    return JobStatus(status) in BY_ACTION[action].from_statuses


def spell(statuses) -> str:
    """'failed or cancelled': statuses as a message names them, in the enum's order."""
    names = [s.value for s in JobStatus if s in statuses]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def names(statuses) -> tuple[str, ...]:
    """('failed', 'cancelled'): the statuses' plain names in the enum's order, for SQL, CLI defaults, pages."""
    return tuple(s.value for s in JobStatus if s in statuses)


STATUS_NAMES: tuple[str, ...] = tuple(s.value for s in JobStatus)
EVENT_NAMES: tuple[str, ...] = tuple(e.value for e in Event)
