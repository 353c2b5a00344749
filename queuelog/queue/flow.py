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
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from flask import current_app
from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import IntegrityError

from ..core.clock import rfc3339, utcnow
from ..core.errors import QueueError
from ..database.transactions import read_connection, write_transaction
from ..models import Job, TypeChange, TypeSettings
from ..states import JobStatus
from ..waiting import wakeup
from . import push_targets

# This process's copy of the settings, which the claim and the moves out of running read through this module.
from .flow_copy import (  # noqa: F401
    CACHE_SECONDS,
    Controlled,
    controlled,
    controlled_for_claim,
    forget_cached,
    read_afresh,
    slots_freed,
)
from .push_targets import LastDelivery, PushTarget

settings_table = TypeSettings.__table__
changes_table = TypeChange.__table__
jobs = Job.__table__

#: The fields an admin may change, in the order answers show them.
FIELDS = ("paused", "concurrency_limit", "rate_limit", "key_concurrency_limit", "unique_scope", "push")
#: Whose dedupe windows (unique_for) a type keeps: each producer key its own (the default), or one for all.
UNIQUE_SCOPES = ("producer", "type")


class TypeNotFound(QueueError):
    """A type that is not on this server's QUEUELOG_JOB_TYPES."""

    status = 404
    title = "Not found"


class NoPushTarget(QueueError):
    """A push secret rotation asked of a type that has no push target."""

    status = 409
    title = "Conflict"


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
    push: PushTarget | None = None  # None: the type's jobs are pulled by workers

    @classmethod
    def of_row(cls, row) -> Settings:
        if row is None:
            return cls()
        rate = None if row.rate_limit_jobs is None else RateLimit(row.rate_limit_jobs, row.rate_limit_seconds)
        return cls(
            bool(row.paused),
            row.concurrency_limit,
            rate,
            row.key_concurrency_limit,
            row.unique_scope,
            PushTarget.of_row(row),
        )

    def value(self, field: str) -> Any:
        """A field as the API shows it (the rate limit and the push target as their objects)."""
        value = getattr(self, field)
        return value.as_json() if isinstance(value, RateLimit | PushTarget) else value

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
            "push_url": self.push.url if self.push else None,
            "push_mode": self.push.mode if self.push else None,
            "push_timeout_seconds": self.push.timeout_seconds if self.push else None,
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
    last_delivery: LastDelivery | None = None  # a push target's latest delivery
    new_secret: str | None = None  # the push secret just issued: shown in this one answer, never again


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
        pushed = [name for name, settings in stored.items() if settings.push is not None]
        deliveries = push_targets.last_deliveries(conn, pushed) if pushed else {}
    return [
        TypeState(
            name,
            stored.get(name, Settings()),
            counts.get((name, JobStatus.PENDING.value), 0),
            counts.get((name, JobStatus.RUNNING.value), 0),
            deliveries.get(name),
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
            secret = _write_change(job_type, wanted, actor)
            break
        except IntegrityError:
            # Two first changes of one type at once: the other inserted its row first; this pass updates it.
            if attempt == 2:
                raise
    forget_cached()
    return replace(get_type(job_type), new_secret=secret)


def rotate_push_secret(job_type: str, actor: str) -> TypeState:
    """A new signing secret for the type's push target, answered once; the old ones sign beside it for
    ROTATION_OVERLAP. NoPushTarget (409) when the type has none."""
    _check_known(job_type)
    now = utcnow()
    with write_transaction() as conn:
        row = conn.execute(select(settings_table).where(settings_table.c.type == job_type).with_for_update()).first()
        if Settings.of_row(row).push is None:
            raise NoPushTarget(f"job type {job_type!r} has no push target to rotate the secret of")
        secret = push_targets.rotate_secret(conn, job_type, now)
        rotated = {"push_secret": {"old": "retires " + rfc3339(now + push_targets.ROTATION_OVERLAP), "new": "issued"}}
        conn.execute(insert(changes_table).values(type=job_type, actor=actor, at=now, changes=json.dumps(rotated)))
    return replace(get_type(job_type), new_secret=secret)


def _write_change(job_type: str, wanted: dict[str, Any], actor: str) -> str | None:
    """Write the change and its history; the push secret issued when the change sets a first target."""
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
            return None
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
        if _frees_room(old, new) or old.push != new.push:  # the push dispatchers look again too
            wakeup.room_freed(conn)
        if old.push is not None and new.push is None:
            push_targets.forget_secrets(conn, job_type)
        if old.push is None and new.push is not None:
            return push_targets.issue_secret(conn, job_type, now)
        return None


def _frees_room(old: Settings, new: Settings) -> bool:
    """Could jobs held back under ``old`` be claimable under ``new``? (Then waiting claims should look.)"""
    if (old.paused and not new.paused) or (old.push is not None and new.push is None):
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
