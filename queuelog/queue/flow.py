"""Flow control per job type (each type is a queue): paused, concurrency, rate and per-key limits.

An admin changes a type's settings here (``update_type``, written with its history in ``type_changes``);
the claim enforces them in its own statement (queuelog/sql, CLAIM). This module also keeps what the claim
needs to know before it starts: which types are under flow control, from a per-process copy of the
settings. The copy only decides the claim's shape (the plain walk or the flow pick, which limited types to
lock first: FLOW_LOCK) and whether finishing a job should wake waiting claims; the limits themselves are
always read by the claim from the database, in the claim's transaction, so an old copy never lets a claim
past a limit. Nor does it hold one back: the copy carries the version of the settings it was read at
(``type_settings_version``, which a trigger renews with every change), the claim's statement takes
nothing when that is no longer the current one and says so, and the claim is made again with the settings
read afresh (``read_afresh``). So a claim needs no read before its statement, however old the copy, and a
change obeys every claim of every process as soon as it is committed. The moves out of running trust the
copy for ``CACHE_SECONDS`` (``controlled``).

The types listed are those of ``QUEUELOG_JOB_TYPES``: the allowlist always has a value (``["default"]`` when
unset), and only its types can be enqueued, so it is the list of queues there are.
"""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flask import current_app
from sqlalchemy import func, insert, select, text, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from ..core.clock import rfc3339, utcnow
from ..core.errors import QueueError
from ..database.transactions import read_connection, single_statement_read, write_transaction
from ..extensions import db
from ..models import Job, TypeChange, TypeSettings
from ..sql.values import limited
from ..states import HELD, JobStatus
from ..waiting import wakeup

settings_table = TypeSettings.__table__
changes_table = TypeChange.__table__
jobs = Job.__table__

#: The fields an admin may change, in the order answers show them.
FIELDS = ("paused", "concurrency_limit", "rate_limit", "key_concurrency_limit", "unique_scope")
#: Whose dedupe windows (unique_for) a type keeps: each producer key its own (the default), or one for all.
UNIQUE_SCOPES = ("producer", "type")
#: How long the moves out of running trust the process's copy of which types are limited (``controlled``);
#: a claim trusts it for as long as its version is the current one.
CACHE_SECONDS = 1.0


class TypeNotFound(QueueError):
    """A type that is not on this server's QUEUELOG_JOB_TYPES."""

    status = 404
    title = "Not found"


@dataclass(frozen=True)
class RateLimit:
    """At most ``jobs`` claims of the type in any window of ``per_seconds`` seconds."""

    jobs: int
    per_seconds: int

    def as_json(self) -> dict:
        return {"jobs": self.jobs, "per_seconds": self.per_seconds}


@dataclass(frozen=True)
class Settings:
    """A type's flow control as stored (a type without a row has the defaults: nothing limited)."""

    paused: bool = False
    concurrency_limit: int | None = None
    rate_limit: RateLimit | None = None
    key_concurrency_limit: int | None = None
    unique_scope: str = UNIQUE_SCOPES[0]

    @classmethod
    def of_row(cls, row) -> Settings:
        if row is None:
            return cls()
        rate = None if row.rate_limit_jobs is None else RateLimit(row.rate_limit_jobs, row.rate_limit_seconds)
        return cls(bool(row.paused), row.concurrency_limit, rate, row.key_concurrency_limit, row.unique_scope)

    def value(self, field: str) -> Any:
        """A field as the API shows it (the rate limit as its object)."""
        value = getattr(self, field)
        return value.as_json() if isinstance(value, RateLimit) else value

    def columns(self) -> dict:
        """The type_settings columns that hold these settings."""
        rate = self.rate_limit
        return {
            "paused": self.paused,
            "concurrency_limit": self.concurrency_limit,
            "rate_limit_jobs": rate.jobs if rate else None,
            "rate_limit_seconds": rate.per_seconds if rate else None,
            "key_concurrency_limit": self.key_concurrency_limit,
            "unique_scope": self.unique_scope,
        }

    @property
    def limited(self) -> bool:
        """Does a claim of this type have to count (running jobs, recent claims)?"""
        return (
            self.concurrency_limit is not None or self.rate_limit is not None or self.key_concurrency_limit is not None
        )


@dataclass(frozen=True)
class TypeState:
    """A type as ``GET /types`` shows it: its settings, and how many of its jobs wait and run now."""

    type: str
    settings: Settings
    pending: int
    running: int


@dataclass(frozen=True)
class Change:
    """One entry of a type's history: who changed which fields, when, from what to what."""

    at: datetime
    actor: str
    changes: dict  # {field: {"old": …, "new": …}}


# --- reading ---------------------------------------------------------------------------------------


def list_types() -> list[TypeState]:
    """Every type of QUEUELOG_JOB_TYPES, in the allowlist's order, with its settings and figures."""
    return _states(list(current_app.config["JOB_TYPES"]))


def get_type(job_type: str) -> TypeState:
    """One type, or TypeNotFound when it is not on the allowlist."""
    _check_known(job_type)
    return _states([job_type])[0]


def history(job_type: str) -> list[Change]:
    """Every change of the type's settings, newest first."""
    _check_known(job_type)
    with read_connection() as conn:
        rows = conn.execute(
            select(changes_table).where(changes_table.c.type == job_type).order_by(changes_table.c.id.desc())
        ).all()
    return [Change(row.at, row.actor, json.loads(row.changes)) for row in rows]


def _check_known(job_type: str) -> None:
    if job_type not in current_app.config["JOB_TYPES"]:
        raise TypeNotFound(f"job type {job_type!r} is not on this server's QUEUELOG_JOB_TYPES")


