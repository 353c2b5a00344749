"""Retention runs inside the server (ops/retention.py): a step about once a minute, one process at a time, that
removes the finished jobs older than QUEUELOG_RETENTION and keeps the rest. On both databases."""

from __future__ import annotations

from datetime import timedelta

import pytest

from queuelog.core.clock import utcnow
from queuelog.ops import retention


@pytest.fixture
def config_overrides():
    return {"RETENTION": "7d"}


def test_a_retention_step_removes_a_finished_job_older_than_the_retention(client, admin, make_job):
    old = make_job(status="completed", updated_at=utcnow() - timedelta(days=10))
    done = retention.step(utcnow())
    assert done is not None and done.jobs >= 1
    assert client.get(f"/jobs/{old}", headers=admin).status_code == 404


def test_a_retention_step_keeps_recent_finished_jobs_and_every_live_one(client, admin, make_job):
    recent = make_job(status="failed", updated_at=utcnow() - timedelta(days=6))
    waiting = make_job(status="pending", updated_at=utcnow() - timedelta(days=30))
    retention.step(utcnow())
    assert client.get(f"/jobs/{recent}", headers=admin).status_code == 200
    assert client.get(f"/jobs/{waiting}", headers=admin).status_code == 200


def test_a_second_step_within_the_minute_is_left_to_the_process_that_took_the_first(make_job):
    now = utcnow()
    assert retention.step(now) is not None
    assert retention.step(now + timedelta(seconds=5)) is None
    assert retention.step(now + timedelta(seconds=retention.STEP_SECONDS)) is not None
