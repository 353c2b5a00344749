"""The jobs, their event log, the edges of workflows and the dedupe windows of unique jobs."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from ..extensions import db
from ..states import JobStatus
from .columns import BigId, UTCDateTime


class Job(db.Model):
    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    type: Mapped[str] = mapped_column(String(100))
    payload: Mapped[str] = mapped_column(Text, default="{}")
    priority: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[str] = mapped_column(String(16), default=JobStatus.PENDING.value)
    retry_count: Mapped[int] = mapped_column(Integer, default=0)
    max_retries: Mapped[int] = mapped_column(Integer, default=3)
    stall_count: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    request_digest: Mapped[str | None] = mapped_column(String(64))
    producer_key_id: Mapped[int | None] = mapped_column(ForeignKey("api_keys.id"))
    producer: Mapped[str | None] = mapped_column(String(100))
    run_at: Mapped[datetime] = mapped_column(UTCDateTime)
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    worker_id: Mapped[str | None] = mapped_column(String(100))
    claim_token: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    error: Mapped[str | None] = mapped_column(Text)
    # The error's cause with what changes from job to job masked (queuelog/core/error_groups.py), written with
    # ``error``; the Top errors page groups failed jobs by it.
    error_group: Mapped[str | None] = mapped_column(String(200))
    result: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # The tenant (or any group) the job belongs to, for fairness and per-key limits; '' is "no key" (the API
    # shows null). Stored as '' rather than NULL so that one equality finds a group in the indexes below.
    concurrency_key: Mapped[str] = mapped_column(String(200), default="", server_default=text("''"))
    # The job's turn among the jobs of its priority: claims go by priority, then fair_tag, then id. Set at
    # enqueue so that concurrency keys take turns (queue/enqueueing.py says how); never changed afterwards.
    fair_tag: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    # Job-level time limits (queue/enqueueing.py, queue/operations.py). unique_key: the (type, key) this job
    # holds a dedupe window for (unique_slots), NULL when enqueued without unique_for. expires_at: not claimed
    # by then, it is never run (the claim passes it over, the reaper cancels it). timeout_seconds: how long a
    # run may take; the claim sets timeout_at (claimed_at + timeout_seconds), which caps the lease.
    unique_key: Mapped[str | None] = mapped_column(String(200))
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    timeout_seconds: Mapped[int | None] = mapped_column(Integer)
    timeout_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The schedule that enqueued the job (its name, kept even after the schedule is deleted) and the tick it
    # was enqueued for; NULL for jobs enqueued by a producer.
    schedule: Mapped[str | None] = mapped_column(String(100))
    scheduled_for: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Workflows (queue/dependencies.py). run_when is NULL for a job without parents, else "completed" or
    # "finished" (states.RunWhen). has_dependents: some job depends on this one, so its finishing must look at
    # its children; without it a completion costs no extra read. watched: a producer waits for its end
    # (GET /jobs/{id}?wait=S), so its finishing wakes waiters in every server process.
    run_when: Mapped[str | None] = mapped_column(String(16))
    has_dependents: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    watched: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    # What the holding worker last reported with a heartbeat: a JSON object (≤ 4 KiB), shown as it is.
    progress: Mapped[str | None] = mapped_column(Text)
    # The registered worker process (worker_processes.id) that made the last claim, when the claim named one;
    # not cleared when the job moves on, so read it with the status (ix_jobs_process_status).
    process_id: Mapped[int | None] = mapped_column(Integer)
    # W3C trace context the producer enqueued the job in (core/trace_context.py), handed to its workers as sent.
    traceparent: Mapped[str | None] = mapped_column(String(256))
    tracestate: Mapped[str | None] = mapped_column(String(512))

    __table_args__ = (
        # Idempotency keys belong to the producing key: producers can neither collide nor probe.
        UniqueConstraint("producer_key_id", "idempotency_key", name="uq_jobs_producer_idempotency"),
        # The claim walks this index in claim order and stops at the first due job: O(log n).
        Index(
            "ix_jobs_claim_order",
            text("priority DESC"),
            "fair_tag",
            "id",
            sqlite_where=text("status = 'pending'"),
            postgresql_where=text("status = 'pending'"),
        ),
        # The same order within one type: a claim under flow control takes each type's next jobs with
        # one seek per type, never walking past the jobs of a paused or full type. Its first entry for a
        # (type, priority) is that queue's head, where a new concurrency key's first job is placed.
        Index(
            "ix_jobs_type_claim_order",
            "type",
            text("priority DESC"),
            "fair_tag",
            "id",
            sqlite_where=text("status = 'pending'"),
            postgresql_where=text("status = 'pending'"),
        ),
        # Every job of one concurrency key and priority, by turn: enqueue reads the key's last turn. Not
        # partial: a key's turns only ever grow, so jobs without a key (one group) keep the order they were
        # enqueued in even when a finished one comes back (retry). None of its columns ever changes, so
        # SQLite leaves it alone when a job moves.
        Index("ix_jobs_key_turns", "concurrency_key", "priority", "fair_tag"),
        # The reaper and the stalled-job figures read the running jobs through this one (status = 'running'),
        # and check each lease. No index holds lease_expires_at, heartbeat_at or progress: a heartbeat writes
        # only those, so on PostgreSQL it can be a HOT update (no index entry written). Running jobs are as
        # many as the workers' slots, so reading them all costs little.
        Index("ix_jobs_status_id", "status", "id"),
        # Grouped counts by type, status and priority read this index only; with run_at last, the oldest
        # pending job of one type and priority is a single seek (the /metrics gauges, the dashboard).
        Index("ix_jobs_type_status_priority", "type", "status", "priority", "run_at"),
        Index("ix_jobs_producer_id", "producer_key_id", "id"),
        # A producer key's max-pending quota counts its waiting and pending jobs; without this index that
        # count would walk every job the key ever enqueued (ix_jobs_producer_id) or every such job of every key.
        Index(
            "ix_jobs_backlog_producer",
            "producer_key_id",
            sqlite_where=text("status IN ('waiting', 'pending')"),
            postgresql_where=text("status IN ('waiting', 'pending')"),
        ),
        # The reaper's expiry: pending jobs with an expires_at, by it (jobs without one are not in it).
        Index(
            "ix_jobs_pending_expiry",
            "expires_at",
            sqlite_where=text("status = 'pending' AND expires_at IS NOT NULL"),
            postgresql_where=text("status = 'pending' AND expires_at IS NOT NULL"),
        ),
        Index("ix_jobs_worker_status", "worker_id", "status"),
        Index("ix_jobs_status_updated", "status", "updated_at"),
        # The Top errors page: failed jobs grouped by error_group, with the types and times of each group,
        # read from this index alone; a group's jobs (its link, retry all, cancel all) are one seek, and id
        # last lets PostgreSQL count and list them without the table. Partial: jobs that never failed (most
        # of them) are not in it.
        Index(
            "ix_jobs_error_groups",
            "status",
            "error_group",
            "type",
            "updated_at",
            "id",
            sqlite_where=text("error_group IS NOT NULL"),
            postgresql_where=text("error_group IS NOT NULL"),
        ),
        # The Workers page: each registered process's running jobs and its jobs finished in the last hour and day,
        # read from this index alone. Partial: jobs claimed without naming a process are not in it, so their
        # moves never touch it.
        Index(
            "ix_jobs_process_status",
            "process_id",
            "status",
            "updated_at",
            sqlite_where=text("process_id IS NOT NULL"),
            postgresql_where=text("process_id IS NOT NULL"),
        ),
        # One job per tick of a schedule, whichever server process fires it: the compare-and-set on
        # schedules.next_run_at already allows one, this makes a second insert fail should that ever slip.
        Index("uq_jobs_schedule_tick", "schedule", "scheduled_for", unique=True),
        # AUTOINCREMENT: SQLite must never hand a purged job's id to a new job (links, logs, alerts).
        {"sqlite_autoincrement": True},
    )


class JobEvent(db.Model):
    """One line of a job's history: every state change, who made it and why."""

    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(BigId, ForeignKey("jobs.id", ondelete="CASCADE"))
    event: Mapped[str] = mapped_column(String(20))
    from_status: Mapped[str | None] = mapped_column(String(16))
    to_status: Mapped[str] = mapped_column(String(16))
    actor: Mapped[str] = mapped_column(String(120))
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    # A push delivery's answer (event "delivered"): the HTTP status, None when none came (timeout, refused).
    http_status: Mapped[int | None] = mapped_column(Integer)

    __table_args__ = (
        Index("ix_job_events_job_id", "job_id", "id"),
        Index("ix_job_events_event_at", "event", "at"),
        {"sqlite_autoincrement": True},
    )


