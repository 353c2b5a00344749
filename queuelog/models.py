"""The tables: jobs, their event log, API keys and their enqueue ledger, admin users, their sessions and
failed sign-ins; and flow control per job type (its settings, their history, and the claims a rate limit
counts).

Models hold data only. Every change of a job's state goes through ``queuelog.queue``.
"""
from __future__ import annotations

import enum
from datetime import UTC, datetime

from sqlalchemy import BigInteger, Boolean, ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column
from sqlalchemy.types import DateTime, TypeDecorator

from .extensions import db
from .patterns import Priority  # noqa: F401 - priority labels live with the other shared names
from .states import JobStatus  # noqa: F401 - the status enum lives with the state machine


class UTCDateTime(TypeDecorator):
    """Stores naive UTC, hands back aware UTC, so SQLite and PostgreSQL compare times alike."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value

    def process_result_value(self, value, dialect):
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value


# Job and event ids: 64-bit on PostgreSQL so a busy queue never runs out; on SQLite every integer
# primary key is already 64-bit, and it must be spelled INTEGER to be the rowid.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class Role(enum.StrEnum):
    PRODUCER = "producer"
    WORKER = "worker"
    ADMIN = "admin"


class UserRole(enum.StrEnum):
    """What a person signed in to the pages may do: an admin looks and acts, a viewer only looks."""

    ADMIN = "admin"
    VIEWER = "viewer"


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
    # The error's cause with what changes from job to job masked (queuelog/error_groups.py), written with
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
        # The reaper looks only at running jobs, by lease end.
        Index(
            "ix_jobs_running_lease",
            "lease_expires_at",
            sqlite_where=text("status = 'running'"),
            postgresql_where=text("status = 'running'"),
        ),
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

    __table_args__ = (
        Index("ix_job_dependencies_parent_child", "parent_id", "child_id"),
    )


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
    # Producer quotas (queuelog/quotas.py); NULL = no such limit. The rate is "at most
    # enqueue_rate_limit jobs in any enqueue_rate_seconds seconds": both set, or neither.
    enqueue_rate_limit: Mapped[int | None] = mapped_column(Integer)
    enqueue_rate_seconds: Mapped[int | None] = mapped_column(Integer)
    max_pending: Mapped[int | None] = mapped_column(Integer)


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

    __table_args__ = (
        Index("ix_unique_slots_job_id", "job_id"),
    )


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

    __table_args__ = (
        Index("ix_enqueue_ledger_key_at", "key_id", "at", "running_total"),
    )


class User(db.Model):
    """A person who signs in to the web pages: an admin, or a viewer who may look but not act."""

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    username: Mapped[str] = mapped_column(String(100), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # Users made before roles existed were all admins, so the column's default keeps them admins.
    role: Mapped[str] = mapped_column(String(16), default=UserRole.ADMIN.value,
                                      server_default=text(f"'{UserRole.ADMIN.value}'"))

    # Flask-Login's protocol, kept here rather than inheriting UserMixin's extras.
    is_active = True
    is_authenticated = True
    is_anonymous = False

    def get_id(self) -> str:
        return str(self.id)


class AdminSession(db.Model):
    """A signed-in admin's session, kept on the server so that it can be ended.

    The signed cookie carries a random token; only its SHA-256 digest is stored. Deleting the row ends
    the session in every browser that holds a copy of the cookie.
    """

    __tablename__ = "admin_sessions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)  # the absolute lifetime counts from here
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime)  # the idle time counts from here

    __table_args__ = (
        Index("ix_admin_sessions_user_id", "user_id"),
    )


class LoginAttempt(db.Model):
    """A failed sign-in, kept briefly to throttle guessing per address and per (username, address)."""

    __tablename__ = "login_attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    username: Mapped[str] = mapped_column(String(100))
    remote_addr: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        Index("ix_login_attempts_username_at", "username", "at"),
        Index("ix_login_attempts_addr_at", "remote_addr", "at"),
        # One guessing address's failures for one account, however many addresses share the account's.
        Index("ix_login_attempts_username_addr_at", "username", "remote_addr", "at"),
    )


class TypeSettings(db.Model):
    """Flow control of one job type (one queue): paused, and its limits. No row: no limits, not paused.

    Read by every claim of a type that has one (queuelog/sql, CLAIM); written only by
    ``queue.flow.update_type``, which also writes the change to ``type_changes``. Every write gives
    ``type_settings_version`` a new version (a trigger).
    """

    __tablename__ = "type_settings"

    type: Mapped[str] = mapped_column(String(100), primary_key=True)
    paused: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    concurrency_limit: Mapped[int | None] = mapped_column(Integer)       # running jobs of the type, at most
    rate_limit_jobs: Mapped[int | None] = mapped_column(Integer)         # claims in any window of ...
    rate_limit_seconds: Mapped[int | None] = mapped_column(Integer)      # ... this many seconds, at most
    key_concurrency_limit: Mapped[int | None] = mapped_column(Integer)   # running jobs per concurrency key
    # Whose dedupe windows (unique_for): "producer" (each key its own) or "type" (one for every producer).
    unique_scope: Mapped[str] = mapped_column(String(16), default="producer", server_default=text("'producer'"))
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class TypeSettingsVersion(db.Model):
    """Which version of type_settings is current: one row, given a new random number by every change.

    A trigger on type_settings writes it, in the changing transaction (migration f3a1c7e9b2d5), whoever writes:
    the claim checks that the version its process's copy of the settings was read at is still this one
    (queue/flow.py). Random, not counted: emptied and refilled (tests), a counter would bring back a number
    that a copy read before still holds. No row reads as version 0.
    """

    __tablename__ = "type_settings_version"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)   # always 1
    version: Mapped[int] = mapped_column(BigInteger)


class TypeChange(db.Model):
    """One admin change of a type's settings: who, when, and each field's old and new value (JSON)."""

    __tablename__ = "type_changes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    type: Mapped[str] = mapped_column(String(100))
    actor: Mapped[str] = mapped_column(String(120))
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    changes: Mapped[str] = mapped_column(Text)   # {"field": {"old": …, "new": …}, …}

    __table_args__ = (
        Index("ix_type_changes_type_id", "type", "id"),
    )


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

    __table_args__ = (
        Index("ix_type_claims_type_expires", "type", "expires_at"),
    )


class Schedule(db.Model):
    """A job enqueued again and again: on a cron expression in a timezone, or every N seconds.

    ``next_run_at`` is the next tick; each server process's ticker (``queuelog.schedules.ticker``) fires
    due schedules, and only the one whose compare-and-set on ``next_run_at`` matches enqueues the job.
    """

    __tablename__ = "schedules"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    cron: Mapped[str | None] = mapped_column(String(200))          # exactly one of cron and every_seconds
    every_seconds: Mapped[int | None] = mapped_column(Integer)
    timezone: Mapped[str] = mapped_column(String(64))
    job_type: Mapped[str] = mapped_column(String(100))
    payload: Mapped[str] = mapped_column(Text)                     # JSON text
    priority: Mapped[int] = mapped_column(Integer)
    max_retries: Mapped[int] = mapped_column(Integer)
    paused: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    catch_up: Mapped[str] = mapped_column(String(8))                # 'one' or 'none'
    next_run_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_run_at: Mapped[datetime | None] = mapped_column(UTCDateTime)   # the tick of the last job enqueued
    last_job_id: Mapped[int | None] = mapped_column(BigId)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        # Each ticker asks "which active schedules are due?" a few times a second.
        Index("ix_schedules_due", "paused", "next_run_at"),
    )


class WorkerProcess(db.Model):
    """A running worker process, registered by its worker key: where it runs, what it takes, when it last beat.

    Written only by ``queuelog.worker_processes``: the process registers, beats and deregisters; an admin
    sets ``command`` to quiet (claim nothing more) or stop (finish and exit), which the next beat answers.
    """

    __tablename__ = "worker_processes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"))
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    version: Mapped[str] = mapped_column(String(100))
    concurrency: Mapped[int] = mapped_column(Integer)
    types: Mapped[str] = mapped_column(Text)   # JSON list of job types; [] = any the key may claim
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


class TypeRollup(db.Model):
    """Stored counts per job type and period: jobs enqueued, completed and failed for good, and histograms of
    their wait and run times, so the dashboard's chart and the type pages never scan jobs.

    One row per (span, metric, period, type, bucket, shard), written only by the rollup step
    (``queuelog.queue.rollups.roll_up``), which folds closed minutes of ``job_events`` into it off the hot
    path. ``span`` is 60 (a minute; wait and run histograms too) or 3600 (an hour, summed from its minutes;
    counts only). ``period`` is the period's start in Unix seconds. ``bucket`` is 0 for a count, else a
    histogram bucket (``queuelog.timing_buckets``). ``shard`` is always 0 (the step is the only writer; the
    column stays from when each state change added to a row of its own). Old periods go with ``flask purge``.
    """

    __tablename__ = "type_rollups"

    span: Mapped[int] = mapped_column(Integer, primary_key=True)
    metric: Mapped[str] = mapped_column(String(16), primary_key=True)
    period: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    type: Mapped[str] = mapped_column(String(100), primary_key=True)
    bucket: Mapped[int] = mapped_column(Integer, primary_key=True)
    shard: Mapped[int] = mapped_column(Integer, primary_key=True)
    n: Mapped[int] = mapped_column(BigInteger)


class RollupMark(db.Model):
    """How far a rollup has got: ``through`` is the start (Unix seconds) of the first minute not rolled up yet.

    Its row is also the rollup step's lock on PostgreSQL (SELECT … FOR UPDATE), so one step runs at a time.
    """

    __tablename__ = "rollup_marks"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    through: Mapped[int] = mapped_column(BigInteger)
