"""Every statement about jobs, one named statement per dialect, and the one runner that sends them.

Where to look:
- ``common.py``: every statement and piece the two dialects agree on, written once in SQLite's spelling
  (``:now``, ``IN (:ids)``) and spelled for psycopg (``%(now)s``, ``= ANY(%(ids)s)``) by ``for_postgresql``.
- ``sqlite.py`` and ``postgresql.py``: only what each dialect spells its own way, each saying why ("Differs:").
  A name is looked up in the dialect's module first, then in common.py (``runner.statement``); both
  dialects have the same names but for the few that only one needs (tests/unit/test_sql_dialects.py).
- ``rendered/``: the statements that matter most as they are sent, slots filled, per dialect
  (``python -m queuelog.sql.render`` writes them; a test checks they are current). A statement here with
  ``{slot}``s is a template, not SQL on its own: the rendered files show what it becomes.
- The statements, by name. CLAIM is the claim,
  flow control included (FLOW_LOCK before it, RECORD_CLAIMS / FORGET_CLAIMS after it for a rate limit,
  FLOW_REFUSALS to say why a claim came back short); on SQLite it is three statements, CLAIM_PICK, CLAIM
  and CLAIMED (sqlite.py says why); FAIR_TAGS places new jobs in their keys' turns;
  FINISH is everything the holding worker may do to a running job (complete, fail, release, heartbeat);
  TAKE_BACK is the reaper's, the server's and an admin's way to take a running job back; then ENQUEUE,
  CANCEL, RETRY, EXPIRABLE / EXPIRE (the reaper's expiry), RUN_NOW, UNIQUE_TAKE / UNIQUE_HOLDER / UNIQUE_SET
  (dedupe windows), PURGEABLE / PURGE_EVENTS / PURGE_JOBS (`flask purge`), the producer quotas' QUOTA_*,
  the event rows (LOG_EVENTS on SQLite, LOGGED on PostgreSQL) and the reads the operations
  decide by; workflows' MARK_PARENTS, INSERT_DEPENDENCIES, WAITING_CHILDREN, PROMOTE, BROKEN_PARENTS,
  DOOM, REVIVE and WATCH (queue/dependencies.py says when each runs). CLAIMABLE, HELD_BY and
  LEAVE_RUNNING are the conditions and values they share. NEXT_RUN_AT is how long a waiting claim sleeps.
  TABLE_HEALTH and OLDEST_TRANSACTION (PostgreSQL's alone) read the catalog for the database's health.
- ``runner.py``: sends a statement on the database driver, with its event rows in the same statement
  (PostgreSQL) or transaction (SQLite).
- ``values.py``: what goes in and comes out: JobRow, KeyRow, NewJobRow, Leave, Log, and times.

The functions here are those statements as ``queuelog.queue`` calls them, each in the caller's
transaction. Which transition, which values, which event: that is the queue's to decide.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta

from sqlalchemy.engine import Connection

from .health import oldest_transaction, table_health
from .quotas import quota_forget, quota_frees_at, quota_record, quota_state, quota_turn
from .runner import execute_plain, insert_dependencies, insert_jobs, next_run_at, rowcount, run, scalar
from .values import (
    KEY_TIMES,
    BrokenParent,
    Claim,
    FlowRow,
    HeldTransaction,
    JobRow,
    KeyRow,
    Leave,
    Log,
    NewJobRow,
    ParentMark,
    QuotaState,
    Refusal,
    TableHealth,
    Window,
)
from .workflows import broken_parents, doom, mark_parents, promote, revive, waiting_children

#: How long after its window a rate-limited claim is kept (see record_claims).
FORGET_AFTER = timedelta(minutes=1)

__all__ = [
    "BrokenParent",
    "Claim",
    "FlowRow",
    "HeldTransaction",
    "JobRow",
    "KeyRow",
    "Leave",
    "Log",
    "NewJobRow",
    "ParentMark",
    "QuotaState",
    "Refusal",
    "TableHealth",
    "Window",
    "broken_parents",
    "cancel",
    "cancel_many",
    "claim",
    "delete",
    "doom",
    "execute_plain",
    "expirable",
    "expire",
    "fair_tags",
    "find_key",
    "finish",
    "flow_refusals",
    "insert_dependencies",
    "insert_jobs",
    "job",
    "jobs_by_key",
    "lock_flow",
    "mark_parents",
    "next_run_at",
    "oldest_transaction",
    "promote",
    "quota_forget",
    "quota_frees_at",
    "quota_record",
    "quota_state",
    "quota_turn",
    "record_claims",
    "retry",
    "revive",
    "run_now",
    "something_due",
    "stalled",
    "table_health",
    "take_back",
    "unique_holder",
    "unique_set",
    "unique_take",
    "waiting_children",
    "watch",
]


def claim(
    conn: Connection,
    *,
    now: datetime,
    lease_until: datetime,
    worker: str,
    token: str,
    limit: int,
    types: Sequence[str] | None,
    flow: bool,
    locked_types: Sequence[str],
    version: int,
    log: Log,
    process: int | None = None,
    key_id: int | None = None,
    floor: int = 0,
) -> list[JobRow] | None:
    """CLAIM: up to ``limit`` claimable jobs (of ``types``; None: any) marked running for ``worker``; with
    ``process``, only while that worker process of key ``key_id`` is told to run, and written on the jobs.

    ``flow`` and ``locked_types`` are shaped by the caller's copy of the type settings, read at ``version``.
    Without ``flow`` (no type of the claim is paused or limited, as far as the caller knows) the claim takes
    nothing if one is after all. With ``flow``: nothing of a paused type, nothing past a limit, and a
    limited type only when it is among ``locked_types`` (FLOW_LOCK, earlier in this transaction).
    None, having taken nothing: the settings are no longer at ``version`` (read them again, claim anew).
    ``floor`` (PostgreSQL): no claimable job's turn is below it (waiting/claim_floor.py); 0: none.
    """
    values = {
        "now": now,
        "lease_until": lease_until,
        "worker": worker,
        "token": token,
        "process": process,
        "key_id": key_id,
        "limit": limit,
        "types": types,
        "flow": True if flow else None,
        "locked_types": list(locked_types),
        "version": version,
        "floor": _floor(conn, floor),
    }
    if conn.dialect.name == "sqlite":
        return _claim_on_sqlite(conn, values, log)
    rows = run(conn, "CLAIM", values, log)
    if rows and rows[-1].id is None:  # STALE's row: the statement took nothing
        return None
    return rows


def _claim_on_sqlite(conn: Connection, values: dict, log: Log) -> list[JobRow] | None:
    """SQLite's claim: CLAIM_PICK, then CLAIM on the picked ids, then CLAIMED, logged (sqlite.py says why)."""
    ids = run(conn, "CLAIM_PICK", values, make=lambda job_id: job_id, times_at=())
    if not ids:
        return []
    if None in ids:  # STALE's row: the pick was shaped by old settings, drop it
        return None
    marked = rowcount(
        conn,
        "CLAIM",
        {
            "ids": ids,
            "now": values["now"],
            "lease_until": values["lease_until"],
            "worker": values["worker"],
            "token": values["token"],
            "process": values["process"],
            "key_id": values["key_id"],
        },
    )
    if not marked:
        return []  # the named worker process is not told to run
    return run(conn, "CLAIMED", {"ids": ids, "token": values["token"]}, log)


