"""Fixtures: the app on a real database file (or a real PostgreSQL), API keys per role, job factories.

QUEUELOG_TEST_DB picks the database for the whole run: ``sqlite`` (default) or ``postgresql``.
For PostgreSQL, QUEUELOG_TEST_PG_URL names a server; without it a throwaway cluster is started
from the machine's /usr/lib/postgresql/*/bin for the session.
"""
from __future__ import annotations

import json
import os
from datetime import timedelta

import pytest
from sqlalchemy import create_engine, insert, text

from queuelog import create_app
from queuelog.clock import utcnow
from queuelog.extensions import db
from queuelog.keys import create_key
from queuelog.models import Job, JobEvent
from tests.support.api import bearer
from tests.support.strict_json import StrictJSONAnswers

# Fixtures kept beside their helpers, registered here once so that no test module imports a fixture:
# tests.support.server - a failed test's report shows the log of every gunicorn it started (running_server);
# tests.support.ui - the admin pages' account, signed-in client and own-app-context requests;
# tests.worker_apps.harness - a real gunicorn and real workers for the modules marked shared_server.
pytest_plugins = ["tests.support.server", "tests.support.ui", "tests.worker_apps.harness"]

JOB_TYPES = ["email", "report", "noop", "resize-image"]
TABLES = ["job_dependencies", "job_events", "jobs", "enqueue_ledger", "api_keys", "admin_sessions", "users",
          "login_attempts", "type_settings", "type_changes", "type_claims", "unique_slots", "schedules",
          "type_rollups"]


def pytest_report_header(config):
    return f"queuelog database: {test_db_kind()}"


def test_db_kind() -> str:
    kind = os.environ.get("QUEUELOG_TEST_DB", "sqlite").lower()
    if kind not in {"sqlite", "postgresql"}:
        raise pytest.UsageError("QUEUELOG_TEST_DB must be sqlite or postgresql")
    return kind


test_db_kind.__test__ = False  # a helper, not a test


@pytest.fixture(scope="session")
def postgres_server_url():
    """A PostgreSQL server URL for the session (only used when QUEUELOG_TEST_DB=postgresql)."""
    url = os.environ.get("QUEUELOG_TEST_PG_URL")
    if url:
        yield url
        return
    from tests.support.pg_cluster import throwaway_cluster

    with throwaway_cluster() as cluster:
        yield cluster.url


@pytest.fixture
def database_url(request, tmp_path):
    """A fresh, empty database for one test: a new SQLite file, or a wiped PostgreSQL database.

    In a module marked ``shared_server``, the database of the module's gunicorn, emptied
    (tests/worker_apps/harness.py).
    """
    if request.node.get_closest_marker("shared_server"):
        yield request.getfixturevalue("emptied_shared_database_url")
        return
    if test_db_kind() == "sqlite":
        yield f"sqlite:///{tmp_path / 'queuelog.db'}"
        return
    server_url = request.getfixturevalue("postgres_server_url")
    _wipe_postgres(server_url)
    yield server_url


def _wipe_postgres(url: str) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            present = [t for t in TABLES if conn.execute(text("SELECT to_regclass(:t)"), {"t": t}).scalar()]
            if present:
                conn.execute(text(f"TRUNCATE {', '.join(present)} RESTART IDENTITY CASCADE"))
    finally:
        engine.dispose()


def app_config(database_url: str, **overrides) -> dict:
    config = {
        "TESTING": True,
        "DATABASE_URL": database_url,
        "JOB_TYPES": JOB_TYPES,
        "SECRET_KEY": "test-secret-key",
        "RETRY_BACKOFF_BASE": 0,
        "LOG_FORMAT": "text",
    }
    config.update(overrides)
    return config


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

    def _make(role: str, name: str | None = None, max_priority: str | None = None,
              types: list[str] | None = None) -> str:
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
    """Build a job row straight in the database, in any state: make_job(status='running', ...)."""

    def _make(**fields) -> int:
        now = utcnow()
        status = fields.pop("status", "pending")
        values = {
            "type": "email", "payload": json.dumps(fields.pop("payload", {})), "priority": 0,
            "status": status, "retry_count": 0, "max_retries": 3, "stall_count": 0,
            "run_at": now, "created_at": now, "updated_at": now,
        }
        if status == "running":
            values.update(worker_id="worker-a", claim_token="token-a", claimed_at=now,
                          heartbeat_at=now, lease_expires_at=now + timedelta(seconds=300))
        values.update(fields)
        with db.engine.begin() as conn:
            job_id = conn.execute(insert(Job.__table__).values(**values).returning(Job.__table__.c.id)).scalar_one()
            conn.execute(insert(JobEvent.__table__).values(
                job_id=job_id, event="enqueued", to_status=status, actor="test", attempt=0, at=now))
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

