"""The values the statements take and give back: small typed rows, with times converted one way.

A job comes back as a :class:`JobRow` whatever statement returned it, an API key as a :class:`KeyRow`
(attribute access, like SQLAlchemy's ``Row``). Times are converted by the ``UTCDateTime`` column type's
own processors, so a time written here is exactly the text SQLAlchemy writes (SQLite compares times as
text) and a time read here is exactly what SQLAlchemy hands back (an aware UTC datetime).
"""

from __future__ import annotations

import enum
import functools
from collections import namedtuple
from datetime import datetime
from typing import NamedTuple

from sqlalchemy.engine import Dialect

from ..core.error_groups import error_group
from ..models import ApiKey, Job, UTCDateTime
from ..states import JobStatus

JOB_COLUMNS = tuple(column.name for column in Job.__table__.c)
KEY_COLUMNS = tuple(column.name for column in ApiKey.__table__.c)
#: ``id, type, payload, …``: what every statement about jobs returns, in the order of JobRow.
JOB_LIST = ", ".join(JOB_COLUMNS)
KEY_LIST = ", ".join(KEY_COLUMNS)

JobRow = namedtuple("JobRow", JOB_COLUMNS)
KeyRow = namedtuple("KeyRow", KEY_COLUMNS)


def status_in(statuses) -> str:
    """``status = 'running'``, ``status IN ('failed', 'cancelled')``: a guard spelled from queuelog.states.

    One status is written with ``=``: SQLite uses a partial index (``WHERE status = 'pending'``) only
    for a query whose WHERE says the same.
    """
    names = _quoted(statuses)
    return f"status = {names[0]}" if len(names) == 1 else f"status IN ({', '.join(names)})"


def status_not_in(statuses) -> str:
    """``status NOT IN ('completed', 'failed', 'cancelled')``: a guard no index can serve (``<>`` is no operator
    of one), which PostgreSQL still prunes partitions by (sql/postgresql_turns.IN_FLIGHT)."""
    return f"status NOT IN ({', '.join(_quoted(statuses))})"


def _quoted(statuses) -> list[str]:
    """The statuses' names as SQL literals, in queuelog.states' order."""
    return [f"'{status.value}'" for status in JobStatus if status in statuses]


def only_status(status, *also: tuple[str, str], of: str = "") -> str:
    """``(status, worker_id) IS NOT DISTINCT FROM ('running', :worker)``: the job's status (and ``also``'s
    columns, each with its value) checked in a form no index can answer; ``of``: the table's name in a join.

    For statements that name their jobs by id and only re-check what else they must: the planner then finds
    each job with one seek of the primary key. Given ``status = 'running'`` it may read an index under that
    status instead, as it estimates few entries there; but while a long transaction holds vacuum back, those
    are every job that has had that status since the transaction began (docs/operations.md).
    """
    prefix = f"{of}." if of else ""
    columns = ", ".join(f"{prefix}{column}" for column in ["status", *(column for column, _ in also)])
    values = ", ".join([f"'{JobStatus(status).value}'", *(value for _, value in also)])
    return f"({columns}) IS NOT DISTINCT FROM ({values})"


def limited(table: str = "") -> str:
    """The condition "this type_settings row sets a limit" (a claim must then take turns), on ``table``'s columns."""
    column = f"{table}." if table else ""
    return (
        f"({column}concurrency_limit IS NOT NULL OR {column}rate_limit_jobs IS NOT NULL"
        f" OR {column}key_concurrency_limit IS NOT NULL)"
    )


# --- what a statement writes ----------------------------------------------------------------------


