"""The reaper finds expired jobs by seeking ix_jobs_pending_expiry, never by walking the pending jobs.

The statement checked is the one the reaper really sends (captured while ``queue.reap`` runs), explained
after fresh statistics on 100,000 pending jobs, a few hundred of them with an expires_at.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text

from queuelog import queue
from queuelog.core.clock import utcnow
from queuelog.database.engine import dialect_name
from queuelog.extensions import db
from tests.support.plans import explain, fill_jobs, first_holding, scans_of_jobs

PENDING = 100_000


@pytest.fixture
def queue_with_some_expiring(app):
    with db.engine.begin() as conn:
        fill_jobs(conn, PENDING, 0)
        conn.execute(
            text("UPDATE jobs SET expires_at = :at WHERE id % 500 = 0"),
            {"at": (utcnow() - timedelta(minutes=1)).replace(tzinfo=None)},
        )
        conn.exec_driver_sql("ANALYZE")


def test_the_reaper_seeks_expired_jobs_by_their_index(queue_with_some_expiring):
    statement, parameters, _took = first_holding(lambda: queue.reap(dry_run=True), "expires_at <=")
    plan = explain(statement, parameters)
    print(f"\n[expiry plan, {dialect_name()}, {PENDING:,} pending]\n{plan}")

    assert "ix_jobs_pending_expiry" in plan
    assert scans_of_jobs(plan) == []


def test_the_reaper_expires_them_all(queue_with_some_expiring):
    assert len(queue.reap().expired) == PENDING // 500
