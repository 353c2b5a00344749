"""The named statements of producer quotas (queuelog/auth/quotas.py): the key's turn, its window and
backlog, the ledger. Re-exported by ``queuelog.sql``, which callers use."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.engine import Connection

from .runner import rowcount, run, scalar
from .values import QuotaState


def quota_turn(conn: Connection, namespace: int, key_id: int) -> None:
    """QUOTA_TURN (PostgreSQL only): this transaction is the key's only enqueue until it ends."""
    scalar(conn, "QUOTA_TURN", {"namespace": namespace, "key": key_id})


def quota_state(conn: Connection, key_id: int, cutoff: datetime, most_pending: int) -> QuotaState:
    """QUOTA_STATE: the key's rate window (ledger rows after ``cutoff``) and pending jobs (up to ``most_pending``)."""
    [state] = run(
        conn, "QUOTA_STATE", {"key": key_id, "cutoff": cutoff, "most": most_pending}, make=QuotaState, times_at=(1, 3)
    )
    return state


def quota_frees_at(conn: Connection, key_id: int, cutoff: datetime, total: int) -> datetime:
    """QUOTA_FREES_AT: when the window's ledger row holding the key's ``total``-th job was written."""
    [at] = run(
        conn, "QUOTA_FREES_AT", {"key": key_id, "cutoff": cutoff, "total": total}, make=lambda at: at, times_at=(0,)
    )
    return at


def quota_record(conn: Connection, key_id: int, at: datetime, jobs: int, total: int) -> None:
    """QUOTA_RECORD: ``jobs`` enqueued by the key at ``at``, its running total now ``total``."""
    rowcount(conn, "QUOTA_RECORD", {"key": key_id, "at": at, "jobs": jobs, "total": total})


def quota_forget(conn: Connection, key_id: int, cutoff: datetime) -> None:
    """QUOTA_FORGET: the key's ledger rows written at or before ``cutoff``."""
    rowcount(conn, "QUOTA_FORGET", {"key": key_id, "cutoff": cutoff})
