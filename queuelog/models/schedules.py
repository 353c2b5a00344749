"""Schedules: jobs enqueued again and again, on a cron expression or every N seconds."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, Index, Integer, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from ..extensions import db
from .columns import BigId, UTCDateTime


class Schedule(db.Model):
    """A job enqueued again and again: on a cron expression in a timezone, or every N seconds.

    ``next_run_at`` is the next tick; each server process's ticker (``queuelog.schedules.ticker``) fires
    due schedules, and only the one whose compare-and-set on ``next_run_at`` matches enqueues the job.
    """

    __tablename__ = "schedules"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    cron: Mapped[str | None] = mapped_column(String(200))  # exactly one of cron and every_seconds
    every_seconds: Mapped[int | None] = mapped_column(Integer)
    timezone: Mapped[str] = mapped_column(String(64))
    job_type: Mapped[str] = mapped_column(String(100))
    payload: Mapped[str] = mapped_column(Text)  # JSON text
    priority: Mapped[int] = mapped_column(Integer)
    max_retries: Mapped[int] = mapped_column(Integer)
    paused: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    catch_up: Mapped[str] = mapped_column(String(8))  # 'one' or 'none'
    next_run_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_run_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # the tick of the last job enqueued
    last_job_id: Mapped[int | None] = mapped_column(BigId)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        # Each ticker asks "which active schedules are due?" a few times a second.
        Index("ix_schedules_due", "paused", "next_run_at"),
    )