def lock_flow(conn: Connection, types: Sequence[str] | None) -> list[FlowRow]:
    """FLOW_LOCK: the limits of the limited types among ``types`` (None: all), held until the transaction ends."""
    return run(conn, "FLOW_LOCK", {"types": types}, make=FlowRow, times_at=())


def record_claims(conn: Connection, job_type: str, jobs: int, now: datetime, expires_at: datetime) -> None:
    """RECORD_CLAIMS and FORGET_CLAIMS: ``jobs`` claims of a rate-limited type counted until ``expires_at``;
    the type's claims whose window ended more than FORGET_AFTER ago are deleted.

    Not those whose window has just ended: another server's clock may be a little behind this one's, and
    its next claim must still count them.
    """
    rowcount(conn, "FORGET_CLAIMS", {"type": job_type, "now": now - FORGET_AFTER})
    rowcount(conn, "RECORD_CLAIMS", {"type": job_type, "jobs": jobs, "expires_at": expires_at})


def flow_refusals(conn: Connection, now: datetime, types: Sequence[str] | None) -> list[Refusal]:
    """FLOW_REFUSALS: the types of ``types`` (None: any) whose due jobs flow control holds back now, and why."""
    return run(conn, "FLOW_REFUSALS", {"now": now, "types": types, "limit": 1}, make=Refusal, times_at=())


