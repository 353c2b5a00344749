"""A heartbeat renews the lease without touching an index (a HOT update on PostgreSQL), and still shows as the
job's last change: the API's and the pages' ``updated_at`` is the later of its last move and last heartbeat."""

from __future__ import annotations

import html
import re
import time
from datetime import datetime, timedelta

import pytest
from sqlalchemy import text

from queuelog.core.clock import utcnow
from queuelog.extensions import db
from tests.support.database import test_db_kind
from tests.support.table_stats import updates_of
from tests.support.ui import text_of

on_postgresql = pytest.mark.skipif(
    test_db_kind() != "postgresql", reason="HOT updates and storage settings are PostgreSQL's"
)

HEARTBEATS = 20


def when(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def heartbeat(client, worker, job: dict):
    response = client.post(f"/jobs/{job['id']}/heartbeat", json={"claim_token": job["claim_token"]}, headers=worker)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def test_a_heartbeats_answer_gives_its_time_as_the_jobs_updated_at(client, worker, enqueue, claim):
    enqueue()
    job = claim()
    time.sleep(0.01)  # the heartbeat's time must differ from the claim's
    beat = heartbeat(client, worker, job)
    assert beat["updated_at"] == beat["heartbeat_at"]
    assert when(beat["updated_at"]) > when(job["updated_at"])


def test_a_running_jobs_updated_at_is_its_last_heartbeat(client, worker, admin, enqueue, claim):
    enqueue()
    job = claim()
    time.sleep(0.01)
    beat = heartbeat(client, worker, job)
    shown = client.get(f"/jobs/{job['id']}", headers=admin).get_json()
    assert shown["updated_at"] == beat["heartbeat_at"]


def test_a_finished_jobs_updated_at_is_when_it_finished(client, worker, admin, enqueue, claim):
    enqueue()
    job = claim()
    heartbeat(client, worker, job)
    time.sleep(0.01)
    done = client.post(f"/jobs/{job['id']}/complete", json={"claim_token": job["claim_token"]}, headers=worker)
    shown = client.get(f"/jobs/{job['id']}", headers=admin).get_json()
    assert shown["updated_at"] == shown["completed_at"] == done.get_json()["completed_at"]
    assert when(shown["updated_at"]) > when(shown["heartbeat_at"])


@pytest.mark.usefixtures("requests_in_their_own_app_context")
def test_the_job_page_shows_the_last_heartbeat_as_updated(signed_in, make_job):
    now = utcnow().replace(microsecond=0)
    job_id = make_job(status="running", updated_at=now - timedelta(hours=1), heartbeat_at=now)
    body = html.unescape(text_of(signed_in.get(f"/admin/jobs/{job_id}")))
    shown = re.search(r"<dt>updated</dt><dd>([^<]+) UTC", body)
    assert shown and shown.group(1) == f"{now:%Y-%m-%d %H:%M:%S}", body


@on_postgresql
def test_every_heartbeat_is_a_hot_update(client, worker, enqueue, claim):
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM jobs")  # earlier tests' dead rows gone: the job's page has its free room
    enqueue()
    job = claim()
    db.session.remove()
    updated, hot = updates_of(db.engine)
    for _ in range(HEARTBEATS):
        heartbeat(client, worker, job)
    db.session.remove()
    assert updates_of(db.engine) == (updated + HEARTBEATS, hot + HEARTBEATS)


@on_postgresql
def test_the_tables_that_churn_carry_their_storage_settings(app):
    # The live jobs' table, and today's day of events (docs/storage.md: on PostgreSQL both are partitions).
    today = f"job_events_{utcnow():%Y%m%d}"
    with db.engine.connect() as conn:
        options = dict(
            conn.execute(
                text(
                    "SELECT relname, reloptions FROM pg_class"
                    " WHERE relkind = 'r' AND (relname IN ('jobs_live', 'type_claims') OR relname LIKE :today || '%')"
                ),
                {"today": today},
            ).all()
        )
    assert set(options["jobs_live"]) == {
        "fillfactor=80",
        "autovacuum_vacuum_scale_factor=0.0",
        "autovacuum_vacuum_threshold=500",
        "autovacuum_vacuum_insert_scale_factor=0.0",
        "autovacuum_vacuum_insert_threshold=1000",
        "autovacuum_analyze_scale_factor=0.0",
        "autovacuum_analyze_threshold=1000",
    }
    [events_today] = [settings for name, settings in options.items() if name.startswith(today)]
    assert set(events_today) == {"autovacuum_vacuum_insert_scale_factor=0.02"}
    assert set(options["type_claims"]) == {"autovacuum_vacuum_scale_factor=0.0", "autovacuum_vacuum_threshold=500"}
