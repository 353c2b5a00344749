"""The running worker processes, each registered by its worker key."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Index, Integer, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from ..extensions import db
from .columns import UTCDateTime


class WorkerProcess(db.Model):
    """A running worker process, registered by its worker key: where it runs, what it takes, when it last beat.

    Written only by ``queuelog.queue.worker_processes``: the process registers, beats and deregisters; an admin
    sets ``command`` to quiet (claim nothing more) or stop (finish and exit), which the next beat answers.
    """

    __tablename__ = "worker_processes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"))
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    version: Mapped[str] = mapped_column(String(100))
    concurrency: Mapped[int] = mapped_column(Integer)
    types: Mapped[str] = mapped_column(Text)  # JSON list of job types; [] = any the key may claim
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime)
    command: Mapped[str] = mapped_column(String(8), default="run", server_default=text("'run'"))
    command_by: Mapped[str | None] = mapped_column(String(120))
    command_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (
        Index("ix_worker_processes_key_id", "key_id", "id"),
        # The page splits online from gone, and the prune finds long-gone processes, by the last beat.
        Index("ix_worker_processes_heartbeat_at", "heartbeat_at"),
        {"sqlite_autoincrement": True},
    )
