"""The claim reads the partial index ix_jobs_claim_order in claim order, even with 100,000 pending jobs.

The statement checked is the one the app really sends: it is captured while ``queue.claim`` runs,
then explained (EXPLAIN on PostgreSQL, EXPLAIN QUERY PLAN on SQLite) after fresh statistics.
"""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text

from queuelog import queue
from queuelog.auth.keys import authenticate
from queuelog.database.engine import dialect_name
from queuelog.extensions import db
from queuelog.queue import flow
from queuelog.sql import runner

PENDING = 100_000
FINISHED = 20_000

_FILL = {
    # Pending jobs of four types and four priorities, plus finished ones the partial index leaves out.
    "postgresql": """
        INSERT INTO jobs (type, payload, priority, status, retry_count, max_retries, stall_count,
                          run_at, created_at, updated_at)
        SELECT (ARRAY['email','report','noop','resize-image'])[1 + n % 4], '{}', (n / 4 % 4) * 10,
               CASE WHEN n <= :finished THEN 'completed' ELSE 'pending' END, 0, 3, 0,
               now() AT TIME ZONE 'utc' - interval '1 minute', now() AT TIME ZONE 'utc',
               now() AT TIME ZONE 'utc'
        FROM generate_series(1, :total) AS n""",
    "sqlite": """
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :total)
        INSERT INTO jobs (type, payload, priority, status, retry_count, max_retries, stall_count,
                          run_at, created_at, updated_at)
        SELECT CASE i % 4 WHEN 0 THEN 'email' WHEN 1 THEN 'report' WHEN 2 THEN 'noop' ELSE 'resize-image' END,
               '{}', (i / 4 % 4) * 10, CASE WHEN i <= :finished THEN 'completed' ELSE 'pending' END, 0, 3, 0,
               datetime('now', '-1 minute'), datetime('now'), datetime('now')
        FROM n""",
}


@pytest.fixture
def deep_queue(app):
    """100,000 pending and 20,000 completed jobs, with statistics gathered."""
    with db.engine.begin() as conn:
        conn.execute(text(_FILL[dialect_name()]), {"total": PENDING + FINISHED, "finished": FINISHED})
        conn.exec_driver_sql("ANALYZE")


#: In the statement that picks the jobs a claim takes: PostgreSQL's CLAIM (an UPDATE), SQLite's CLAIM_PICK
#: (its CLAIM then marks the picked ids, found by primary key).
PICK = "ORDER BY priority DESC, fair_tag, id"


def _claim_statement(caller, types=None) -> tuple[str, object, float]:
    """Run a real claim; return the statement that picked its job, its parameters, and how long the claim took."""
    seen = []
    send = runner.send

    def capture(conn, sql, params, *rest):
        if PICK in sql:
            seen.append((sql, params))
        return send(conn, sql, params, *rest)

    # A current copy of the flow settings, as a server that has claimed before holds: one read of an earlier
    # test's (PostgreSQL's tests share one database URL) would send the claim twice, the first shaped by it.
    flow.read_afresh()
    runner.send = capture
    try:
        started = time.perf_counter()
        claimed = queue.claim(caller, types=types)
        took = time.perf_counter() - started
    finally:
        runner.send = send
    assert len(claimed) == 1 and len(seen) == 1
    return seen[0][0], seen[0][1], took


def _plan(statement: str, parameters) -> str:
    explain = "EXPLAIN " if dialect_name() == "postgresql" else "EXPLAIN QUERY PLAN "
    with db.engine.connect() as conn:
        rows = conn.exec_driver_sql(explain + statement, parameters).all()
    # PostgreSQL: one line per row; SQLite: (id, parent, notused, detail).
    return "\n".join(str(row[-1]) for row in rows)


def _explained_claim(make_key, types=None) -> str:
    caller = authenticate(make_key("worker", "plan-worker"))
    statement, parameters, took = _claim_statement(caller, types)
    plan = _plan(statement, parameters)
    print(f"\n[claim plan, {dialect_name()}, types={types}] claim took {took * 1000:.1f} ms\n{plan}")
    return plan


def _full_scan(plan: str) -> bool:
    return "Seq Scan on jobs" in plan or any(line.strip() == "SCAN jobs" for line in plan.splitlines())


def test_the_claim_walks_the_partial_claim_index_in_order(deep_queue, make_key):
    plan = _explained_claim(make_key)
    assert "ix_jobs_claim_order" in plan
    # In index order: no sort of the pending jobs, no walk over the table.
    assert "Sort" not in plan and "TEMP B-TREE" not in plan
    assert not _full_scan(plan)


def test_a_claim_for_one_type_reads_an_index_not_the_table(deep_queue, make_key):
    plan = _explained_claim(make_key, ["report"])
    assert "ix_jobs_" in plan
    assert not _full_scan(plan)
