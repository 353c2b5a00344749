"""GET /metrics: who may read it, and that what it says matches the database and the traffic."""

from __future__ import annotations

import sqlite3
import struct
import threading
from collections import Counter as Tally
from datetime import timedelta

import pytest
from prometheus_client import mmap_dict, multiprocess
from sqlalchemy import func, select

from queuelog.core.clock import utcnow
from queuelog.extensions import db
from queuelog.models import Job, Priority
from tests.support.api import bearer
from tests.support.database import JOB_TYPES
from tests.support.metrics import scrape, value

jobs = Job.__table__
METRICS_TOKEN = "metrics-token-for-tests-0123456789"


def jobs_gauge(samples: dict) -> dict:
    """queuelog_jobs as {(status, type, priority): n}, without the zero series."""
    found = {}
    for (name, labels), number in samples.items():
        if name == "queuelog_jobs" and number:
            labels = dict(labels)
            found[(labels["status"], labels["type"], labels["priority"])] = number
    return found


def jobs_in_database() -> dict:
    with db.engine.connect() as conn:
        rows = conn.execute(
            select(jobs.c.status, jobs.c.type, jobs.c.priority, func.count()).group_by(
                jobs.c.status, jobs.c.type, jobs.c.priority
            )
        ).all()
    return {(status, job_type, Priority.label_of(priority)): count for status, job_type, priority, count in rows}


# --- who may read it ----------------------------------------------------------------------------


def test_metrics_without_credentials_is_401_problem(client):
    response = client.get("/metrics")
    assert response.status_code == 401
    assert response.content_type == "application/problem+json"
    assert response.get_json()["status"] == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("role", ["producer", "worker"])
def test_metrics_refuses_non_admin_keys_with_403(client, make_key, role):
    response = client.get("/metrics", headers=bearer(make_key(role)))
    assert response.status_code == 403
    assert response.content_type == "application/problem+json"


def test_metrics_refuses_an_unknown_bearer_with_401(client, app):
    app.config["METRICS_TOKEN"] = METRICS_TOKEN
    assert client.get("/metrics", headers=bearer(METRICS_TOKEN + "x")).status_code == 401
    assert client.get("/metrics", headers=bearer("ql_" + "A" * 43)).status_code == 401


def test_metrics_accepts_an_admin_key(client, admin):
    assert client.get("/metrics", headers=admin).status_code == 200


def test_metrics_accepts_the_configured_metrics_token(client, app):
    app.config["METRICS_TOKEN"] = METRICS_TOKEN
    scrape(client, bearer(METRICS_TOKEN))


def test_no_bearer_passes_as_the_metrics_token_when_none_is_configured(client, app):
    app.config["METRICS_TOKEN"] = None
    assert client.get("/metrics", headers=bearer("None")).status_code == 401
    assert client.get("/metrics", headers=bearer("")).status_code == 401


# --- gauges from the database ---------------------------------------------------------------------


def test_jobs_gauge_matches_the_database_as_jobs_move(client, admin, worker, producer, enqueue, claim):
    enqueue(type="email", priority="medium")
    enqueue(type="email")
    enqueue(type="report", priority="medium")
    doomed = enqueue(type="noop", max_retries=0)
    dropped = enqueue(type="resize-image")
    assert jobs_gauge(scrape(client, admin)) == jobs_in_database()

    first = claim()  # email, medium
    client.post(f"/jobs/{first['id']}/complete", json={"claim_token": first["claim_token"]}, headers=worker)
    second = claim(types=["noop"])
    assert second["id"] == doomed["id"]
    client.post(f"/jobs/{second['id']}/fail", json={"claim_token": second["claim_token"], "error": "x"}, headers=worker)
    client.post(f"/jobs/{dropped['id']}/cancel", headers=producer)
    claim(types=["report"])

    samples = scrape(client, admin)
    assert (
        jobs_gauge(samples)
        == jobs_in_database()
        == {
            ("completed", "email", "medium"): 1,
            ("pending", "email", "low"): 1,
            ("failed", "noop", "low"): 1,
            ("cancelled", "resize-image", "low"): 1,
            ("running", "report", "medium"): 1,
        }
    )
    # Every allowed combination is reported, as 0 when empty, so series never vanish.
    assert value(samples, "queuelog_jobs", status="running", type="email", priority="critical") == 0
    assert (
        "queuelog_jobs",
        frozenset({"status": "running", "type": "email", "priority": "critical"}.items()),
    ) in samples


