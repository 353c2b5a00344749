"""Flow control and fair turns keep the claim an index walk, never a scan of the pending jobs.

The statements checked are the ones the app really sends (captured while ``queue.claim`` or
``queue.enqueue`` runs), explained after fresh statistics on 100,000 pending jobs of four types
(QUEUELOG_FLOW_PLAN_PENDING sets another number, e.g. 1000000 for a look at a deep queue):

- the plain claim (no type under flow control) walks ix_jobs_claim_order in (priority, turn, id) order;
- the flow-controlled claim walks each type along ix_jobs_type_claim_order, one seek per type;
- enqueue finds a key's next turn with seeks, not by reading the key's pending jobs.
"""

from __future__ import annotations

import os
import re

import pytest
from sqlalchemy import insert, text

from queuelog import queue, sql
from queuelog.auth.keys import authenticate
from queuelog.core.clock import utcnow
from queuelog.database.engine import dialect_name
from queuelog.extensions import db
from queuelog.models import TypeSettings
from queuelog.queue import flow
from tests.support.database import test_db_kind
from tests.support.plans import PICK, explain, fill_jobs, first_holding, scans_of_jobs

PENDING = int(os.environ.get("QUEUELOG_FLOW_PLAN_PENDING", "100000"))
FINISHED = PENDING // 5
#: Less work than a walk of the pending jobs, which takes at least one SQLite step, or one row, per job.
LESS_THAN_A_WALK = PENDING / 2


@pytest.fixture
def deep_queue(app):
    """PENDING pending and FINISHED completed jobs of four types, with statistics gathered."""
    flow.forget_cached()
    with db.engine.begin() as conn:
        fill_jobs(conn, PENDING + FINISHED, FINISHED)
        # Tenants on the jobs of one type, so the per-key indexes hold many keys.
        conn.execute(text("UPDATE jobs SET concurrency_key = 'tenant-' || CAST(id % 50 AS TEXT) WHERE type = 'email'"))
        conn.exec_driver_sql("ANALYZE")
    yield
    flow.forget_cached()


def _claim_plan(make_key, types=None) -> str:
    caller = authenticate(make_key("worker", "plan-worker"))
    statement, parameters, took = first_holding(lambda: queue.claim(caller, types=types), PICK)
    plan = explain(statement, parameters)
    print(
        f"\n[flow plan, {dialect_name()}, {PENDING:,} pending, types={types}] claim took {took * 1000:.1f} ms\n{plan}"
    )
    return plan


def test_the_plain_claim_walks_the_claim_order_index_without_sorting(deep_queue, make_key):
    plan = _claim_plan(make_key)
    assert "ix_jobs_claim_order" in plan
    assert "Sort" not in plan and "TEMP B-TREE" not in plan
    assert scans_of_jobs(plan) == []


@pytest.mark.parametrize("types", [None, ["email"]])
def test_a_flow_controlled_claim_seeks_each_types_queue(deep_queue, make_key, types):
    flow.update_type("email", {"concurrency_limit": 1000, "key_concurrency_limit": 5}, "test")
    flow.update_type("report", {"paused": True}, "test")
    flow.update_type("noop", {"rate_limit": flow.RateLimit(1000, 60)}, "test")
    plan = _claim_plan(make_key, types)
    assert "ix_jobs_type_claim_order" in plan
    assert scans_of_jobs(plan) == []
    if dialect_name() == "postgresql":
        # Each type's jobs are read along the index in claim order, never gathered and sorted.
        assert re.search(r"Index Scan using ix_jobs_type_claim_order on jobs(_live)? p\b", plan)
    else:
        assert re.search(r"SEARCH p USING INDEX ix_jobs_type_claim_order \(type=\?\)", plan)


def test_enqueue_finds_a_keys_next_turn_with_seeks(deep_queue, make_key):
    producer = authenticate(make_key("producer", "plan-producer"))
    job = queue.NewJob(type="email", payload={}, concurrency_key="tenant-7")
    statement, parameters, took = first_holding(lambda: queue.enqueue(producer, [job]), "fair_tag")
    plan = explain(statement, parameters)
    print(f"\n[fair turns plan, {dialect_name()}, {PENDING:,} pending] enqueue took {took * 1000:.1f} ms\n{plan}")
    assert "ix_jobs_key_turns" in plan
    assert scans_of_jobs(plan) == []


