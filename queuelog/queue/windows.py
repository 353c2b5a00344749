"""Dedupe windows (``unique_for``): whose they are, and taking them in the enqueue's transaction.

Whose (security): each producer key has its own windows, as it has its own idempotency keys, unless an
admin set the type's ``unique_scope`` to "type" (one window per unique key for every producer). A window
shared with producers who may not see each other's jobs must not hand one the other's job: a window held by
a job the caller may not see (``Caller.owns_or_oversees``, the rule of GET /jobs/{id}) comes back as
``Unseen``, which carries nothing of the job, so no answer can show any of it, and the enqueue refuses it as
a ``ref`` parent (queue/enqueueing.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple

from sqlalchemy import select
from sqlalchemy.engine import Connection

from .. import sql
from ..auth.keys import Caller
from ..models import TypeSettings
from ..sql import JobRow, Window
from ..sql.values import SHARED_SCOPE
from .flow import UNIQUE_SCOPES

settings_table = TypeSettings.__table__
SHARED = UNIQUE_SCOPES[1]


class Held(NamedTuple):
    """A window another job holds, one the caller may see: the enqueue answers with it."""

    job: JobRow


class Unseen(NamedTuple):
    """A window a job the caller may not see holds: the enqueue answers only that it was deduplicated."""


def take(
    conn: Connection, caller: Caller, wanted: dict[tuple[str, str], int], now: datetime
) -> dict[tuple[str, str], Window | Held | Unseen]:
    """Take each (type, key) window of ``wanted`` (its value: the request's unique_for), in the caller's scope
    for the type; each comes back taken (its Window, whose job_id the enqueue sets once its job is inserted),
    ``Held`` or ``Unseen``.

    Windows are taken in (type, key) order, so two batches sharing several keys never wait for each other in
    a circle. One guarded INSERT … ON CONFLICT each (UNIQUE_TAKE says why a race cannot make two jobs).
    """
    shared = _shared_types(conn, {job_type for job_type, _ in wanted})
    outcome: dict[tuple[str, str], Window | Held | Unseen] = {}
    for job_type, key in sorted(wanted):
        window = Window(job_type, SHARED_SCOPE if job_type in shared else _own_scope(caller), key)
        cutoff = now - timedelta(seconds=wanted[(job_type, key)])
        if sql.unique_take(conn, window, now, cutoff):
            outcome[(job_type, key)] = window
            continue
        holder = sql.unique_holder(conn, window)
        if holder is None and sql.unique_take(conn, window, now, now):
            outcome[(job_type, key)] = window  # its job was purged since the take looked: free after all
        elif holder is not None and not caller.owns_or_oversees(holder.producer_key_id):
            outcome[(job_type, key)] = Unseen()
        else:
            outcome[(job_type, key)] = Held(holder)
    return outcome


def _shared_types(conn: Connection, job_types: set[str]) -> set[str]:
    """Those of ``job_types`` whose producers share one window per key (unique_scope "type"), read in the
    enqueue's transaction, not from a per-process copy: an admin's change applies from the next enqueue on."""
    return set(
        conn.execute(
            select(settings_table.c.type).where(
                settings_table.c.type.in_(sorted(job_types)), settings_table.c.unique_scope == SHARED
            )
        ).scalars()
    )


def _own_scope(caller: Caller) -> int:
    """The scope of the caller's own windows: its key's id (a schedule's tick, with no key, sets no unique_for)."""
    if caller.id is None:
        raise ValueError("a dedupe window of its own needs a key")
    return caller.id
