"""`flask purge`: finished jobs older than the retention go, with their events; live jobs never do."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from queuelog.core.clock import utcnow
from queuelog.extensions import db
from queuelog.models import Job, JobEvent

jobs = Job.__table__
events = JobEvent.__table__


def ago(**kw):
    return utcnow() - timedelta(**kw)


def existing(ids) -> set[int]:
    with db.engine.connect() as conn:
        return set(conn.execute(select(jobs.c.id).where(jobs.c.id.in_(list(ids)))).scalars())


def events_of(ids) -> int:
    with db.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(events).where(events.c.job_id.in_(list(ids)))).scalar()


@pytest.fixture
def old_and_new(make_job):
    """Jobs of every status, some last changed 30 days ago, some an hour ago."""
    made = {}
    for status in ("pending", "running", "completed", "failed", "cancelled"):
        made[(status, "old")] = make_job(status=status, updated_at=ago(days=30), created_at=ago(days=31))
        made[(status, "new")] = make_job(status=status, updated_at=ago(hours=1))
    return made


def test_purge_deletes_finished_jobs_older_than_the_cutoff_and_their_events(runner, old_and_new):
    result = runner.invoke(args=["purge", "--older-than", "7d"])
    assert result.exit_code == 0, result.output
    assert result.output == "purged 3 jobs (3 events)\n"
    purged = {old_and_new[(s, "old")] for s in ("completed", "failed", "cancelled")}
    assert existing(old_and_new.values()) == set(old_and_new.values()) - purged
    assert events_of(purged) == 0


def test_purge_never_deletes_pending_or_running_jobs_however_old(runner, make_job):
    live = [make_job(status="pending", updated_at=ago(days=400)), make_job(status="running", updated_at=ago(days=400))]
    result = runner.invoke(args=["purge", "--older-than", "1s"])
    assert result.output == "purged 0 jobs (0 events)\n"
    assert existing(live) == set(live)


def test_purge_status_option_limits_what_is_deleted(runner, old_and_new):
    result = runner.invoke(args=["purge", "--older-than", "7d", "--status", "failed,cancelled"])
    assert result.output == "purged 2 jobs (2 events)\n"
    assert old_and_new[("completed", "old")] in existing(old_and_new.values())


def test_purge_older_than_keeps_younger_jobs(runner, old_and_new):
    result = runner.invoke(args=["purge", "--older-than", "45d"])
    assert result.output == "purged 0 jobs (0 events)\n"
    result = runner.invoke(args=["purge", "--older-than", "30m", "--status", "completed"])
    assert result.output == "purged 2 jobs (2 events)\n"


@pytest.mark.parametrize("duration, seconds", [("30s", 30), ("15m", 900), ("12h", 43200), ("7d", 604800)])
def test_purge_durations_use_s_m_h_d_units(runner, make_job, duration, seconds):
    older = make_job(status="completed", updated_at=ago(seconds=seconds + 5))
    younger = make_job(status="completed", updated_at=ago(seconds=seconds - 5))
    assert runner.invoke(args=["purge", "--older-than", duration]).output == "purged 1 jobs (1 events)\n"
    assert existing([older, younger]) == {younger}


def test_purge_defaults_to_the_configured_retention(app, runner, make_job):
    app.config["RETENTION"] = "2h"
    older = make_job(status="completed", updated_at=ago(hours=3))
    younger = make_job(status="completed", updated_at=ago(hours=1))
    assert runner.invoke(args=["purge"]).output == "purged 1 jobs (1 events)\n"
    assert existing([older, younger]) == {younger}


@pytest.mark.parametrize("duration", ["7x", "-1d", "seven days", "1.5h", "d", ""])
def test_purge_refuses_a_bad_duration(runner, make_job, duration):
    kept = make_job(status="completed", updated_at=ago(days=30))
    result = runner.invoke(args=["purge", "--older-than", duration])
    assert result.exit_code != 0
    assert "--older-than" in result.output and "duration" in result.output
    assert existing([kept]) == {kept}


def test_purge_refuses_a_bad_configured_retention(app, runner):
    app.config["RETENTION"] = "forever"
    result = runner.invoke(args=["purge"])
    assert result.exit_code != 0 and "QUEUELOG_RETENTION" in result.output


@pytest.mark.parametrize("status", ["pending", "running", "completed,running", "done", ","])
def test_purge_refuses_statuses_that_are_not_finished(runner, make_job, status):
    live = make_job(status="running", updated_at=ago(days=30))
    result = runner.invoke(args=["purge", "--older-than", "1d", "--status", status])
    assert result.exit_code != 0
    assert "--status" in result.output
    assert existing([live]) == {live}


def test_purge_works_through_many_small_batches(runner, make_job):
    old = [make_job(status="completed", updated_at=ago(days=10)) for _ in range(23)]
    result = runner.invoke(args=["purge", "--older-than", "7d", "--batch", "5"])
    assert result.output == "purged 23 jobs (23 events)\n"
    assert existing(old) == set()


def test_a_purged_jobs_idempotency_key_can_be_used_again(client, producer, runner, enqueue, claim, worker):
    first = enqueue(type="email", idempotency_key="invoice-42")
    job = claim()
    client.post(f"/jobs/{job['id']}/complete", json={"claim_token": job["claim_token"]}, headers=worker)
    replay = client.post("/jobs", json={"type": "email", "idempotency_key": "invoice-42"}, headers=producer)
    assert replay.status_code == 200 and replay.get_json()["id"] == first["id"]
    with db.engine.begin() as conn:
        conn.execute(update(jobs).where(jobs.c.id == first["id"]).values(updated_at=ago(days=8)))

    assert runner.invoke(args=["purge"]).output == "purged 1 jobs (3 events)\n"
    again = client.post("/jobs", json={"type": "email", "idempotency_key": "invoice-42"}, headers=producer)
    assert again.status_code == 201  # a new job, not a replay of the purged one
    assert again.get_json()["status"] == "pending"


def test_a_new_job_never_reuses_a_purged_jobs_id(client, runner, enqueue, claim, worker):
    purged = enqueue(type="email")
    job = claim()
    client.post(f"/jobs/{job['id']}/complete", json={"claim_token": job["claim_token"]}, headers=worker)
    with db.engine.begin() as conn:
        conn.execute(update(jobs).where(jobs.c.id == purged["id"]).values(updated_at=ago(days=8)))
    assert runner.invoke(args=["purge"]).output.startswith("purged 1 jobs")

    # A link to the purged job (an alert, a log line) must not lead to somebody else's job.
    assert enqueue(type="email")["id"] > purged["id"]


def test_purge_under_load_never_loses_a_live_job(app, runner, make_job, producer, worker, admin):
    """While purge deletes old finished jobs in tiny batches, a thread enqueues, claims and completes new
    jobs and an admin retries old failed ones. Every job the thread made, and every job whose retry
    succeeded (it is pending again), must survive."""
    old_completed = [make_job(status="completed", updated_at=ago(days=10)) for _ in range(120)]
    old_failed = [make_job(status="failed", updated_at=ago(days=10)) for _ in range(40)]
    old_live = [make_job(status=s, updated_at=ago(days=10)) for s in ("pending", "running") for _ in range(10)]
    made, revived, errors = [], [], []
    started = threading.Event()

    def traffic():
        with app.app_context():
            client = app.test_client()
            try:
                started.set()
                for index in range(40):
                    made.append(client.post("/jobs", json={"type": "noop"}, headers=producer).get_json()["id"])
                    job = client.post("/jobs/claim", json={"types": ["noop"]}, headers=worker).get_json()
                    if index % 3:
                        client.post(
                            f"/jobs/{job['id']}/complete", json={"claim_token": job["claim_token"]}, headers=worker
                        )
                    answer = client.post(f"/jobs/{old_failed[index]}/retry", headers=admin)
                    if answer.status_code == 200:
                        revived.append(old_failed[index])
                    else:  # purged just before: the job is gone, so the retry finds nothing
                        assert answer.status_code in (404, 409), answer.status_code
            except Exception as error:  # reported below: an assert in a thread would be lost
                errors.append(error)

    thread = threading.Thread(target=traffic)
    thread.start()
    started.wait(10)
    result = runner.invoke(args=["purge", "--older-than", "7d", "--batch", "3"])
    thread.join(timeout=60)
    assert not errors, errors
    assert result.exit_code == 0, result.output
    assert existing(old_completed) == set()
    assert existing(made) == set(made)
    assert existing(old_live) == set(old_live)
    assert set(revived) <= existing(old_failed)
    with db.engine.connect() as conn:
        statuses = dict(conn.execute(select(jobs.c.id, jobs.c.status).where(jobs.c.id.in_(revived))).all())
    assert set(statuses.values()) <= {"pending"}
    # Nothing the purge deleted was live, and it reports exactly what it deleted.
    purged = len(old_completed) + len(old_failed) - len(revived)
    # stdout only: the thread's request and state-change log lines go to stderr meanwhile.
    assert result.stdout == f"purged {purged} jobs ({purged} events)\n"