def fair_tags(conn: Connection, groups: Sequence[tuple[str, str, int, int]]) -> list[int]:
    """FAIR_TAGS: for each (type, concurrency key, priority, floor), the turn its next new job takes; the head of
    the type's queue is read from ``floor`` up (queue/served_turns.py)."""
    return run(
        conn, "FAIR_TAGS", {"groups": json.dumps([list(group) for group in groups])}, make=lambda tag: tag, times_at=()
    )


def finish(
    conn: Connection,
    ids: Sequence[int],
    worker: str,
    token: str,
    leave: Leave,
    log: Log | None,
    ends_alone_unless: Collection[str] | None = None,
) -> list[JobRow]:
    """FINISH: ``leave`` applied to those of ``ids`` that ``worker`` holds under ``token``; the others stay.

    ``ends_alone_unless`` (the limited types): only jobs whose move needs nothing after it (ENDS_ALONE).
    """
    values = {"ids": ids, "worker": worker, "token": token}
    if ends_alone_unless is not None:
        values["limited"] = sorted(ends_alone_unless)
    return run(conn, "FINISH", values, log, leave=leave)


def take_back(conn: Connection, ids: Sequence[int], token: str | None, leave: Leave, log: Log) -> list[JobRow]:
    """TAKE_BACK: ``leave`` applied to those of ``ids`` still running (under ``token``, when given)."""
    return run(conn, "TAKE_BACK", {"ids": ids, "token": token}, log, leave=leave)


def cancel(
    conn: Connection, job_id: int, owner_key_id: int | None, from_status: str, now: datetime, log: Log
) -> JobRow | None:
    """CANCEL: the job, if ``from_status`` (and ``owner_key_id``'s, when given), marked cancelled."""
    rows = run(conn, "CANCEL", {"id": job_id, "owner": owner_key_id, "from_status": from_status, "now": now}, log)
    return rows[0] if rows else None


def retry(conn: Connection, ids: Sequence[int], from_status: str, now: datetime, log: Log) -> list[JobRow]:
    """RETRY: those of ``ids`` that are ``from_status`` (a retryable status), back to pending."""
    return run(conn, "RETRY", {"ids": ids, "from_status": from_status, "now": now}, log)


def cancel_many(conn: Connection, ids: Sequence[int], from_status: str, now: datetime, log: Log) -> list[JobRow]:
    """CANCEL_MANY: those of ``ids`` that are in ``from_status`` (waiting or pending), marked cancelled."""
    return run(conn, "CANCEL_MANY", {"ids": ids, "from_status": from_status, "now": now}, log)


def delete(conn: Connection, ids: Sequence[int]) -> list[JobRow]:
    """DELETE_EVENTS then DELETE_JOBS: those of ``ids`` in a final status, gone with their events, as they were."""
    rowcount(conn, "DELETE_EVENTS", {"ids": ids})
    deleted = run(conn, "DELETE_JOBS", {"ids": ids})
    forget(conn, [row.id for row in deleted])
    return deleted


def forget(conn: Connection, ids: Sequence[int]) -> None:
    """FORGET_EDGES and FORGET_SLOTS: what pointed at those of ``ids`` that are gone goes too."""
    if ids:
        rowcount(conn, "FORGET_EDGES", {"ids": ids})
        rowcount(conn, "FORGET_SLOTS", {"ids": ids})


def expirable(conn: Connection, now: datetime) -> list[JobRow]:
    """EXPIRABLE: pending jobs whose expires_at has passed, by id."""
    return run(conn, "EXPIRABLE", {"now": now})


def expire(conn: Connection, ids: Sequence[int], now: datetime, log: Log) -> list[JobRow]:
    """EXPIRE: those of ``ids`` still pending and past their expires_at, marked cancelled."""
    return run(conn, "EXPIRE", {"ids": ids, "now": now}, log)


