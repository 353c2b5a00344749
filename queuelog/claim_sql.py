"""The claim: one statement per dialect that picks the next due jobs and marks them running.

Both pick in the same order (priority DESC, then oldest first by id) through the partial index
``ix_jobs_claim_order``, and both re-check ``status = 'pending'`` in the UPDATE itself, so a job
can never be handed to two workers. Each runs on the driver (see driver_sql) and records a
'claimed' event for every job it returns, in the caller's transaction.
"""
from __future__ import annotations

from datetime import datetime

from sqlalchemy.engine import Connection

from .driver_sql import JOB_LIST, JobRow, JobWrite

# SQLite's planner, left to itself, walks an index on status and sorts every pending job on each
# claim (a claim at 1M pending took ~40× longer than at 1k), so the pick names its index.
_SQLITE_CLAIM = """
UPDATE jobs
   SET status = 'running', worker_id = :worker, claim_token = :token, claimed_at = :now,
       heartbeat_at = :now, lease_expires_at = :lease_until, updated_at = :now
 WHERE status = 'pending'
   AND id IN (SELECT id FROM jobs INDEXED BY ix_jobs_claim_order
               WHERE status = 'pending' AND run_at <= :now {type_filter}
               ORDER BY priority DESC, id
               LIMIT :limit)
RETURNING {columns}
"""

# FOR UPDATE SKIP LOCKED lets concurrent claimers pass each other's rows instead of queueing behind
# them, and no row is locked by two claimers. The pick is a MATERIALIZED CTE, run exactly once: as a
# plain ``IN (subquery)`` the planner may choose a nested-loop semi join that re-runs the LIMIT
# subquery for every pending row; each rerun skips the rows this statement already updated and
# yields the next one, so a single claim of one job marked every due job running.
_POSTGRESQL_PICK = """
picked AS MATERIALIZED (
    SELECT id FROM jobs
     WHERE status = 'pending' AND run_at <= %(now)s {type_filter}
     ORDER BY priority DESC, id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED)
"""
_POSTGRESQL_CLAIM = """
UPDATE jobs
   SET status = 'running', worker_id = %(worker)s, claim_token = %(token)s, claimed_at = %(now)s,
       heartbeat_at = %(now)s, lease_expires_at = %(lease_until)s, updated_at = %(now)s
 WHERE status = 'pending' AND id IN (SELECT id FROM picked)
RETURNING {columns}
"""


def claim_statement(conn: Connection, *, now: datetime, lease_until: datetime, worker: str, token: str,
                    limit: int, types: tuple[str, ...] | None, actor: str) -> tuple[str, dict, dict]:
    """The SQL and bound values a claim sends on ``conn``'s dialect (also what a query plan explains),
    and the values of the event row each claimed job gets."""
    write = JobWrite(conn)
    dialect = write.dialect
    params = {"now": dialect.time_in(now), "lease_until": dialect.time_in(lease_until),
              "worker": worker, "token": token, "limit": limit}
    type_filter = "" if types is None else "AND " + dialect.ids_in("type", "types", types, params)
    if dialect.name == "postgresql":
        sql = write.sql(_POSTGRESQL_CLAIM.format(columns=JOB_LIST), _POSTGRESQL_PICK.format(type_filter=type_filter))
    else:
        sql = write.sql(_SQLITE_CLAIM.format(type_filter=type_filter, columns=JOB_LIST))
    events = write.event_params("claimed", "pending", actor, now)
    return sql, {**params, **events}, events


def claim(conn: Connection, **kw) -> list[JobRow]:
    """Take up to ``limit`` due jobs for ``worker`` and log a 'claimed' event each, in ``conn``'s transaction.

    On SQLite that transaction began IMMEDIATE, so the claim runs holding the write lock; on PostgreSQL
    SKIP LOCKED keeps concurrent claimers apart. Either way one statement picks and marks.
    """
    sql, params, events = claim_statement(conn, **kw)
    return JobWrite(conn).execute(sql, params, events)
