"""Promotion costs no table scan: a finishing parent finds and decides its children through indexes.

The statements checked are the ones the app really sends while ``queue.complete`` (and an admin's retry)
run, explained after fresh statistics on a deep queue: 100,000 jobs, half of them waiting on a parent
(QUEUELOG_WORKFLOW_PLAN_JOBS sets another number, e.g. 1000000 for the issue's 1M).
"""

from __future__ import annotations

import os
import re

import pytest
from sqlalchemy import insert

from queuelog import queue
from queuelog.auth.keys import authenticate
from queuelog.database.engine import dialect_name
from queuelog.extensions import db
from queuelog.models import JobDependency
from tests.support.factories import key_id
from tests.support.plans import capture, explain, fill_jobs, reads_pages

JOBS = int(os.environ.get("QUEUELOG_WORKFLOW_PLAN_JOBS", "100000"))
FINISHED = JOBS // 5
#: The statements of workflows: they all join job_dependencies.
MARKER = "job_dependencies"

#: Every even job depends on the one before it; the even pending ones wait for it (mod(), not %: the driver
#: reads % as a placeholder).
_WAIT = [
    "INSERT INTO job_dependencies (child_id, parent_id) SELECT id, id - 1 FROM jobs WHERE mod(id, 2) = 0",
    "UPDATE jobs SET status = 'waiting', run_when = 'completed' WHERE mod(id, 2) = 0 AND status = 'pending'",
    "UPDATE jobs SET has_dependents = (mod(id, 2) = 1)",
    "UPDATE jobs SET status = 'failed' WHERE status = 'completed' AND mod(id, 10) = 3",
]
#: Run after the statements above have committed. On PostgreSQL both transactions load with the foreign-key
#: triggers off (session_replication_role = replica; the rows are made from jobs, so every key holds): a
#: backend's cached plan for the checks could walk jobs once per event row, which made the 100,000-job fill
#: take minutes in one clean-clone run and seconds in the next.
_EVENTS = (
    "INSERT INTO job_events (job_id, event, to_status, actor, attempt, at)"
    " SELECT id, 'enqueued', status, 'test', 0, created_at FROM jobs"
)


@pytest.fixture
def deep_workflows(app):
    """JOBS jobs of four types (a fifth finished, a tenth of those failed), every even one depending on the one
    before it, and an event each."""
    with db.engine.begin() as conn:
        _without_key_checks(conn)
        fill_jobs(conn, JOBS, FINISHED)
        for statement in _WAIT:
            conn.exec_driver_sql(statement)
    with db.engine.begin() as conn:
        _without_key_checks(conn)
        conn.exec_driver_sql(_EVENTS)
        conn.exec_driver_sql("ANALYZE")


def _without_key_checks(conn) -> None:
    """For the rest of this transaction, PostgreSQL does not check foreign keys (see _EVENTS): for a superuser,
    as the suite's own cluster's is (the setting needs one)."""
    if (
        dialect_name() == "postgresql"
        and conn.exec_driver_sql("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").scalar()
    ):
        conn.exec_driver_sql("SET LOCAL session_replication_role = replica")


def _captured(run) -> tuple[list[tuple[str, object]], float]:
    """Run ``run()``; every statement it sent about dependencies, with its parameters, and how long it took."""
    return capture(run, lambda sql, way: MARKER in sql and not (way == "read" and sql.startswith("INSERT")))


def _scans(plan: str) -> list[str]:
    """Lines of the plan that read jobs, job_dependencies or job_events other than by seeking an index, or that
    walk the failed or cancelled jobs by status."""
    if dialect_name() == "postgresql":
        lines = plan.splitlines()
        return [
            line
            for index, line in enumerate(lines)
            if (
                re.search(r"(Seq Scan|Bitmap Heap Scan) on (jobs|job_dependencies|job_events)", line)
                and reads_pages(line)
            )
            or (_INDEX_SCAN.search(line) and not _sought(lines, index))
            or re.search(r"Index Cond: \(\(status\)::text = ANY \('\{failed,cancelled\}'", line)
            or re.search(r"Index Cond: \(\(status\)::text = 'waiting'::text\)$", line)
        ]
    scan = re.compile(r"\s*SCAN (jobs|job_dependencies|job_events|d|c|p|e)\b")
    return [line for line in plan.splitlines() if scan.match(line)]


_INDEX_SCAN = re.compile(r"Index (Only )?Scan using \S+ on (jobs|job_dependencies|job_events)")


