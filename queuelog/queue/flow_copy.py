"""This process's copy of which types are under flow control or delivered by push, for the claim and the moves
out of running (see flow.py for why a copy, and why an old one never lets a claim past a limit).

The copy carries the version of the settings it was read at (``type_settings_version``); a claim's statement
takes nothing when that is no longer the current one, and the claim is made again with the copy read afresh.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.engine import Connection

from ..database.transactions import single_statement_read
from ..extensions import db
from ..sql.values import limited
from ..states import HELD, JobStatus
from ..waiting import wakeup

#: How long the moves out of running trust the process's copy of which types are limited (``controlled``);
#: a claim trusts it for as long as its version is the current one.
CACHE_SECONDS = 1.0


@dataclass(frozen=True)
class Controlled:
    """This process's copy of the types under flow control: paused ones, limited ones, and those the server
    delivers to a push target; read when type_settings_version was ``version`` (0: no row)."""

    paused: frozenset[str]
    limited: frozenset[str]
    version: int = 0
    pushed: frozenset[str] = frozenset()

    def limited_among(self, types) -> list[str]:
        """The limited types a claim of ``types`` (None: any type) may take, in lock order."""
        return sorted(self.limited if types is None else self.limited.intersection(types))

    def any_among(self, types) -> bool:
        """Is any type a claim of ``types`` (None: any type) may take paused or limited?"""
        every = self.paused | self.limited
        return bool(every if types is None else every.intersection(types))

    def pulled_among(self, types, every_type) -> tuple[str, ...] | None:
        """The types a worker's claim of ``types`` (None: any of ``every_type``) may take: a type with a push
        target is the server's to claim, for its target."""
        if not self.pushed:
            return None if types is None else tuple(types)
        return tuple(name for name in (every_type if types is None else types) if name not in self.pushed)


class _Cache:
    """Per database, the Controlled copy and when it was read."""

    def __init__(self):
        self._lock = threading.Lock()
        self._copies: dict[str, tuple[float, Controlled]] = {}

    def get(self, conn: Connection | None = None, max_age: float = math.inf) -> Controlled:
        copy = self._copies.get(str(db.engine.url))
        if copy is not None and time.monotonic() - copy[0] < max_age:
            return copy[1]
        return self.read(conn)

    def read(self, conn: Connection | None = None) -> Controlled:
        read_at = time.monotonic()
        controlled = _read_controlled(conn)
        with self._lock:
            self._copies[str(db.engine.url)] = (read_at, controlled)
        return controlled

    def clear(self) -> None:
        with self._lock:
            self._copies.clear()


_cache = _Cache()


def controlled_for_claim() -> Controlled:
    """The copy a claim is shaped by, however old: the claim's statement checks its version (sql.claim)."""
    return _cache.get()


def read_afresh() -> Controlled:
    """The settings read now (a claim found its copy out of date); the process's copy from now on."""
    return _cache.read()


def controlled(conn: Connection | None = None) -> Controlled:
    """Which types are under flow control, as this process saw it at most CACHE_SECONDS ago: for the moves
    out of running, which only decide by it whether to wake waiting claims (``slots_freed``).

    ``conn``: read through this connection (a transaction in progress) when the copy is older.
    """
    return _cache.get(conn, CACHE_SECONDS)


def forget_cached() -> None:
    """Read the settings afresh on the next claim (this process just changed them)."""
    _cache.clear()


#: One statement, so the settings and their version are of one snapshot. No row yet: version 0.
_READ_CONTROLLED = text(f"""
SELECT v.version, s.type, s.paused, {limited("s")} AS limited, s.push_url IS NOT NULL AS pushed
  FROM (SELECT coalesce((SELECT version FROM type_settings_version WHERE id = 1), 0) AS version) v
  LEFT JOIN type_settings s ON s.paused OR {limited("s")} OR s.push_url IS NOT NULL""")


def _read_controlled(conn: Connection | None) -> Controlled:
    if conn is None:
        # Outside a transaction: on PostgreSQL one round trip instead of three (BEGIN, SELECT, ROLLBACK). A claim
        # pays it once after each change of the settings; the moves out of running, once per CACHE_SECONDS.
        with single_statement_read() as own:
            rows = own.execute(_READ_CONTROLLED).all()
    else:
        rows = conn.execute(_READ_CONTROLLED).all()
    paused = frozenset(row.type for row in rows if row.type is not None and row.paused)
    limited_types = frozenset(row.type for row in rows if row.type is not None and row.limited)
    pushed = frozenset(row.type for row in rows if row.type is not None and row.pushed)
    return Controlled(paused, limited_types, rows[0].version, pushed)


def slots_freed(conn: Connection, rows, from_status: str | None) -> None:
    """After ``rows`` moved: if running jobs of a limited type stopped running, wake the waiting claims.

    A claim held back by a concurrency limit has nothing else to wake it; for other types this costs
    nothing (no NOTIFY on PostgreSQL for every completed job).
    """
    if from_status is None or JobStatus(from_status) not in HELD:
        return
    limited = controlled(conn).limited
    if limited and any(row.type in limited and row.status not in HELD for row in rows):
        wakeup.room_freed(conn)
