"""API keys (the producers', workers' and admins' credentials) and the enqueue ledger their rate quotas count."""

from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from ..core.patterns import Priority
from ..extensions import db
from .columns import BigId, UTCDateTime


class Role(enum.StrEnum):
    PRODUCER = "producer"
    WORKER = "worker"
    ADMIN = "admin"


class ApiKey(db.Model):
    """An API key. Only a SHA-256 digest of the secret is stored; the secret is shown once."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    max_priority: Mapped[int] = mapped_column(Integer, default=Priority.MEDIUM.value)
    allowed_types: Mapped[str | None] = mapped_column(Text)  # JSON list; NULL = any allowed type
    prefix: Mapped[str] = mapped_column(String(16))
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Producer quotas (queuelog/auth/quotas.py); NULL = no such limit. The rate is "at most
    # enqueue_rate_limit jobs in any enqueue_rate_seconds seconds": both set, or neither.
    enqueue_rate_limit: Mapped[int | None] = mapped_column(Integer)
    enqueue_rate_seconds: Mapped[int | None] = mapped_column(Integer)
    max_pending: Mapped[int | None] = mapped_column(Integer)


class EnqueueLedger(db.Model):
    """One enqueue of a key with a rate quota: when, how many jobs, and the key's running total.

    ``running_total`` counts the key's jobs up to and including this row, so the jobs in a window are
    the newest row's total minus the total before the window's oldest row: two index seeks, however
    many enqueues the window holds. Rows that left the window are deleted by the next enqueue.
    """

    __tablename__ = "enqueue_ledger"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    jobs: Mapped[int] = mapped_column(Integer)
    running_total: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (Index("ix_enqueue_ledger_key_at", "key_id", "at", "running_total"),)
