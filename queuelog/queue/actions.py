"""A producer's or admin's moves of a job: cancel, an admin's retry, bulk cancel and delete, and "run now"."""

from __future__ import annotations

from .. import sql
from ..core.clock import utcnow
from ..database.transactions import retried_when_moved, write_transaction
from ..ops import observe_deletions
from ..sql import JobRow
from ..states import JobStatus
from . import dependencies
from .moves import CANCEL, RETRY, RUN_NOW, changed, event_row, refuse


@retried_when_moved
def cancel(job_id: int, actor: str, owner_key_id: int | None = None) -> JobRow:
    """waiting or pending → cancelled. ``owner_key_id`` limits a producer to its own jobs (others are 'not found').

    Its waiting children that need it completed are cancelled with it (dependency_failed), and on down.
    """
    now = utcnow()
    with write_transaction() as conn:
        # One statement per from-status, so the event row says where the job came from.
        for from_status in (JobStatus.PENDING, JobStatus.WAITING):
            log = event_row(CANCEL, actor, now, from_status=from_status)
            row = sql.cancel(conn, job_id, owner_key_id, from_status.value, now, log)
            if row is not None:
                break
        else:
            refuse(conn, job_id, "cancel", CANCEL, owner_key_id=owner_key_id)
        changed(conn, CANCEL, [row], log)
    return row


@retried_when_moved
def cancel_many(job_ids: list[int], actor: str) -> list[JobRow]:
    """Cancel every listed job that is waiting or pending (an admin's bulk action); others are left as they are.

    One statement per from-status, so each job's event row says where it came from."""
    if not job_ids:
        return []
    now = utcnow()
    cancelled: list[JobRow] = []
    with write_transaction() as conn:
        for from_status in (JobStatus.PENDING, JobStatus.WAITING):
            log = event_row(CANCEL, actor, now, from_status=from_status)
            rows = sql.cancel_many(conn, job_ids, from_status.value, now, log)
            changed(conn, CANCEL, rows, log)
            cancelled += rows
    return sorted(cancelled, key=lambda row: row.id)


@retried_when_moved
def delete_many(job_ids: list[int], actor: str) -> list[JobRow]:
    """Delete every listed job that is completed, failed or cancelled, with its event log; others are left.

    The event log goes with the job, so the server's log records who deleted what (``job_deleted``).
    """
    if not job_ids:
        return []
    with write_transaction() as conn:
        rows = sql.delete(conn, job_ids)
    observe_deletions(rows, actor)
    return sorted(rows, key=lambda row: row.id)


@retried_when_moved
def retry(job_id: int, actor: str) -> JobRow:
    """failed or cancelled → pending with a fresh retry budget (an admin's decision); the descendants its
    failure cancelled (dependency_failed) wait again."""
    rows = retry_many([job_id], actor)
    if not rows:
        with write_transaction() as conn:
            refuse(conn, job_id, "retry", RETRY)
    return rows[0]


@retried_when_moved
def retry_many(job_ids: list[int], actor: str) -> list[JobRow]:
    """Retry every listed job that is failed or cancelled; others are left as they are."""
    if not job_ids:
        return []
    now = utcnow()
    rows: list[JobRow] = []
    with write_transaction() as conn:
        # One statement per from-status, so each event row says where its job came from.
        for from_status in (status for status in JobStatus if status in RETRY.from_statuses):
            log = event_row(RETRY, actor, now, from_status=from_status)
            retried = sql.retry(conn, job_ids, from_status.value, now, log)
            changed(conn, RETRY, retried, log)
            rows += retried
        # The descendants a retried job's failure cancelled (dependency_failed) wait for it again.
        dependencies.revive(conn, rows, actor, now)
    return sorted(rows, key=lambda row: row.id)


@retried_when_moved
def run_now(job_id: int, actor: str) -> JobRow:
    """pending → pending, due now: an admin's "Run now" for a job scheduled for later or waiting out a backoff."""
    now = utcnow()
    log = event_row(RUN_NOW, actor, now)
    with write_transaction() as conn:
        row = sql.run_now(conn, job_id, now, log)
        if row is None:
            refuse(conn, job_id, "run now", RUN_NOW)
        changed(conn, RUN_NOW, [row], log)
    return row