def run_now(conn: Connection, job_id: int, now: datetime, log: Log) -> JobRow | None:
    """RUN_NOW: the job, if pending, due now (a job already due keeps its run_at)."""
    rows = run(conn, "RUN_NOW", {"id": job_id, "now": now}, log)
    return rows[0] if rows else None


def unique_take(conn: Connection, window: Window, now: datetime, cutoff: datetime) -> bool:
    """UNIQUE_TAKE: whether this enqueue took the window's slot; False: a job enqueued after ``cutoff``
    and not finished holds it."""
    return bool(
        run(
            conn,
            "UNIQUE_TAKE",
            {**window._asdict(), "now": now, "cutoff": cutoff},
            make=lambda taken: taken,
            times_at=(),
        )
    )


def unique_holder(conn: Connection, window: Window) -> JobRow | None:
    """UNIQUE_HOLDER: the job holding the window's slot."""
    rows = run(conn, "UNIQUE_HOLDER", window._asdict())
    return rows[0] if rows else None


def unique_set(conn: Connection, window: Window, job_id: int) -> None:
    """UNIQUE_SET: the window's slot this enqueue took now belongs to ``job_id``."""
    rowcount(conn, "UNIQUE_SET", {**window._asdict(), "job": job_id})


def watch(conn: Connection, job_id: int) -> JobRow | None:
    """WATCH: the job, marked as waited for (its finishing wakes every server process)."""
    rows = run(conn, "WATCH", {"id": job_id})
    return rows[0] if rows else None


def something_due(conn: Connection, now: datetime, types: Sequence[str] | None, floor: int = 0) -> bool:
    """SOMETHING_DUE: is any job of ``types`` (None: any) claimable at ``now``, flow control considered, at or
    above ``floor`` (PostgreSQL, as ``claim``)?"""
    values = {"now": now, "types": types, "limit": 1, "floor": _floor(conn, floor)}
    return bool(scalar(conn, "SOMETHING_DUE", values))


def _floor(conn: Connection, floor: int) -> int | None:
    """The claim floor as a statement's value: PostgreSQL's only, and none at 0."""
    return floor if floor > 0 and conn.dialect.name == "postgresql" else None


def job(conn: Connection, job_id: int) -> JobRow | None:
    """JOB: one job as it is now, or None."""
    rows = run(conn, "JOB", {"id": job_id})
    return rows[0] if rows else None


def jobs_by_key(conn: Connection, producer_key_id: int, keys: Sequence[str]) -> list[JobRow]:
    """JOBS_BY_KEY: the producer's jobs enqueued under any of ``keys``."""
    return run(conn, "JOBS_BY_KEY", {"producer": producer_key_id, "keys": sorted(set(keys))})


def stalled(conn: Connection, now: datetime, claimed_before: datetime | None) -> list[JobRow]:
    """STALLED: running jobs whose lease ended before ``now`` (or claimed before ``claimed_before``), by id."""
    return run(conn, "STALLED", {"now": now, "claimed_before": claimed_before})


def find_key(conn: Connection, digest: str) -> KeyRow | None:
    """KEY_BY_DIGEST: the API key with this digest (live or revoked), or None."""
    rows = run(conn, "KEY_BY_DIGEST", {"digest": digest}, make=KeyRow, times_at=KEY_TIMES)
    return rows[0] if rows else None


def purgeable(conn: Connection, status: str, cutoff: datetime, limit: int) -> list[int]:
    """PURGEABLE: up to ``limit`` ids of ``status`` jobs unchanged since before ``cutoff``, oldest first."""
    return run(
        conn, "PURGEABLE", {"status": status, "cutoff": cutoff, "limit": limit}, make=lambda job_id: job_id, times_at=()
    )


def purge(conn: Connection, ids: Sequence[int], status: str, cutoff: datetime) -> tuple[int, int]:
    """PURGE_EVENTS then PURGE_JOBS for ``ids``: (jobs deleted, events deleted)."""
    events = rowcount(conn, "PURGE_EVENTS", {"ids": ids})
    jobs = rowcount(conn, "PURGE_JOBS", {"ids": ids, "status": status, "cutoff": cutoff})
    forget(conn, ids)
    return jobs, events
