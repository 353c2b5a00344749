"""The runner stores and reads times exactly as SQLAlchemy's UTCDateTime does.

SQLite compares times as text, so a time the driver path writes must be the very text SQLAlchemy writes
for it, or a claim's ``run_at <= now`` would disagree with a page's query; and a job read on either path
must carry the same aware UTC datetime.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import insert, select

from queuelog import sql
from queuelog.database.transactions import write_transaction
from queuelog.models import Job
from queuelog.sql import Log, NewJobRow

jobs = Job.__table__

TIMES = {
    "microseconds": datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
    "whole-second": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    "year-before-1000": datetime(987, 6, 5, 4, 3, 2, tzinfo=UTC),
    "another-offset": datetime(2026, 6, 1, 12, 0, tzinfo=timezone(timedelta(hours=2))),
}


def _new_row(when: datetime) -> NewJobRow:
    return NewJobRow(
        type="email",
        payload="{}",
        priority=0,
        status="pending",
        retry_count=0,
        max_retries=3,
        stall_count=0,
        idempotency_key=None,
        request_digest="d",
        producer_key_id=None,
        producer="test",
        run_at=when,
        created_at=when,
        updated_at=when,
    )


@pytest.mark.parametrize("when", TIMES.values(), ids=TIMES.keys())
def test_a_time_is_stored_and_read_back_alike_on_both_paths(app, when):
    with write_transaction() as conn:
        [by_runner] = sql.insert_jobs(conn, [_new_row(when)], Log("enqueued", None, "test", when))
        by_core = conn.execute(insert(jobs).values(**_new_row(when)._asdict()).returning(*jobs.c)).one()
        # Without column types: what each path left in the table, as the driver hands it over.
        stored = conn.exec_driver_sql("SELECT run_at, created_at FROM jobs ORDER BY id").all()
        read_by_runner = sql.job(conn, by_core.id)
        read_by_core = conn.execute(select(jobs).where(jobs.c.id == by_runner.id)).one()

    assert stored[0] == stored[1]
    assert by_runner.run_at == by_core.run_at == when
    assert read_by_runner.run_at == read_by_core.run_at == when
    assert read_by_runner.run_at.tzinfo is UTC and read_by_core.run_at.tzinfo is UTC
