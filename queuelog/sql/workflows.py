"""The named statements of workflows (queue/dependencies.py): a new job's parents, waiting children,
promoted, doomed or revived. Re-exported by ``queuelog.sql``, which callers use."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.engine import Connection

from .runner import run
from .values import BrokenParent, JobRow, Log, ParentMark


def mark_parents(conn: Connection, ids: Sequence[int]) -> list[ParentMark]:
    """MARK_PARENTS: those of ``ids`` that exist, marked as having dependents (locked until the commit)."""
    return run(conn, "MARK_PARENTS", {"ids": sorted(set(ids))}, make=ParentMark, times_at=())


def waiting_children(conn: Connection, ids: Sequence[int]) -> list[int]:
    """WAITING_CHILDREN: the waiting jobs that depend on any of ``ids``."""
    return run(conn, "WAITING_CHILDREN", {"ids": ids}, make=lambda child_id: child_id, times_at=())


def promote(conn: Connection, ids: Sequence[int], now: datetime, log: Log) -> list[JobRow]:
    """PROMOTE: those of ``ids`` waiting whose parents are done as their run_when asks, now pending."""
    return run(conn, "PROMOTE", {"ids": ids, "now": now}, log)


def broken_parents(conn: Connection, ids: Sequence[int]) -> list[BrokenParent]:
    """BROKEN_PARENTS: for those of ``ids`` waiting on completed parents, each parent failed or cancelled."""
    return run(conn, "BROKEN_PARENTS", {"ids": ids}, make=BrokenParent, times_at=())


def doom(conn: Connection, ids: Sequence[int], now: datetime, log: Log) -> list[JobRow]:
    """DOOM: those of ``ids`` still waiting, cancelled."""
    return run(conn, "DOOM", {"ids": ids, "now": now}, log)


def revive(conn: Connection, parent_ids: Sequence[int], now: datetime, log: Log) -> list[JobRow]:
    """REVIVE: the children of ``parent_ids`` that a dependency failure cancelled, waiting again."""
    return run(conn, "REVIVE", {"ids": parent_ids, "now": now}, log)
