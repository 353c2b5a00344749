"""The reaper: take back running jobs whose lease or timeout ran out, and cancel pending jobs past their expires_at.

The cron reaper (``flask reap``) and an admin's "reap now" call ``reap``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from flask import current_app
from sqlalchemy.engine import Connection

from .. import sql
from ..core.clock import utcnow
from ..database.transactions import retried_when_moved, write_transaction
from ..sql import JobRow, Leave
from .moves import (
    EXPIRE,
    REAP_FINAL,
    REAP_RETRY,
    REAPER,
    TIMEOUT_FINAL,
    TIMEOUT_RETRY,
    changed,
    event_row,
    failed,
    requeued,
)


@dataclass
class ReapReport:
    """What a reaper pass did: the running jobs it took back (requeued, failed for good, quarantined; those
    among them whose run outlived its timeout also in ``timed_out``), and the pending jobs it cancelled
    because they expired."""

    requeued: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    quarantined: list[int] = field(default_factory=list)
    timed_out: list[int] = field(default_factory=list)
    expired: list[int] = field(default_factory=list)

    @property
    def total(self) -> int:
        """The running jobs taken back (expired pending jobs are counted apart)."""
        return len(self.requeued) + len(self.failed) + len(self.quarantined)


class _Verdict(NamedTuple):
    """What the reaper does with one running job it found: the move, its report list, the error, the Leave."""

    transition: object
    bucket: list[int]
    error: str
    leave: Leave


@retried_when_moved
def reap(
    older_than: int | None = None, dry_run: bool = False, now: datetime | None = None, actor: str = REAPER
) -> ReapReport:
    """Take back running jobs whose lease ran out (or claimed more than ``older_than`` seconds ago), and cancel
    pending jobs whose expires_at passed.

    A running job goes to pending with retry_count + 1, or to failed when no retry is left; a job whose
    workers died holding it MAX_STALLS times is quarantined as failed, so it cannot take down the fleet. A run
    past its timeout_at (its lease never outlasts it) is timed out the same way, even while its worker
    heartbeats: no stall is counted, its worker is alive. A job completed meanwhile is never touched: every
    take-back re-checks status and claim token. ``actor`` is who asked, for the event log: the cron reaper,
    or an admin pressing "reap now".
    """
    now = now or utcnow()
    claimed_before = None if older_than is None else now - timedelta(seconds=older_than)
    report = ReapReport()
    with write_transaction() as conn:
        for job in sql.stalled(conn, now, claimed_before):
            verdict = _verdict(job, now, report)
            if dry_run:
                verdict.bucket.append(job.id)
                continue
            log = event_row(verdict.transition, actor, now, error=verdict.error)
            taken = sql.take_back(conn, [job.id], job.claim_token, verdict.leave, log)
            if taken:  # else it finished between our read and our write: left alone
                verdict.bucket.append(job.id)
                if verdict.transition in (TIMEOUT_RETRY, TIMEOUT_FINAL):
                    report.timed_out.append(job.id)
                changed(conn, verdict.transition, taken, log)
        _expire(conn, now, actor, dry_run, report)
    return report


def _verdict(job: JobRow, now: datetime, report: ReapReport) -> _Verdict:
    """What the reaper does with a running job it found: timed out, quarantined, requeued or failed."""
    if job.timeout_at is not None and job.timeout_at <= now:
        error = f"timed out: the run outlived its timeout_seconds ({job.timeout_seconds} s)"
        if job.retry_count < job.max_retries:
            return _Verdict(TIMEOUT_RETRY, report.requeued, error, requeued(now, error, run_at=now))
        return _Verdict(TIMEOUT_FINAL, report.failed, error + " and no retries are left", failed(now, error))
    stalls = job.stall_count + 1
    if stalls >= current_app.config["MAX_STALLS"]:
        error = f"quarantined: its worker died {stalls} times"
        return _Verdict(REAP_FINAL, report.quarantined, error, failed(now, error, stalled=True))
    if job.retry_count < job.max_retries:
        error = f"worker {job.worker_id} stopped heartbeating; its lease expired"
        return _Verdict(REAP_RETRY, report.requeued, error, requeued(now, error, run_at=now, stalled=True))
    error = f"worker {job.worker_id} stopped heartbeating and no retries are left"
    return _Verdict(REAP_FINAL, report.failed, error, failed(now, error, stalled=True))


def _expire(conn: Connection, now: datetime, actor: str, dry_run: bool, report: ReapReport) -> None:
    """pending → cancelled (event ``expired``) for the jobs no worker claimed before their expires_at."""
    ids = [job.id for job in sql.expirable(conn, now)]
    if dry_run or not ids:
        report.expired += ids
        return
    log = event_row(EXPIRE, actor, now, error="expired: no worker claimed it before its expires_at")
    expired = sql.expire(conn, ids, now, log)
    report.expired += [row.id for row in expired]
    changed(conn, EXPIRE, expired, log)
