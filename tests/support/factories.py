"""Helpers that build and inspect state for the API tests: problems, key ids, event rows, raw updates.

They run inside the ``app`` fixture's application context and talk to the test database directly,
so a test can put a job in any state and then check what a request left behind.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import func, select, update

from queuelog.core.clock import parse_rfc3339, utcnow
from queuelog.extensions import db
from queuelog.models import ApiKey, Job, JobEvent

jobs = Job.__table__
events = JobEvent.__table__

PROBLEM_FIELDS = {"type", "title", "status", "detail"}


def assert_problem(response, status: int) -> dict:
    """Check an RFC 9457 problem response of ``status`` and return its body."""
    assert response.status_code == status, (response.status_code, response.data[:500])
    assert response.mimetype == "application/problem+json", response.headers.get("Content-Type")
    body = response.get_json(force=True)
    assert set(body) >= PROBLEM_FIELDS, body
    assert body["status"] == status
    assert all(isinstance(body[name], str) and body[name] for name in ("type", "title", "detail")), body
    text = response.get_data(as_text=True)
    assert "Traceback" not in text and 'File "' not in text, text
    return body


def pointers(response) -> set[str]:
    """The JSON pointers of a 422's ``errors`` list."""
    body = assert_problem(response, 422)
    return {item["pointer"] for item in body["errors"]}


def key_id(name: str) -> int:
    """The id of the API key called ``name`` (jobs record it as their producer)."""
    with db.engine.connect() as conn:
        return conn.execute(select(ApiKey.__table__.c.id).where(ApiKey.__table__.c.name == name)).scalar_one()


def set_job(job_id: int, **values) -> None:
    """Change columns of a job behind the queue's back (e.g. let its lease run out)."""
    with db.engine.begin() as conn:
        conn.execute(update(jobs).where(jobs.c.id == job_id).values(**values))


def event_rows(job_id: int) -> list:
    """The job's event rows as stored, oldest first."""
    with db.engine.connect() as conn:
        return conn.execute(select(events).where(events.c.job_id == job_id).order_by(events.c.id)).all()


def count_jobs(**where) -> int:
    """How many job rows match the given column values."""
    query = select(func.count()).select_from(jobs)
    for column, value in where.items():
        query = query.where(jobs.c[column] == value)
    with db.engine.connect() as conn:
        return conn.execute(query).scalar_one()


def expire_lease(job_id: int, seconds_ago: float = 1.0) -> None:
    """Make a running job's lease end ``seconds_ago`` in the past, as if its worker died."""
    set_job(job_id, lease_expires_at=utcnow() - timedelta(seconds=seconds_ago))


def when(text: str) -> datetime:
    """An RFC 3339 time from a response, as an aware datetime."""
    return parse_rfc3339(text)