def test_scrapes_during_traffic_parse_and_add_up(app, client, admin, producer, worker):
    """A thread enqueues, claims and completes while the main thread scrapes: every scrape parses, and its
    total lies between the number of jobs before and after it."""
    done = threading.Event()
    errors = []

    def traffic():
        with app.app_context():
            mover = app.test_client()
            try:
                for index in range(30):
                    assert mover.post("/jobs", json={"type": JOB_TYPES[index % 4]}, headers=producer).status_code == 201
                    if index % 2:
                        job = mover.post("/jobs/claim", headers=worker).get_json()
                        mover.post(
                            f"/jobs/{job['id']}/complete", json={"claim_token": job["claim_token"]}, headers=worker
                        )
            except Exception as error:  # reported below: an assert in a thread would be lost
                errors.append(error)
            finally:
                done.set()

    thread = threading.Thread(target=traffic)
    thread.start()
    scrapes = 0
    while not done.is_set() or scrapes == 0:
        before = sum(jobs_in_database().values())
        total = sum(jobs_gauge(scrape(client, admin)).values())
        after = sum(jobs_in_database().values())
        assert before <= total <= after
        scrapes += 1
    thread.join(timeout=60)
    assert not errors, errors
    assert jobs_gauge(scrape(client, admin)) == jobs_in_database()
    assert sum(jobs_in_database().values()) == 30


def test_oldest_pending_age_is_per_type_and_counts_only_claimable_jobs(client, admin, make_job):
    now = utcnow()
    make_job(type="report", run_at=now - timedelta(seconds=120), created_at=now - timedelta(seconds=120))
    make_job(type="report", run_at=now - timedelta(seconds=30), created_at=now - timedelta(seconds=30), priority=30)
    make_job(type="noop", run_at=now + timedelta(hours=1))  # scheduled: not claimable yet
    make_job(type="email", status="running", run_at=now - timedelta(hours=2))  # taken: not waiting
    samples = scrape(client, admin)
    assert 120 <= value(samples, "queuelog_oldest_pending_age_seconds", type="report") < 180
    assert value(samples, "queuelog_oldest_pending_age_seconds", type="noop") == 0
    assert value(samples, "queuelog_oldest_pending_age_seconds", type="email") == 0
    assert ("queuelog_oldest_pending_age_seconds", frozenset({"type": "resize-image"}.items())) in samples


def test_stalled_jobs_counts_running_jobs_whose_lease_expired(client, admin, make_job):
    now = utcnow()
    make_job(status="running", lease_expires_at=now - timedelta(seconds=5))
    make_job(status="running", lease_expires_at=now - timedelta(hours=1))
    make_job(status="running", lease_expires_at=now + timedelta(minutes=5))
    make_job(status="pending")
    assert value(scrape(client, admin), "queuelog_stalled_jobs") == 2


# --- counters and the histogram -------------------------------------------------------------------


def test_event_counters_count_each_state_change(client, admin, producer, worker, enqueue, claim, runner, make_key):
    before = scrape(client, admin)
    for _ in range(3):
        enqueue()
    done = claim()
    client.post(f"/jobs/{done['id']}/complete", json={"claim_token": done["claim_token"]}, headers=worker)
    again = claim()
    client.post(f"/jobs/{again['id']}/fail", json={"claim_token": again["claim_token"], "error": "e"}, headers=worker)
    gone = claim()
    client.post(
        f"/jobs/{gone['id']}/fail", json={"claim_token": gone["claim_token"], "retryable": False}, headers=worker
    )
    client.post(f"/jobs/{gone['id']}/retry", headers=admin)
    after = scrape(client, admin)

    expected = {
        "enqueued": 3,
        "claimed": 3,
        "completed": 1,
        "requeued": 1,
        "failed": 1,
        "retried": 1,
        "cancelled": 0,
        "reaped": 0,
    }
    changes = {
        event: value(after, f"queuelog_jobs_{event}_total") - value(before, f"queuelog_jobs_{event}_total")
        for event in expected
    }
    assert changes == expected