class NewJobRow(NamedTuple):
    """The columns of a job as enqueue inserts it; every other column starts empty."""

    type: str
    payload: str  # JSON text
    priority: int
    status: str
    retry_count: int
    max_retries: int
    stall_count: int
    idempotency_key: str | None
    request_digest: str
    producer_key_id: int
    producer: str
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    concurrency_key: str = ""  # '' for none
    fair_tag: int | None = 0  # its turn among the jobs of its priority (FAIR_TAGS); None: a lone
    # new job, which takes its turn in the INSERT (runner.insert_jobs)
    unique_key: str | None = None  # the dedupe window it holds (unique_slots), if enqueued with one
    expires_at: datetime | None = None  # not claimed by then: never run
    timeout_seconds: int | None = None  # how long a run may take
    schedule: str | None = None  # the schedule that enqueued it (queuelog/schedules)
    scheduled_for: datetime | None = None  # ... and the tick it was enqueued for
    run_when: str | None = None  # None: no parents; else states.RunWhen
    has_dependents: bool = False  # a job of the same enqueue depends on it
    traceparent: str | None = None  # the W3C trace context it was enqueued in, as sent
    tracestate: str | None = None


class ParentMark(NamedTuple):
    """A parent an enqueue names, as MARK_PARENTS found it."""

    id: int
    status: str
    producer_key_id: int | None


class BrokenParent(NamedTuple):
    """A waiting child that must be cancelled, and the parent that failed or was cancelled (BROKEN_PARENTS)."""

    child_id: int
    parent_id: int
    status: str


class Claim(enum.StrEnum):
    """What a move out of running (or a heartbeat) does to the worker's claim: CLAIM_KEPT, CLAIM_ENDED or
    CLAIM_DROPPED in the dialect's statements."""

    KEEP = "keep"  # heartbeat: the claim stands, its lease is renewed
    END = "end"  # completed or failed: token and lease cleared, who ran it (worker, times) kept
    DROP = "drop"  # back to pending: every claim column cleared, the job is anybody's again


class Leave(NamedTuple):
    """A move out of running (FINISH, TAKE_BACK), or a heartbeat that stays: the status it leads to, what
    becomes of the claim, and what else it writes. Every column it does not write keeps its value."""

    status: JobStatus
    claim: Claim
    now: datetime
    run_at: datetime | None = None  # back to pending: when it may be claimed again (None: unchanged)
    lease_until: datetime | None = None  # Claim.KEEP: the renewed lease
    spends_retry: bool = False  # the attempt counts against max_retries: retry_count + 1
    stalled: bool = False  # its worker died holding it: stall_count + 1
    sets_error: bool = False  # error becomes ``error`` (None clears it)
    error: str | None = None
    completes: bool = False  # result becomes ``result``, completed_at becomes now
    result: str | None = None  # JSON text
    results: str | None = None  # instead of ``result``, one per job: a JSON object, id → result text
    progress: str | None = None  # a heartbeat's progress report, JSON text (None: unchanged)

    def parts(self) -> tuple[str, ...]:
        """The names of the LEAVE_PARTS this move writes besides the time and the claim, in their order."""
        # A heartbeat leaves the status as it is: not writing it spares every index on status an update.
        written = (
            ("status", self.status is not JobStatus.RUNNING),
            ("spends_retry", self.spends_retry),
            ("stalled", self.stalled),
            ("run_at", self.run_at is not None),
            ("error", self.sets_error),
            ("progress", self.progress is not None),
            ("completes", self.completes and self.results is None),
            ("completes_each", self.completes and self.results is not None),
        )
        return tuple(name for name, writes in written if writes)

    def params(self) -> dict:
        """The statement's values, by name."""
        return {
            "status": self.status.value,
            "now": self.now,
            "lease_until": self.lease_until,
            "run_at": self.run_at,
            "error": self.error,
            "result": self.result,
            "results": self.results,
            "progress": self.progress,
            # The error's group is written with it, here, so no way of failing a job can leave it out.
            "error_group": error_group(self.error) if self.sets_error else None,
        }