class JobDependency(db.Model):
    """An edge of a workflow: ``child_id`` runs after ``parent_id`` (as the child's run_when says).

    Read both ways by an index: a parent's children when it finishes (promotion), a child's parents when
    deciding it and when a worker claims it. Deleting either job (purge) deletes the edge.
    """

    __tablename__ = "job_dependencies"

    child_id: Mapped[int] = mapped_column(BigId, ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    parent_id: Mapped[int] = mapped_column(BigId, ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)

    __table_args__ = (Index("ix_job_dependencies_parent_child", "parent_id", "child_id"),)


class UniqueSlot(db.Model):
    """The dedupe window of one (type, scope, unique key): the job enqueued for it last, and when.

    The scope is the id of the key that enqueued it (a producer's windows are its own, as its idempotency keys
    are), or 0 for the one window every producer of a type shares (the type's unique_scope "type").

    An enqueue with ``unique_for`` takes the slot (INSERT … ON CONFLICT DO UPDATE, only where the slot is
    stale: its job finished, or enqueued ``unique_for`` seconds ago or more) or, finding it held, answers with
    its job. The primary key makes concurrent enqueues of one key take turns on the row, on any number of
    servers: exactly one of them creates a job. Deleted with its job (purge).
    """

    __tablename__ = "unique_slots"

    type: Mapped[str] = mapped_column(String(100), primary_key=True)
    scope: Mapped[int] = mapped_column(Integer, primary_key=True)
    unique_key: Mapped[str] = mapped_column(String(200), primary_key=True)
    # NULL only inside the enqueue that took the slot, between taking it and inserting its job.
    job_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("jobs.id", ondelete="CASCADE"))
    enqueued_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (Index("ix_unique_slots_job_id", "job_id"),)
