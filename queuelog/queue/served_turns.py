"""The turns this process's claims served last: per database, job type and priority, the lowest turn
(``fair_tag``) among the jobs its latest claim of that type and priority took.

Enqueue places a concurrency key's first job at the head of its type's queue, the lowest turn of the type's
pending jobs at that priority (``sql.turn``). Finding it reads the type's pending index from its start. While a
long transaction holds vacuum back, that start holds an entry for every job claimed since the transaction began:
their old row versions must stay for its snapshot, and each entry is read and its row looked at before it is
passed over. A claim takes the lowest turns that are due, so the head is not below the turn the latest claim
served, and the read starts there instead: it passes over none of those entries.

What can sit below it is a job that came back to pending with its old turn (a retry, a reaped job) or one a
claim passed over (not due yet, or held by another claim that then failed). A new key's first job is then placed
at the head of the other pending jobs, behind that one rather than beside it: fairness loses one place, and
nothing is skipped (a claim reads from the start).

Per process, from its own claims only: another process's claims move the head on without telling this one,
whose read then starts further back and passes over more entries, as every read did before; on PostgreSQL the
claims' floor, which every process reads, starts it no lower than the lowest claimable turn.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable

from sqlalchemy.engine import Engine

from ..sql.values import JobRow
from ..waiting import wakeup

_served: weakref.WeakKeyDictionary[Engine, dict[tuple[str, int], int]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def note(engine: Engine, claimed: Iterable[JobRow]) -> None:
    """A claim on ``engine``'s database took ``claimed``: remember the lowest turn of each type and priority."""
    lowest: dict[tuple[str, int], int] = {}
    for row in claimed:
        key = (row.type, row.priority)
        if row.fair_tag is not None and (key not in lowest or row.fair_tag < lowest[key]):
            lowest[key] = row.fair_tag
    if lowest:
        with _lock:
            _served.setdefault(engine, {}).update(lowest)


def floor(engine: Engine, job_type: str, priority: int) -> int:
    """Where the read for the head of (``job_type``, ``priority``)'s queue may start: the later of the turn this
    process's claims served there and the claims' floor (PostgreSQL, waiting/claim_floor.py: no claimable job's
    turn is below it); 0 when neither is known."""
    with _lock:
        served = _served.get(engine, {}).get((job_type, priority), 0)
    return max(served, wakeup.claim_floor(engine))
