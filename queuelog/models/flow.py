"""Flow control per job type: its settings, their version and history, and the claims a rate limit counts."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, Index, Integer, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from ..extensions import db
from .columns import BigId, UTCDateTime


class TypeSettings(db.Model):
    """Flow control of one job type (one queue): paused, and its limits. No row: no limits, not paused.

    Read by every claim of a type that has one (queuelog/sql, CLAIM); written only by
    ``queue.flow.update_type``, which also writes the change to ``type_changes``. Every write gives
    ``type_settings_version`` a new version (a trigger).
    """

    __tablename__ = "type_settings"

    type: Mapped[str] = mapped_column(String(100), primary_key=True)
    paused: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    concurrency_limit: Mapped[int | None] = mapped_column(Integer)  # running jobs of the type, at most
    rate_limit_jobs: Mapped[int | None] = mapped_column(Integer)  # claims in any window of ...
    rate_limit_seconds: Mapped[int | None] = mapped_column(Integer)  # ... this many seconds, at most
    key_concurrency_limit: Mapped[int | None] = mapped_column(Integer)  # running jobs per concurrency key
    # Whose dedupe windows (unique_for): "producer" (each key its own) or "type" (one for every producer).
    unique_scope: Mapped[str] = mapped_column(String(16), default="producer", server_default=text("'producer'"))
    # The type's push target (queue/push_targets.py): jobs the server claims and POSTs there. No url: pulled.
    push_url: Mapped[str | None] = mapped_column(String(2048))
    push_mode: Mapped[str | None] = mapped_column(String(8))  # "sync" or "async"
    push_timeout_seconds: Mapped[int | None] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class TypeSettingsVersion(db.Model):
    """Which version of type_settings is current: one row, given a new random number by every change.

    A trigger on type_settings writes it, in the changing transaction (migration f3a1c7e9b2d5), whoever writes:
    the claim checks that the version its process's copy of the settings was read at is still this one
    (queue/flow.py). Random, not counted: emptied and refilled (tests), a counter would bring back a number
    that a copy read before still holds. No row reads as version 0.
    """

    __tablename__ = "type_settings_version"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)  # always 1
    version: Mapped[int] = mapped_column(BigInteger)


class TypeChange(db.Model):
    """One admin change of a type's settings: who, when, and each field's old and new value (JSON)."""

    __tablename__ = "type_changes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    type: Mapped[str] = mapped_column(String(100))
    actor: Mapped[str] = mapped_column(String(120))
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    changes: Mapped[str] = mapped_column(Text)  # {"field": {"old": …, "new": …}, …}

    __table_args__ = (Index("ix_type_changes_type_id", "type", "id"),)


class TypeClaim(db.Model):
    """A claim of a rate-limited type, counted against its limit until ``expires_at`` (claim time + window).

    Written by the claim that took the jobs, in its transaction; rows past their window are deleted by
    the next claim of the type. Only rate-limited types have rows.
    """

    __tablename__ = "type_claims"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    type: Mapped[str] = mapped_column(String(100))
    jobs: Mapped[int] = mapped_column(Integer)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (Index("ix_type_claims_type_expires", "type", "expires_at"),)


class PushSecret(db.Model):
    """A Standard Webhooks secret a type's push deliveries are signed with (``whsec_`` + base64 key).

    Written only by ``queue.push_targets``: one when a type's target is first set, one more per rotation. A
    rotated secret keeps signing beside the new one until ``retires_at``; the current one has none. Clearing
    the target deletes them all. The server must sign with the key itself, so it is kept as it was given.
    """

    __tablename__ = "push_secrets"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    type: Mapped[str] = mapped_column(String(100))
    secret: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    retires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (Index("ix_push_secrets_type", "type"),)


class PushStatus(db.Model):
    """The last push delivery of a type, as the Types page shows it (each delivery is in its job's events)."""

    __tablename__ = "push_status"

    type: Mapped[str] = mapped_column(String(100), primary_key=True)
    job_id: Mapped[int | None] = mapped_column(BigId)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    http_status: Mapped[int | None] = mapped_column(Integer)  # None: no answer (timeout, connection refused)
    error: Mapped[str | None] = mapped_column(Text)
