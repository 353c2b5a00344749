"""The fixtures most tests use: the app on the test's database, its test client and CLI runner, API keys per role,
and jobs made straight in the database or through the API."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import insert

from queuelog import create_app
from queuelog.auth.keys import create_key
from queuelog.core.clock import utcnow
from queuelog.extensions import db
from queuelog.models import Job, JobEvent
from queuelog.queue import flow
from queuelog.waiting import wakeup
from tests.support.api import bearer
from tests.support.database import app_config
from tests.support.strict_json import StrictJSONAnswers


@pytest.fixture
def config_overrides(request):
    """Override in a test module, or parametrize it indirectly, to change settings.

    In a module marked ``shared_server``, the settings of the module's gunicorn.
    """
    if request.node.get_closest_marker("shared_server"):
        return request.getfixturevalue("shared_server_settings")
    return getattr(request, "param", {})


@pytest.fixture
def app(database_url, config_overrides):
    application = create_app(app_config(database_url, **config_overrides))
    # Every JSON answer of every test request must be strict RFC 8259 JSON (no Infinity, no NaN).
    application.wsgi_app = StrictJSONAnswers(application.wsgi_app)
    with application.app_context():
        yield application
        db.session.remove()
        db.engine.dispose()


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def runner(app):
    return app.test_cli_runner()


@pytest.fixture
def make_key(app):
    """make_key(role, name=None, max_priority=None, types=None) → the secret of a new key."""
    counter = iter(range(1, 10_000))

    def _make(
        role: str, name: str | None = None, max_priority: str | None = None, types: list[str] | None = None
    ) -> str:
        return create_key(name or f"{role}-{next(counter)}", role, max_priority, types)

    return _make


@pytest.fixture
def producer(make_key):
    """Headers of a producer key (ceiling: medium)."""
    return bearer(make_key("producer", "producer-a"))


@pytest.fixture
def other_producer(make_key):
    return bearer(make_key("producer", "producer-b"))


@pytest.fixture
def worker(make_key):
    return bearer(make_key("worker", "worker-a"))


@pytest.fixture
def other_worker(make_key):
    return bearer(make_key("worker", "worker-b"))


@pytest.fixture
def admin(make_key):
    return bearer(make_key("admin", "admin-a"))


@pytest.fixture
def make_job(app):
    """Build a job row straight in the database, in any state: make_job(status='running', ...). A pending one
    is announced as the queue announces its own."""

    def _make(**fields) -> int:
        now = utcnow()
        status = fields.pop("status", "pending")
        values = {
            "type": "email",
            "payload": json.dumps(fields.pop("payload", {})),
            "priority": 0,
            "status": status,
            "retry_count": 0,
            "max_retries": 3,
            "stall_count": 0,
            "run_at": now,
            "created_at": now,
            "updated_at": now,
        }
        if status == "running":
            values.update(
                worker_id="worker-a",
                claim_token="token-a",
                claimed_at=now,
                heartbeat_at=now,
                lease_expires_at=now + timedelta(seconds=300),
            )
        values.update(fields)
        with db.engine.begin() as conn:
            job_id = conn.execute(insert(Job.__table__).values(**values).returning(Job.__table__.c.id)).scalar_one()
            conn.execute(
                insert(JobEvent.__table__).values(
                    job_id=job_id, event="enqueued", to_status=status, actor="test", attempt=0, at=now
                )
            )
            if status == "pending":
                # Announced, as the queue announces the jobs it makes pending: waiting claims wake, and on
                # PostgreSQL the claims' floor takes in a turn written by hand (waiting/claim_floor.py).
                wakeup.jobs_ready(conn)
        return job_id

    return _make


@pytest.fixture
def read_job(app):
    """The job's row as stored, for checking what a request left behind."""

    def _read(job_id: int):
        with db.engine.connect() as conn:
            return conn.execute(Job.__table__.select().where(Job.__table__.c.id == job_id)).first()

    return _read


@pytest.fixture
def enqueue(client, producer):
    """enqueue(**body) → the created job's JSON, asserting the 201."""

    def _enqueue(headers: dict | None = None, **body):
        body.setdefault("type", "email")
        response = client.post("/jobs", json=body, headers=headers or producer)
        assert response.status_code == 201, response.get_json()
        return response.get_json()

    return _enqueue


@pytest.fixture
def claim(client, worker):
    """claim(**body) → the claimed job's JSON (with claim_token), asserting the 200."""

    def _claim(headers: dict | None = None, **body):
        response = client.post("/jobs/claim", json=body, headers=headers or worker)
        assert response.status_code == 200, (response.status_code, response.data)
        return response.get_json()

    return _claim


@pytest.fixture
def run(client, claim, worker):
    """run(job_id, result=None, fail=False) → claims that very job (it must be the only claimable one) and
    completes it (or fails it for good)."""

    def _run(job_id: int, result: dict | None = None, fail: bool = False) -> dict:
        job = claim()
        assert job["id"] == job_id, job
        if fail:
            response = client.post(
                f"/jobs/{job_id}/fail",
                json={"claim_token": job["claim_token"], "error": "boom", "retryable": False},
                headers=worker,
            )
        else:
            response = client.post(
                f"/jobs/{job_id}/complete", json={"claim_token": job["claim_token"], "result": result}, headers=worker
            )
        assert response.status_code == 200, response.get_json()
        return job

    return _run


@pytest.fixture
def fresh_flow_settings():
    """No process copy of the type settings before and after the test: the database is new, the copy is not."""
    flow.forget_cached()
    yield
    flow.forget_cached()