def _sought(lines: list[str], index: int) -> bool:
    """Does the index scan on ``lines[index]`` seek (an Index Cond), rather than walk the whole index?"""
    for line in lines[index + 1 :]:
        if "->" in line:
            return False
        if "Index Cond:" in line:
            return True
    return False


def _held_parent_with_a_waiting_child(make_job) -> tuple[int, int]:
    owner = key_id("producer-a")
    parent = make_job(status="running", has_dependents=True, producer_key_id=owner)
    child = make_job(status="waiting", run_when="completed", producer_key_id=owner)
    with db.engine.begin() as conn:
        conn.execute(insert(JobDependency.__table__).values(child_id=child, parent_id=parent))
    return parent, child


def _check(statements: list, what: str, took: float) -> None:
    assert statements, f"no statement about dependencies was sent by {what}"
    # A write is seen twice (sent, then on the driver): each statement once.
    for statement, parameters in {statement: parameters for statement, parameters in statements}.items():
        plan = explain(statement, parameters)
        print(
            f"\n[workflow plan, {dialect_name()}, {JOBS:,} jobs, {what}] took {took * 1000:.1f} ms in all\n"
            f"{statement.strip().splitlines()[0][:100]}\n{plan}"
        )
        assert _scans(plan) == [], plan


def test_completing_a_parent_promotes_its_child_without_a_scan(deep_workflows, make_job, make_key, read_job, producer):
    parent, child = _held_parent_with_a_waiting_child(make_job)
    caller = authenticate(make_key("worker", "worker-a"))
    statements, took = _captured(lambda: queue.complete(caller, parent, "token-a", {"ok": True}))
    assert read_job(child).status == "pending"
    _check(statements, "complete → dependencies_met", took)


def test_a_failing_parent_cancels_its_child_without_a_scan(deep_workflows, make_job, make_key, read_job, producer):
    parent, child = _held_parent_with_a_waiting_child(make_job)
    caller = authenticate(make_key("worker", "worker-a"))
    statements, took = _captured(lambda: queue.fail(caller, parent, "token-a", "boom", retryable=False))
    assert read_job(child).status == "cancelled"
    _check(statements, "fail → dependency_failed", took)


def test_an_admin_retry_revives_the_child_without_a_scan(deep_workflows, make_job, make_key, read_job, producer):
    parent, child = _held_parent_with_a_waiting_child(make_job)
    caller = authenticate(make_key("worker", "worker-a"))
    queue.fail(caller, parent, "token-a", "boom", retryable=False)
    statements, took = _captured(lambda: queue.retry(parent, "admin:test"))
    assert read_job(child).status == "waiting"
    _check(statements, "retry → dependency_retried", took)


#: Jobs the statistics have seen (none of them waiting), and the waiting jobs made after the last ANALYZE: fewer
#: than autovacuum's threshold to analyze again (a tenth of the table), as in a queue whose waiting jobs are
#: rare until a large workflow arrives.
SEEN_JOBS, UNSEEN_WAITING = 20_000, 1_000


@pytest.fixture
def waiting_unseen(app):
    """SEEN_JOBS pending jobs, analyzed; then UNSEEN_WAITING of them waiting on the job before each."""
    with db.engine.begin() as conn:
        fill_jobs(conn, SEEN_JOBS, 0)
        conn.exec_driver_sql("ANALYZE")
    with db.engine.begin() as conn:
        _without_key_checks(conn)
        every = SEEN_JOBS // UNSEEN_WAITING  # an even number: each waiting job is an even one
        for statement in _WAIT[:2]:
            conn.exec_driver_sql(statement.replace("mod(id, 2) = 0", f"mod(id, {every}) = 0"))


def test_a_workflow_batch_decides_its_new_jobs_without_a_scan(waiting_unseen, make_job, client, producer, read_job):
    """Waiting jobs the statistics have not seen (a batch's own are not even committed when it decides them):
    deciding the batch's jobs seeks them and their edges by id, never walks the waiting jobs by status."""
    parent = make_job(status="completed", has_dependents=True, producer_key_id=key_id("producer-a"))
    items = [{"type": "email", "payload": {}, "depends_on": [parent]} for _ in range(200)]
    answers = []
    statements, took = _captured(
        lambda: answers.append(client.post("/jobs/batch", json={"jobs": items}, headers=producer))
    )
    assert answers[0].status_code == 201, answers[0].get_json()
    assert [job["status"] for job in answers[0].get_json()["jobs"]] == ["pending"] * 200
    _check(statements, "a batch of 200 children of a completed job", took)
