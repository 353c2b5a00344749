"""The claim: one statement per dialect that picks the next due jobs and marks them running.

Both pick in the same order (priority DESC, then oldest first by id) through the partial index
``ix_jobs_claim_order``, and both re-check ``status = 'pending'`` in the UPDATE itself, so a job
can never be handed to two workers.
"""
from __future__ import annotations


from sqlalchemy import Row, bindparam, select, text, update
from sqlalchemy.engine import Connection

from .models import Job, JobStatus

jobs = Job.__table__


def _due_ids(now, types, limit):
    # Each argument is a bound parameter (or None for no type filter): the statement is built once.
    query = (
        select(jobs.c.id)
        .where(jobs.c.status == JobStatus.PENDING.value, jobs.c.run_at <= now)
        .order_by(jobs.c.priority.desc(), jobs.c.id)
        .limit(limit)
    )
    if types is not None:
        query = query.where(jobs.c.type.in_(types))
    return query


def _mark_running(picked, worker, token, now, lease_until):
    return (
        update(jobs)
        .where(jobs.c.id.in_(picked), jobs.c.status == JobStatus.PENDING.value)
        .values(status=JobStatus.RUNNING.value, worker_id=worker, claim_token=token,
                claimed_at=now, heartbeat_at=now, lease_expires_at=lease_until, updated_at=now)
        .returning(*jobs.c)
    )


# SQLite's planner, left to itself, walks an index on status and sorts every pending job on each
# claim (a claim at 1M pending took ~40× longer than at 1k), so the pick names its index. The
# statement is written out because SQLAlchemy has no INDEXED BY for SQLite.
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


def _sqlite_claim_statement(typed: bool):
    sql = _SQLITE_CLAIM.format(type_filter="AND type IN :types" if typed else "",
                               columns=", ".join(column.name for column in jobs.c))
    params = [bindparam("now", type_=jobs.c.claimed_at.type),
              bindparam("lease_until", type_=jobs.c.lease_expires_at.type)]
    if typed:
        params.append(bindparam("types", expanding=True))
    return text(sql).bindparams(*params).columns(*jobs.c)


_SQLITE_CLAIMS = {typed: _sqlite_claim_statement(typed) for typed in (False, True)}


def _claim_params(kw: dict, prefix: str = "") -> dict:
    """The claim's bound values, named as the dialect's statement names them."""
    params = {prefix + name: kw[name] for name in ("now", "lease_until", "worker", "token", "limit")}
    if kw["types"] is not None:
        params[prefix + "types"] = list(kw["types"])
    return params


def claim_sqlite(conn: Connection, **kw) -> list[Row]:
    """SQLite: the caller's transaction began IMMEDIATE, so this runs holding the write lock;
    one UPDATE … WHERE id IN (SELECT … LIMIT n) … RETURNING picks and marks in one step."""
    typed = kw["types"] is not None
    return list(conn.execute(_SQLITE_CLAIMS[typed], _claim_params(kw)))


def claim_postgresql(conn: Connection, **kw) -> list[Row]:
    """PostgreSQL: FOR UPDATE SKIP LOCKED lets concurrent claimers pass each other's rows
    instead of queueing behind them, and no row is locked by two claimers.

    The pick is a MATERIALIZED CTE, run exactly once. As a plain ``IN (subquery)`` the planner may
    choose a nested-loop semi join that re-runs the LIMIT subquery for every pending row; each rerun
    skips the rows this statement already updated and yields the next one, so a single claim of one
    job marked every due job running (and returned only one of them).
    """
    typed = kw["types"] is not None
    return list(conn.execute(_POSTGRESQL_CLAIMS[typed], _claim_params(kw, prefix="b_")))


def _postgresql_claim_statement(typed: bool):
    # Built once with bound parameters, so each claim reuses the compiled statement (a cache hit on
    # a memoised key) instead of building the CTE and the UPDATE again: that building dominated
    # the claim's profile.
    now = bindparam("b_now", type_=jobs.c.claimed_at.type)
    types = bindparam("b_types", expanding=True) if typed else None
    picked_cte = (
        _due_ids(now, types, bindparam("b_limit"))
        .with_for_update(skip_locked=True)
        .cte("picked")
        .prefix_with("MATERIALIZED")
    )
    picked = select(picked_cte.c.id).scalar_subquery()
    return _mark_running(picked, bindparam("b_worker"), bindparam("b_token"), now,
                         bindparam("b_lease_until", type_=jobs.c.lease_expires_at.type))


_POSTGRESQL_CLAIMS = {typed: _postgresql_claim_statement(typed) for typed in (False, True)}


CLAIM_BY_DIALECT = {"sqlite": claim_sqlite, "postgresql": claim_postgresql}
