"""Flow control per job type (each type is a queue): paused, concurrency, rate and per-key limits.

An admin changes a type's settings here (``update_type``, written with its history in ``type_changes``);
the claim enforces them in its own statement (queuelog/sql, CLAIM). This module also keeps what the claim
needs to know before it starts: which types are under flow control, from a short-lived per-process copy of
the settings (``controlled``). The copy only decides whether a claim must first lock its limited types
(FLOW_LOCK) and whether finishing a job should wake waiting claims; the limits themselves are always read
by the claim from the database, in the claim's transaction, so a stale copy can delay a claim by at most
``CACHE_SECONDS`` but never let one past a limit.

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
from sqlalchemy import func, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from .. import wakeup
from ..clock import rfc3339, utcnow
from ..database.transactions import read_connection, single_statement_read, write_transaction
from ..errors import QueueError
from ..extensions import db
from ..models import Job, TypeChange, TypeSettings
from ..states import HELD, JobStatus

settings_table = TypeSettings.__table__
changes_table = TypeChange.__table__
jobs = Job.__table__

#: The fields an admin may change, in the order answers show them.
FIELDS = ("paused", "concurrency_limit", "rate_limit", "key_concurrency_limit", "unique_scope")
#: Whose dedupe windows (unique_for) a type keeps: each producer key its own (the default), or one for all.
UNIQUE_SCOPES = ("producer", "type")
#: How long a process trusts its copy of which types are under flow control.
CACHE_SECONDS = 1.0
#: A waiting claim renews the copy while this much of its life is left (``keep_fresh``).
RENEW_WITHIN_SECONDS = 0.25


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
        return {"paused": self.paused, "concurrency_limit": self.concurrency_limit,
                "rate_limit_jobs": rate.jobs if rate else None,
                "rate_limit_seconds": rate.per_seconds if rate else None,
                "key_concurrency_limit": self.key_concurrency_limit, "unique_scope": self.unique_scope}

    @property
    def limited(self) -> bool:
        """Does a claim of this type have to count (running jobs, recent claims)?"""
        return (self.concurrency_limit is not None or self.rate_limit is not None
                or self.key_concurrency_limit is not None)


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
    changes: dict   # {field: {"old": …, "new": …}}


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
        rows = conn.execute(select(changes_table).where(changes_table.c.type == job_type)
                            .order_by(changes_table.c.id.desc())).all()
    return [Change(row.at, row.actor, json.loads(row.changes)) for row in rows]


def _check_known(job_type: str) -> None:
    if job_type not in current_app.config["JOB_TYPES"]:
        raise TypeNotFound(f"job type {job_type!r} is not on this server's QUEUELOG_JOB_TYPES")


def _states(job_types: list[str]) -> list[TypeState]:
    flowing = (JobStatus.PENDING.value, JobStatus.RUNNING.value)
    with read_connection() as conn:
        stored = {row.type: Settings.of_row(row) for row in conn.execute(
            select(settings_table).where(settings_table.c.type.in_(job_types)))}
        # Served by ix_jobs_type_status_priority, from the index alone.
        counts = {(row.type, row.status): row.count for row in conn.execute(
            select(jobs.c.type, jobs.c.status, func.count().label("count"))
            .where(jobs.c.type.in_(job_types), jobs.c.status.in_(flowing))
            .group_by(jobs.c.type, jobs.c.status))}
    return [TypeState(name, stored.get(name, Settings()), counts.get((name, JobStatus.PENDING.value), 0),
                      counts.get((name, JobStatus.RUNNING.value), 0)) for name in job_types]


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
        changes = {field: {"old": old.value(field), "new": new.value(field)}
                   for field in FIELDS if old.value(field) != new.value(field)}
        if not changes:
            return
        if row is None:
            conn.execute(insert(settings_table).values(type=job_type, updated_at=now, **new.columns()))
        else:
            conn.execute(update(settings_table).where(settings_table.c.type == job_type)
                         .values(updated_at=now, **new.columns()))
        conn.execute(insert(changes_table).values(type=job_type, actor=actor, at=now,
                                                  changes=json.dumps(changes, separators=(",", ":"))))
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
        after_rate is None or after_rate.jobs > before_rate.jobs or after_rate.per_seconds < before_rate.per_seconds)


def change_json(change: Change) -> dict:
    """A history entry as the API shows it."""
    return {"at": rfc3339(change.at), "actor": change.actor, "changes": change.changes}


# --- what the claim and the finishing moves need to know ------------------------------------------------

@dataclass(frozen=True)
class Controlled:
    """This process's copy of the types under flow control: paused ones, and limited ones."""

    paused: frozenset[str]
    limited: frozenset[str]

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
        self._renewing = threading.Lock()
        self._copies: dict[str, tuple[float, Controlled]] = {}

    def get(self, conn: Connection | None = None) -> Controlled:
        key = str(db.engine.url)
        now = time.monotonic()
        copy = self._copies.get(key)
        if copy is not None and now - copy[0] < CACHE_SECONDS:
            return copy[1]
        return self._read(key, now, conn)

    def until_renewal(self, renew_within: float) -> float:
        """Seconds until the copy has only ``renew_within`` left to live; read afresh first if that is now."""
        key = str(db.engine.url)
        # One renewal at a time: the waiters of a process sleep until the same moment and wake together,
        # and the first to get here reads for all of them.
        with self._renewing:
            now = time.monotonic()
            copy = self._copies.get(key)
            read_at = copy[0] if copy is not None else -math.inf
            if CACHE_SECONDS - (now - read_at) <= renew_within:
                self._read(key, now, None)
                read_at = now
        return max(0.0, CACHE_SECONDS - renew_within - (time.monotonic() - read_at))

    def _read(self, key: str, now: float, conn: Connection | None) -> Controlled:
        controlled = _read_controlled(conn)
        with self._lock:
            self._copies[key] = (now, controlled)
        return controlled

    def clear(self) -> None:
        with self._lock:
            self._copies.clear()


