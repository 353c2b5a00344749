"""Building event histories and rollup rows at chosen times, for the type rollups' tests."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from sqlalchemy import insert, select

from queuelog.core.clock import utcnow
from queuelog.extensions import db
from queuelog.models import Job, JobEvent, RollupMark, TypeRollup
from queuelog.queue import rollups
from queuelog.queue.rollups import MINUTE, period_of

table = TypeRollup.__table__


def minute_ago(minutes: int, now: datetime | None = None) -> datetime:
    """The start of the minute ``minutes`` before ``now``'s."""
    return rollups.as_time(period_of(now or utcnow(), MINUTE) - minutes * MINUTE)


def job_with_events(
    job_type: str, created: datetime, *events: tuple[str, str, datetime], run_at: datetime | None = None
) -> int:
    """A job of ``job_type`` enqueued at ``created`` (due at ``run_at``, else then), with its ``enqueued``
    event and then ``events`` (event, to_status, at) in that order, as the queue would log them."""
    last_status = events[-1][1] if events else "pending"
    with db.engine.begin() as conn:
        job_id = conn.execute(
            insert(Job.__table__)
            .values(
                type=job_type,
                payload=json.dumps({}),
                priority=0,
                status=last_status,
                retry_count=0,
                max_retries=3,
                stall_count=0,
                run_at=run_at or created,
                created_at=created,
                updated_at=created,
            )
            .returning(Job.__table__.c.id)
        ).scalar_one()
        for event, to_status, at in (("enqueued", "pending", created), *events):
            conn.execute(
                insert(JobEvent.__table__).values(
                    job_id=job_id, event=event, to_status=to_status, actor="test", attempt=0, at=at
                )
            )
    return job_id


def run_job(job_type: str, enqueued: datetime, wait: timedelta, run: timedelta, outcome: str = "completed") -> int:
    """A job enqueued at ``enqueued``, claimed ``wait`` later, completed (or failed for good) ``run`` after."""
    claimed = enqueued + wait
    return job_with_events(job_type, enqueued, ("claimed", "running", claimed), (outcome, outcome, claimed + run))


def store(span: int, metric: str, at: datetime, n: int, job_type: str = "email", bucket: int = 0) -> None:
    """A rollup row as the rollup step leaves it (the tests of what the pages read from it)."""
    with db.engine.begin() as conn:
        conn.execute(
            insert(table).values(
                span=span, metric=metric, period=period_of(at, span), type=job_type, bucket=bucket, shard=0, n=n
            )
        )


def mark_rolled(through: datetime | None = None) -> None:
    """Set the rollup mark: every minute before ``through`` (default: every closed one) is rolled up."""
    seconds = rollups.closed_before(utcnow()) if through is None else period_of(through, MINUTE)
    with db.engine.begin() as conn:
        conn.execute(RollupMark.__table__.delete())
        conn.execute(insert(RollupMark.__table__).values(name=rollups.MARK, through=seconds))


def stored_rows(span: int = MINUTE) -> dict[tuple[int, str, str, int], int]:
    """(period, metric, type, bucket) → n, every row of ``span``."""
    with db.engine.connect() as conn:
        return {
            (period, metric, job_type, bucket): n
            for period, metric, job_type, bucket, n in conn.execute(
                select(table.c.period, table.c.metric, table.c.type, table.c.bucket, table.c.n).where(
                    table.c.span == span
                )
            )
        }


def totals(span: int = MINUTE) -> dict[tuple[str, str], int]:
    """(metric, type) → jobs, over every period and bucket of ``span``."""
    found: dict[tuple[str, str], int] = {}
    for (_period, metric, job_type, _bucket), n in stored_rows(span).items():
        found[(metric, job_type)] = found.get((metric, job_type), 0) + n
    return found