@pytest.mark.skipif(test_db_kind() != "postgresql", reason="PostgreSQL's plan cache")
def test_a_connection_plans_its_claim_once_and_reuses_the_plan(deep_queue):
    """The claim's LIMIT is in its text, so PostgreSQL can keep one generic plan instead of planning every
    claim afresh (planning was most of a claim's time)."""
    now = utcnow()
    with db.engine.connect() as conn:
        for _ in range(12):
            sql.claim(
                conn,
                now=now,
                lease_until=now,
                worker="plan-worker",
                token="t",
                limit=1,
                types=None,
                flow=False,
                locked_types=[],
                version=0,
                log=sql.Log("claimed", "pending", "test", now),
            )
            conn.rollback()
        plans = conn.exec_driver_sql(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE strpos(statement, 'picked') > 0"
        ).all()
    assert plans, "the claim was not prepared"
    [(generic, custom)] = plans
    assert generic >= 1 and custom <= 5


def _work_done(statement: str, parameters) -> int:
    """How much the statement reads, run once more and rolled back: SQLite's virtual machine steps; on
    PostgreSQL the rows its plan nodes over jobs return, summed (EXPLAIN ANALYZE)."""
    raw = db.engine.raw_connection()
    try:
        driver = raw.driver_connection
        if dialect_name() == "sqlite":
            steps = [0]

            def count():
                steps[0] += 1
                return 0

            driver.execute("BEGIN IMMEDIATE")
            driver.set_progress_handler(count, 100)
            try:
                driver.execute(statement, parameters).fetchall()
            finally:
                driver.set_progress_handler(None, 0)
                driver.execute("ROLLBACK")
            return steps[0] * 100
        with driver.cursor() as cursor:
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, parameters)
            [[document]] = cursor.fetchall()
        driver.rollback()
        return _rows_over_jobs(document[0]["Plan"])
    finally:
        raw.close()


def _rows_over_jobs(node: dict) -> int:
    own = node.get("Actual Rows", 0) * node.get("Actual Loops", 1) if node.get("Relation Name") == "jobs" else 0
    return own + sum(_rows_over_jobs(child) for child in node.get("Plans", []))


@pytest.mark.parametrize("controlled", [False, True])
def test_a_claim_reads_a_few_entries_not_the_pending_jobs(deep_queue, make_key, controlled):
    if controlled:
        flow.update_type("report", {"paused": True}, "test")
        flow.update_type("email", {"concurrency_limit": 1000, "key_concurrency_limit": 5}, "test")
    caller = authenticate(make_key("worker", "plan-worker"))
    statement, parameters, _took = first_holding(lambda: queue.claim(caller), PICK)
    work = _work_done(statement, parameters)
    print(f"\n[claim work, {dialect_name()}, {PENDING:,} pending, flow control {controlled}] {work}")
    assert work < LESS_THAN_A_WALK


def test_a_claim_with_a_stale_copy_of_the_settings_reads_a_few_entries_too(deep_queue, make_key):
    caller = authenticate(make_key("worker", "plan-worker"))
    queue.claim(caller)  # this process's copy of the settings now says: nothing is paused or limited
    with db.engine.begin() as conn:  # another server pauses a type
        conn.execute(insert(TypeSettings.__table__).values(type="report", paused=True, updated_at=utcnow()))
    statement, parameters, _took = first_holding(lambda: queue.claim(caller), PICK)
    work = _work_done(statement, parameters)
    print(f"\n[claim work, {dialect_name()}, {PENDING:,} pending, a pause this process has not seen] {work}")
    assert work < LESS_THAN_A_WALK


@pytest.mark.parametrize("controlled", [False, True])
def test_a_waiting_claims_due_check_reads_a_few_entries(deep_queue, controlled):
    if controlled:
        flow.update_type("report", {"paused": True}, "test")
        flow.update_type("email", {"concurrency_limit": 1000, "key_concurrency_limit": 5}, "test")

    def ask():
        with db.engine.connect() as conn:
            assert sql.something_due(conn, utcnow(), None)

    statement, parameters, _took = first_holding(ask, "EXISTS")
    work = _work_done(statement, parameters)
    print(f"\n[due-check work, {dialect_name()}, {PENDING:,} pending, flow control {controlled}] {work}")
    assert work < LESS_THAN_A_WALK


def test_counting_why_a_claim_came_back_short_reads_a_few_entries(deep_queue):
    flow.update_type("report", {"paused": True}, "test")
    flow.update_type("email", {"concurrency_limit": 1000, "key_concurrency_limit": 5}, "test")

    def ask():
        with db.engine.connect() as conn:
            assert [refusal.type for refusal in sql.flow_refusals(conn, utcnow(), None)] == ["report"]

    statement, parameters, _took = first_holding(ask, "key_concurrency")
    work = _work_done(statement, parameters)
    print(f"\n[refusals work, {dialect_name()}, {PENDING:,} pending] {work}")
    assert work < LESS_THAN_A_WALK