_cache = _Cache()


def controlled(conn: Connection | None = None) -> Controlled:
    """Which types are under flow control, as this process saw it at most CACHE_SECONDS ago.

    ``conn``: read through this connection (a transaction in progress) when the copy is stale.
    """
    return _cache.get(conn)


def keep_fresh() -> float:
    """For a claim about to wait: renew the copy if it is near its end; returns the seconds until it will be.

    A claim woken by a new job should go straight to its statement. With a copy older than CACHE_SECONDS it
    would read the settings first, which after an idle spell cost ~1 ms of the job's pickup (a round trip to
    a PostgreSQL backend that had gone to sleep, or a SQLite read beside the enqueue's fsync; measured with
    scripts/measure_pickup_stages.py). The waiter sleeps no longer than that and renews the copy while it still
    has RENEW_WITHIN_SECONDS to live, so a claim made on waking finds it in date (unless the process stalled for
    longer than that), and the copy is as young as before: at most CACHE_SECONDS.
    """
    return _cache.until_renewal(RENEW_WITHIN_SECONDS)


def forget_cached() -> None:
    """Read the settings afresh on the next claim (this process just changed them)."""
    _cache.clear()


def _read_controlled(conn: Connection | None) -> Controlled:
    query = select(settings_table.c.type, settings_table.c.paused, settings_table.c.concurrency_limit,
                   settings_table.c.rate_limit_jobs, settings_table.c.key_concurrency_limit)
    if conn is None:
        # Outside a transaction: on PostgreSQL one round trip instead of three (BEGIN, SELECT, ROLLBACK). A claim
        # pays it on the first claim after CACHE_SECONDS, which is the first one after an idle spell.
        with single_statement_read() as own:
            rows = own.execute(query).all()
    else:
        rows = conn.execute(query).all()
    paused = frozenset(row.type for row in rows if row.paused)
    limited = frozenset(row.type for row in rows if row.concurrency_limit is not None
                        or row.rate_limit_jobs is not None or row.key_concurrency_limit is not None)
    return Controlled(paused, limited)


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