def test_rejected_requests_are_counted_by_reason(client, admin, producer, worker, enqueue):
    before = scrape(client, admin)
    client.get("/jobs")  # no key
    client.post("/jobs", json={"type": "email"}, headers=worker)  # wrong role
    client.get("/jobs/987654", headers=admin)  # no such job
    job = enqueue()
    client.post(f"/jobs/{job['id']}/cancel", headers=producer)
    client.post(f"/jobs/{job['id']}/cancel", headers=producer)  # already cancelled
    client.post("/jobs", json={"type": "email", "priority": "urgent"}, headers=producer)
    client.post("/jobs", data=b"x" * (2 * 1024 * 1024), content_type="application/json", headers=producer)
    after = scrape(client, admin)

    def added(reason):
        return value(after, "queuelog_rejected_requests_total", reason=reason) - value(
            before, "queuelog_rejected_requests_total", reason=reason
        )

    assert {
        reason: added(reason)
        for reason in (
            "unauthenticated",
            "forbidden",
            "not-found",
            "conflict",
            "validation-failed",
            "payload-too-large",
        )
    } == {
        "unauthenticated": 1,
        "forbidden": 1,
        "not-found": 1,
        "conflict": 1,
        "validation-failed": 1,
        "payload-too-large": 1,
    }


def test_request_latency_histogram_is_labelled_by_route_not_path(client, admin, producer, enqueue):
    before = scrape(client, admin)
    ids = [enqueue()["id"] for _ in range(3)]
    for job_id in ids:
        client.get(f"/jobs/{job_id}", headers=producer)
    after = scrape(client, admin)

    def count(route, method):
        name = "queuelog_request_duration_seconds_count"
        return value(after, name, route=route, method=method) - value(before, name, route=route, method=method)

    assert count("/jobs/<int:job_id>", "GET") == 3
    assert count("/jobs", "POST") == 3
    routes = {dict(labels).get("route") for name, labels in after if name.startswith("queuelog_request_duration")}
    assert not any(str(job_id) in (route or "") for route in routes for job_id in ids)
    # Buckets are cumulative and end at +Inf with the count.
    assert value(after, "queuelog_request_duration_seconds_bucket", route="/jobs", method="POST", le="+Inf") == value(
        after, "queuelog_request_duration_seconds_count", route="/jobs", method="POST"
    )


def test_every_documented_metric_is_exposed(client, admin):
    names = {name for name, _ in scrape(client, admin)}
    families = Tally(
        name.rsplit("_", 1)[0] if name.endswith(("_total", "_count", "_sum", "_bucket")) else name for name in names
    )
    for name in ("queuelog_jobs", "queuelog_oldest_pending_age_seconds", "queuelog_stalled_jobs"):
        assert name in names
    for event in (
        "enqueued",
        "claimed",
        "completed",
        "failed",
        "requeued",
        "reaped",
        "cancelled",
        "retried",
        "released",
        "quarantined",
    ):
        assert f"queuelog_jobs_{event}" in families, event


# --- reading the workers' counter files (gunicorn's multiprocess mode) ----------------------------


@pytest.fixture
def metrics_dir(tmp_path, monkeypatch):
    """This process scrapes as a gunicorn worker does: counters from the files of a PROMETHEUS_MULTIPROC_DIR,
    which holds one worker's file (written by prometheus-client itself) that has counted 7 enqueued jobs."""
    directory = tmp_path / "metrics"
    directory.mkdir()
    counts = mmap_dict.MmapedDict(str(directory / "counter_1234.db"))
    counts.write_value(
        mmap_dict.mmap_key(
            "queuelog_jobs_enqueued_total", "queuelog_jobs_enqueued_total", [], [], "Jobs added to the queue."
        ),
        7.0,
        0.0,
    )
    counts.close()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
    monkeypatch.setattr("queuelog.ops.metrics.multiprocess_mode", lambda: True)
    return directory


def test_a_counter_file_read_that_fails_once_is_read_again_and_the_scrape_answers_200(
    client, admin, metrics_dir, monkeypatch
):
    """A worker may be writing its file while another worker reads it: one failed read is not the answer."""
    read_file = mmap_dict.MmapedDict.read_all_values_from_file
    reads = []

    def torn_once(filename):
        reads.append(filename)
        if len(reads) == 1:
            raise struct.error("unpack_from requires a buffer of at least 4 bytes")
        return read_file(filename)

    monkeypatch.setattr(multiprocess.MmapedDict, "read_all_values_from_file", staticmethod(torn_once))
    assert value(scrape(client, admin), "queuelog_jobs_enqueued_total") == 7
    assert len(reads) == 2


def test_a_database_file_in_the_metrics_directory_is_not_read_as_counters(client, admin, metrics_dir):
    """PROMETHEUS_MULTIPROC_DIR pointed at instance/ holds queuelog.db too: it is not prometheus-client's."""
    with sqlite3.connect(metrics_dir / "queuelog.db") as database:
        database.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, payload TEXT)")
        database.executemany("INSERT INTO jobs (payload) VALUES (?)", [("x" * 500,)] * 50)
    database.close()
    assert value(scrape(client, admin), "queuelog_jobs_enqueued_total") == 7
