"""What a job's record means to the person reading its page: how many times it ran, which run an event
belongs to, why a failed job was not retried, and why a pending job is not due yet.

The record counts retries (``retry_count``: failed runs that went back to the queue), which reads as
"never ran" for a job that failed on its first run ("0 of 3"). People think in runs, so the pages do.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..states import BY_ACTION, Event, JobStatus

QUARANTINE_PREFIX = "quarantined:"

# Statuses a job reaches only by running: the run in progress, or the one that ended it, counts.
_RAN = frozenset({JobStatus.RUNNING, JobStatus.COMPLETED, JobStatus.FAILED})
# The ways out of running that count the run against max_retries; their event rows already carry the
# new retry_count, so the run they end is that count, not one more.
_SPENDS_A_RETRY = {
    (t.event.value, t.to_status.value)
    for t in (BY_ACTION["fail_retry"], BY_ACTION["reap_retry"], BY_ACTION["timeout_retry"])
}
#: How queuelog-worker's failure of a handler it gave up on at the job's timeout begins.
WORKER_TIMEOUT_PREFIX = "TimeoutError: timed out"


class NotRetried(enum.StrEnum):
    """Why a failed job stayed failed."""

    NOT_RETRYABLE = "not retryable"  # its worker failed it as permanent
    RETRIES_SPENT = "retries spent"  # every run its max_retries allows has failed
    QUARANTINED = "quarantined"  # its workers kept dying while holding it (MAX_STALLS)
    TIMED_OUT = "timed out"  # its last allowed run outlived its timeout_seconds, or its worker stopped
    #                                  heartbeating on it


@dataclass(frozen=True)
class Attempts:
    """Runs that count against the job's budget, of the runs its retries allow (max_retries + 1)."""

    runs: int
    allowed: int

    def __str__(self) -> str:
        return f"{self.runs} of {self.allowed}"


@dataclass(frozen=True)
class FailureReason:
    """Why a failed job was not retried: the kind (a short label) and a sentence saying what happened."""

    kind: NotRetried
    detail: str

    @property
    def slug(self) -> str:
        """The kind as a token for markup and tests: ``retries-spent``."""
        return self.kind.value.replace(" ", "-")


def is_quarantined(error: str | None) -> bool:
    """The reaper gave up on this job because its workers kept dying while holding it."""
    return bool(error) and error.startswith(QUARANTINE_PREFIX)


def attempts(job) -> Attempts:
    """How many times the job has run in its current budget (a given-back run does not count), of how many.

    An admin's retry starts a fresh budget, so a retried job starts again from none.
    """
    ran_now = JobStatus(job.status) in _RAN
    return Attempts(job.retry_count + int(ran_now), job.max_retries + 1)


def run_of(event) -> int | None:
    """Which run (1 = the first) an event row belongs to; None for events outside any run (enqueued, retried…)."""
    if JobStatus.RUNNING.value not in (event.from_status, event.to_status):
        return None
    if (event.event, event.to_status) in _SPENDS_A_RETRY:
        return event.attempt
    return event.attempt + 1


def why_not_retried(job, history) -> FailureReason | None:
    """For a failed job, why it was not retried; None for a job in any other state.

    Read from the event that failed it (a worker's ``failed``, or the reaper's ``reaped``) and the
    job's retry budget; a job whose last event is missing is judged by its record alone.
    """
    if job.status != JobStatus.FAILED.value:
        return None
    ending = next((event for event in reversed(history) if event.to_status == JobStatus.FAILED.value), None)
    spent = attempts(job)
    if is_quarantined(job.error):
        return FailureReason(
            NotRetried.QUARANTINED,
            f"Its workers died {job.stall_count} times while holding it, so the reaper stopped "
            "handing it out: it may be what kills them. Look at its payload before retrying.",
        )
    if ending is not None and (
        ending.event == Event.TIMED_OUT.value
        or (ending.event == Event.FAILED.value and (job.error or "").startswith(WORKER_TIMEOUT_PREFIX))
    ):
        return FailureReason(
            NotRetried.TIMED_OUT,
            f"Run {spent}, the last one its retries allow, timed out: it was still running "
            f"{job.timeout_seconds} s after its claim (timeout_seconds).",
        )
    if ending is not None and ending.event == Event.REAPED.value:
        return FailureReason(
            NotRetried.TIMED_OUT,
            f"Its worker stopped heartbeating on run {spent}, the last one its retries allow, and the lease ran out.",
        )
    if job.retry_count >= job.max_retries:
        return FailureReason(
            NotRetried.RETRIES_SPENT,
            f"All {spent.allowed} run{'s' if spent.allowed != 1 else ''} it was allowed "
            f"(max_retries {job.max_retries}) failed.",
        )
    left = job.max_retries - job.retry_count
    return FailureReason(
        NotRetried.NOT_RETRYABLE,
        f"Its worker reported run {spent} as a permanent failure, so the {left} "
        f"retr{'y' if left == 1 else 'ies'} left {'was' if left == 1 else 'were'} not used.",
    )


class NotDueKind(enum.StrEnum):
    """Why a pending job whose run_at is still ahead waits."""

    SCHEDULED = "scheduled"  # enqueued with a run_at ahead
    BACKING_OFF = "backing off"  # a failed run went back to the queue; its retry waits out the backoff


@dataclass(frozen=True)
class NotDue:
    """Why a pending job is not due yet: the kind (the Scheduled page's and the job page's words) and detail."""

    kind: NotDueKind
    detail: str = ""

    @property
    def slug(self) -> str:
        """The kind as a token for markup and tests: ``backing-off``."""
        return self.kind.value.replace(" ", "-")

    def __str__(self) -> str:
        return f"{self.kind} {self.detail}".strip()


def why_not_due(job) -> NotDue:
    """Why a pending job whose run_at is ahead (``figures.not_due``) waits.

    Once a job has run, only a failed run that goes back for another try moves its run_at ahead (now plus the
    backoff; the reaper and a give-back make it due at once), and an admin's retry starts the count again: so a
    job with retries used is backing off, and one without was scheduled so by its producer.
    """
    if job.retry_count:
        return NotDue(NotDueKind.BACKING_OFF, f"after failed run {job.retry_count} of {job.max_retries + 1}")
    return NotDue(NotDueKind.SCHEDULED)
