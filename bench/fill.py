"""Straight-to-SQL helpers: pre-fill pending jobs and verify final states.

Filling 1M jobs through the HTTP API would take longer than the rest of the
benchmark, so pending jobs are copied in bulk from one *template* job that
queuelog itself created through ``POST /jobs``.  Copying a real row means the
filled rows carry exactly the values the app writes (status spelling,
timestamps, defaults) without this module hard-coding the schema: it only
reads the table's shape with SQLAlchemy ``inspect`` to know which columns
must differ per row (the primary key and unique columns).
"""

from __future__ import annotations

import time

from sqlalchemy import Integer, String, create_engine, inspect, text
from sqlalchemy.engine import Engine

JOBS_TABLE = "jobs"


def engine_for(url: str) -> Engine:
    """A short-lived engine; callers dispose it before forking workers."""
    if url.startswith("sqlite"):
        # Wait on the app's write lock instead of failing with "locked".
        return create_engine(url, connect_args={"timeout": 60})
    return create_engine(url)


def status_counts(url: str) -> dict[str, int]:
    """``{status: count}`` over the whole jobs table."""
    engine = engine_for(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text(f"SELECT status, COUNT(*) FROM {JOBS_TABLE} GROUP BY status"))
            return {status: count for status, count in rows}
    finally:
        engine.dispose()


def _unique_sets(insp, table: str) -> list[list[str]]:
    """Column lists of every unique constraint and unique index (minus the PK)."""
    sets = [uc["column_names"] for uc in insp.get_unique_constraints(table)]
    sets += [[c for c in ix["column_names"] if c] for ix in insp.get_indexes(table) if ix.get("unique")]
    return [s for s in sets if s]


def _columns_to_vary(insp, table: str, template: dict, types: dict) -> set[str]:
    """Which columns must differ per copy so no unique constraint is violated.

    A unique set with a NULL member never conflicts (NULLs are distinct in
    both SQLite and PostgreSQL), so e.g. (producer_key_id, idempotency_key)
    needs nothing when the template has no idempotency key.  Otherwise one
    text member of the set gets a per-row suffix.
    """
    vary: set[str] = set()
    for cols in _unique_sets(insp, table):
        if any(template.get(c) is None for c in cols) or vary.intersection(cols):
            continue
        text_cols = [c for c in cols if isinstance(types[c], String)]
        if not text_cols:
            raise RuntimeError(f"cannot bulk-copy {table}: unique {cols} has no text column to vary")
        vary.add(text_cols[0])
    return vary


def _select_list(engine: Engine, template: dict) -> tuple[list[str], list[str]]:
    """Column names and per-row SQL expressions copying the template row."""
    insp = inspect(engine)
    # A partitioned jobs (PostgreSQL, docs/storage.md) has its keys on its partitions: its id is the key.
    pk = set(insp.get_pk_constraint(JOBS_TABLE)["constrained_columns"]) or {"id"}
    columns = insp.get_columns(JOBS_TABLE)
    vary = _columns_to_vary(insp, JOBS_TABLE, template, {c["name"]: c["type"] for c in columns})
    series = "CAST(s.i AS TEXT)"  # spelled the same in SQLite and PostgreSQL
    names, exprs = [], []
    for col in columns:
        name = col["name"]
        if name in pk:
            if not isinstance(col["type"], Integer):
                raise RuntimeError(f"cannot bulk-copy {JOBS_TABLE}: primary key {name} is not an integer")
            continue  # autoincrement numbers the copies
        if name in vary:
            # e.g. an idempotency key: keep it unique per copied row.
            exprs.append(f"t.{name} || '-' || {series}")
        else:
            exprs.append(f"t.{name}")
        names.append(name)
    return names, exprs


def fill_pending(url: str, template_id, count: int) -> float:
    """Insert ``count`` copies of job ``template_id``; returns seconds taken.

    One INSERT … SELECT over a generated series per call: PostgreSQL's
    ``generate_series``, SQLite's recursive CTE.  On PostgreSQL the table is
    ANALYZEd afterwards, as autovacuum would do shortly after such a load;
    SQLite gets no ANALYZE because nothing runs it by default.
    """
    if count <= 0:
        return 0.0
    engine = engine_for(url)
    try:
        with engine.connect() as conn:
            row = conn.execute(text(f"SELECT * FROM {JOBS_TABLE} WHERE id = :id"), {"id": template_id}).mappings().one()
        names, exprs = _select_list(engine, dict(row))
        cols, sel = ", ".join(names), ", ".join(exprs)
        if engine.dialect.name == "postgresql":
            sql = (
                f"INSERT INTO {JOBS_TABLE} ({cols}) SELECT {sel} "
                f"FROM {JOBS_TABLE} t CROSS JOIN generate_series(1, :n) AS s(i) "
                f"WHERE t.id = :id"
            )
        else:
            sql = (
                f"WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < :n) "
                f"INSERT INTO {JOBS_TABLE} ({cols}) SELECT {sel} "
                f"FROM {JOBS_TABLE} t, s WHERE t.id = :id"
            )
        t0 = time.monotonic()
        with engine.begin() as conn:
            conn.execute(text(sql), {"n": count, "id": template_id})
        if engine.dialect.name == "postgresql":
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text(f"ANALYZE {JOBS_TABLE}"))
        return time.monotonic() - t0
    finally:
        engine.dispose()