class FlowRow(NamedTuple):
    """A job type's limits as a claim holds them (FLOW_LOCK): every limit None when not set."""

    type: str
    concurrency_limit: int | None
    rate_limit_jobs: int | None
    rate_limit_seconds: int | None
    key_concurrency_limit: int | None


class Refusal(NamedTuple):
    """A type whose due jobs a claim left where they were, and why: paused, concurrency, rate, key_concurrency."""

    type: str
    reason: str


class Window(NamedTuple):
    """A dedupe window's slot in unique_slots (UNIQUE_TAKE): a type's unique key, in one scope."""

    type: str
    scope: int  # the id of the key whose window it is; SHARED_SCOPE: the type's one window for every producer
    key: str


#: The scope of a type's window that every producer shares (unique_scope "type").
SHARED_SCOPE = 0


class QuotaState(NamedTuple):
    """A producer key's quota state (QUOTA_STATE): its rate ledger's window, and its pending jobs."""

    newest_total: int | None  # the key's running total at its newest ledger row; None: no row
    newest_at: datetime | None  # that row's time
    before: int | None  # the running total before the window's first row; None: the window is empty
    oldest_at: datetime | None  # the time of the key's oldest ledger row, in the window or not
    pending: int  # the key's pending jobs, counted up to the limit asked for


class TableHealth(NamedTuple):
    """One of the app's tables as PostgreSQL's catalog sees it (TABLE_HEALTH)."""

    table: str
    dead_tuples: int  # dead rows not yet vacuumed, as the statistics last counted them
    total_bytes: int  # on disk: the table, its indexes and its TOAST


class HeldTransaction(NamedTuple):
    """The oldest transaction holding back vacuum's horizon in the app's database (OLDEST_TRANSACTION)."""

    seconds: float  # how long it has been open (a prepared one: since it was prepared)
    pid: int | None  # its session's server process; None for a prepared transaction
    application_name: str | None  # what its session called itself ('' when it said nothing)
    client_addr: str | None  # its client's address; None for a Unix socket or a prepared transaction
    prepared_gid: str | None  # a prepared transaction's name (COMMIT PREPARED / ROLLBACK PREPARED it)


class Log(NamedTuple):
    """The event row every job a statement returns gets: what happened, from which status, who, why, when."""

    event: str
    from_status: str | None
    actor: str
    at: datetime
    error: str | None = None


# --- times, as UTCDateTime converts them -----------------------------------------------------------

_TIME_TYPE = UTCDateTime()
JOB_TIMES = tuple(i for i, column in enumerate(Job.__table__.c) if isinstance(column.type, UTCDateTime))
KEY_TIMES = tuple(i for i, column in enumerate(ApiKey.__table__.c) if isinstance(column.type, UTCDateTime))


class Times(NamedTuple):
    """A dialect's conversion of times to what its driver stores, and back."""

    to_db: object  # callable: aware datetime → the stored form; None stays None
    from_db: object  # callable: the stored form → aware UTC datetime

    @classmethod
    def of(cls, dialect: Dialect) -> Times:
        column_type = _TIME_TYPE.dialect_impl(dialect)  # what a UTCDateTime column is on this dialect
        to_db = column_type.bind_processor(dialect) or (lambda value: value)
        from_db = column_type.result_processor(dialect, None) or (lambda value: value)
        # A statement binds one "now" several times (updated_at, the event's at, …): convert it once.
        return cls(functools.lru_cache(maxsize=256)(to_db), from_db)

    def rows(self, raw_rows, make, times: tuple[int, ...]) -> list:
        """Driver rows as ``make`` rows, each time at the ``times`` positions converted."""
        out = []
        # The rows of one statement share most of their times (one transaction's "now"): convert each once.
        converted: dict = {None: None}
        from_db = self.from_db
        for raw in raw_rows:
            values = list(raw)
            for position in times:
                value = values[position]
                try:
                    values[position] = converted[value]
                except KeyError:
                    values[position] = converted[value] = from_db(value)
            out.append(make(*values))
        return out