def _states(job_types: list[str]) -> list[TypeState]:
    flowing = (JobStatus.PENDING.value, JobStatus.RUNNING.value)
    with read_connection() as conn:
        stored = {
            row.type: Settings.of_row(row)
            for row in conn.execute(select(settings_table).where(settings_table.c.type.in_(job_types)))
        }
        # Served by ix_jobs_type_status_priority, from the index alone.
        counts = {
            (row.type, row.status): row.count
            for row in conn.execute(
                select(jobs.c.type, jobs.c.status, func.count().label("count"))
                .where(jobs.c.type.in_(job_types), jobs.c.status.in_(flowing))
                .group_by(jobs.c.type, jobs.c.status)
            )
        }
    return [
        TypeState(
            name,
            stored.get(name, Settings()),
            counts.get((name, JobStatus.PENDING.value), 0),
            counts.get((name, JobStatus.RUNNING.value), 0),
        )
        for name in job_types
    ]


# --- changing ----------------------------------------------------------------------------------------


def update_type(job_type: str, wanted: dict[str, Any], actor: str) -> TypeState:
    """Change the fields in ``wanted`` (validated values: bool, int or None, RateLimit or None, one of
    UNIQUE_SCOPES) of a type.

    The change and its history entry (each changed field, old → new) are one transaction; a field given
    its current value is no change and is not written. Lifting a pause or a limit wakes the claims waiting
    for this process's database at once.
    """
    _check_known(job_type)
    unknown = set(wanted) - set(FIELDS)
    if unknown:
        raise ValueError(f"not a type setting: {sorted(unknown)}")
    if wanted.get("unique_scope", UNIQUE_SCOPES[0]) not in UNIQUE_SCOPES:
        raise ValueError(f"unique_scope must be one of {UNIQUE_SCOPES}")
    for attempt in range(3):
        try:
            _write_change(job_type, wanted, actor)
            break
        except IntegrityError:
            # Two first changes of one type at once: the other inserted its row first; this pass updates it.
            if attempt == 2:
                raise
    forget_cached()
    return get_type(job_type)


def _write_change(job_type: str, wanted: dict[str, Any], actor: str) -> None:
    now = utcnow()
    with write_transaction() as conn:
        row = conn.execute(select(settings_table).where(settings_table.c.type == job_type).with_for_update()).first()
        old = Settings.of_row(row)
        new = Settings(**{field: wanted.get(field, getattr(old, field)) for field in FIELDS})
        changes = {
            field: {"old": old.value(field), "new": new.value(field)}
            for field in FIELDS
            if old.value(field) != new.value(field)
        }
        if not changes:
            return
        if row is None:
            conn.execute(insert(settings_table).values(type=job_type, updated_at=now, **new.columns()))
        else:
            conn.execute(
                update(settings_table).where(settings_table.c.type == job_type).values(updated_at=now, **new.columns())
            )
        conn.execute(
            insert(changes_table).values(
                type=job_type, actor=actor, at=now, changes=json.dumps(changes, separators=(",", ":"))
            )
        )
        if _frees_room(old, new):
            wakeup.jobs_ready(conn)


def _frees_room(old: Settings, new: Settings) -> bool:
    """Could jobs held back under ``old`` be claimable under ``new``? (Then waiting claims should look.)"""
    if old.paused and not new.paused:
        return True
    for field in ("concurrency_limit", "key_concurrency_limit"):
        before, after = getattr(old, field), getattr(new, field)
        if before is not None and (after is None or after > before):
            return True
    before_rate, after_rate = old.rate_limit, new.rate_limit
    return before_rate is not None and (
        after_rate is None or after_rate.jobs > before_rate.jobs or after_rate.per_seconds < before_rate.per_seconds
    )


def change_json(change: Change) -> dict:
    """A history entry as the API shows it."""
    return {"at": rfc3339(change.at), "actor": change.actor, "changes": change.changes}


# --- what the claim and the finishing moves need to know ------------------------------------------------


@dataclass(frozen=True)
class Controlled:
    """This process's copy of the types under flow control: paused ones, and limited ones; read when
    type_settings_version was ``version`` (0: no row)."""

    paused: frozenset[str]
    limited: frozenset[str]
    version: int = 0

    def limited_among(self, types) -> list[str]:
        """The limited types a claim of ``types`` (None: any type) may take, in lock order."""
        return sorted(self.limited if types is None else self.limited.intersection(types))

    def any_among(self, types) -> bool:
        """Is any type a claim of ``types`` (None: any type) may take paused or limited?"""
        every = self.paused | self.limited
        return bool(every if types is None else every.intersection(types))


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
SELECT v.version, s.type, s.paused, {limited("s")} AS limited
  FROM (SELECT coalesce((SELECT version FROM type_settings_version WHERE id = 1), 0) AS version) v
  LEFT JOIN type_settings s ON s.paused OR {limited("s")}""")


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
    return Controlled(paused, limited_types, rows[0].version)


def slots_freed(conn: Connection, rows, from_status: str | None) -> None:
    """After ``rows`` moved: if running jobs of a limited type stopped running, wake the waiting claims.

    A claim held back by a concurrency limit has nothing else to wake it; for other types this costs
    nothing (no NOTIFY on PostgreSQL for every completed job).
    """
    if from_status is None or JobStatus(from_status) not in HELD:
        return
    limited = controlled(conn).limited
    if limited and any(row.type in limited and row.status not in HELD for row in rows):
        wakeup.jobs_ready(conn)
