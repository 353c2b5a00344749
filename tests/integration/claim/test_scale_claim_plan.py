"""The claim reads the partial index ix_jobs_claim_order in claim order, even with 100,000 pending jobs.

The statement checked is the one the app really sends: it is captured while ``queue.claim`` runs,
then explained (EXPLAIN on PostgreSQL, EXPLAIN QUERY PLAN on SQLite) after fresh statistics.
"""

from __future__ import annotations

import pytest

from queuelog import queue
from queuelog.auth.keys import authenticate
from queuelog.database.engine import dialect_name
from queuelog.extensions import db
from queuelog.queue import flow
from tests.support.plans import PICK, capture, explain, fill_jobs, reads_pages

PENDING = 100_000
FINISHED = 20_000


@pytest.fixture
def deep_queue(app):
    """100,000 pending and 20,000 completed jobs, with statistics gathered."""
    with db.engine.begin() as conn:
        fill_jobs(conn, PENDING + FINISHED, FINISHED)
        conn.exec_driver_sql("ANALYZE")


def _claim_statement(caller, types=None) -> tuple[str, object, float]:
    """Run a real claim; return the statement that picked its job, its parameters, and how long the claim took."""
    claimed = []
    # A current copy of the flow settings, as a server that has claimed before holds: one read of an earlier
    # test's (PostgreSQL's tests share one database URL) would send the claim twice, the first shaped by it.
    flow.read_afresh()
    seen, took = capture(
        lambda: claimed.extend(queue.claim(caller, types=types)), lambda sql, way: way == "send" and PICK in sql
    )
    assert len(claimed) == 1 and len(seen) == 1
    return seen[0][0], seen[0][1], took


def _explained_claim(make_key, types=None) -> str:
    caller = authenticate(make_key("worker", "plan-worker"))
    statement, parameters, took = _claim_statement(caller, types)
    plan = explain(statement, parameters)
    print(f"\n[claim plan, {dialect_name()}, types={types}] claim took {took * 1000:.1f} ms\n{plan}")
    return plan


def _full_scan(plan: str) -> bool:
    return any(
        ("Seq Scan on jobs" in line and reads_pages(line)) or line.strip() == "SCAN jobs" for line in plan.splitlines()
    )


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
