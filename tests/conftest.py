"""Fixtures: the app on a real database file (or a real PostgreSQL), API keys per role, job factories.

QUEUELOG_TEST_DB picks the database for the whole run: ``sqlite`` (default) or ``postgresql``.
For PostgreSQL, QUEUELOG_TEST_PG_URL names a server; without it a throwaway cluster is started
from the machine's /usr/lib/postgresql/*/bin for the session.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from datetime import timedelta

import pytest
from sqlalchemy import create_engine, insert, text

from queuelog import create_app
from queuelog.auth.keys import create_key
from queuelog.core.clock import utcnow
from queuelog.extensions import db
from queuelog.models import Job, JobEvent
from tests.support.api import bearer
from tests.support.strict_json import StrictJSONAnswers

# Fixtures kept beside their helpers, registered here once so that no test module imports a fixture:
# tests.support.server - a failed test's report shows the log of every gunicorn it started (running_server);
# tests.support.ui - the admin pages' account, signed-in client and own-app-context requests;
# tests.worker_apps.harness - a real gunicorn and real workers for the modules marked shared_server.
pytest_plugins = ["tests.support.server", "tests.support.ui", "tests.worker_apps.harness"]

JOB_TYPES = ["email", "report", "noop", "resize-image"]
TABLES = [
    "job_dependencies",
    "job_events",
    "jobs",
    "enqueue_ledger",
    "api_keys",
    "admin_sessions",
    "users",
    "login_attempts",
    "type_settings",
    "type_changes",
    "type_claims",
    "unique_slots",
    "schedules",
    "worker_processes",
    "type_rollups",
    "rollup_marks",
    "type_settings_version",
]


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


@pytest.fixture(scope="session")
def migrated_sqlite_file(tmp_path_factory):
    """A SQLite file at the schema's head, made once per run. Each test's database starts as a copy of it:
    migrating a fresh file took a third of a second a test, most of the SQLite run's set-up time."""
    path = tmp_path_factory.mktemp("migrated") / "queuelog.db"
    made = create_app(app_config(f"sqlite:///{path}"))
    with made.app_context():
        db.engine.dispose()  # the last connection to close checkpoints the WAL into the file
    leftovers = [p.name for p in path.parent.iterdir() if p.name.endswith(("-wal", "-journal"))]
    assert not leftovers, f"the migrated SQLite file left {leftovers} beside it: a copy of the file would miss them"
    return path


@pytest.fixture
def database_url(request, tmp_path):
    """A fresh database at the schema's head, with no rows, for one test: a copy of a migrated SQLite file,
    or the session's PostgreSQL database emptied.

    In a module marked ``shared_server``, the database of the module's gunicorn, emptied
    (tests/worker_apps/harness.py).
    """
    if request.node.get_closest_marker("shared_server"):
        yield request.getfixturevalue("emptied_shared_database_url")
        return
    if test_db_kind() == "sqlite":
        path = tmp_path / "queuelog.db"
        shutil.copyfile(request.getfixturevalue("migrated_sqlite_file"), path)
        yield f"sqlite:///{path}"
        return
    server_url = request.getfixturevalue("postgres_server_url")
    _wipe_postgres(server_url)
    yield server_url


#: application_name of the connection that empties PostgreSQL between tests (not a server's: counts skip it).
WIPING_CONNECTION = "queuelog-tests-wipe"
#: Above this many rows in a table, TRUNCATE empties it faster than DELETE (and leaves no dead rows behind).
_DELETE_AT_MOST = 20_000


def _wipe_postgres(url: str) -> None:
    """Empty every table of the app and restart its id sequences.

    A test leaves a few rows: DELETE, children first, takes ~4 ms where TRUNCATE of the 13 tables took
    ~100 ms (new files for every table and index), a fifth of the PostgreSQL run. After the fills of the
    plan tests (100,000 jobs and more) TRUNCATE is the faster one.
    """
    with _wiping_engine(url).begin() as conn:
        present = set(
            conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")).scalars()
        )
        present.discard("alembic_version")
        # Children before parents: the models' foreign keys give the order.
        tables = [t.name for t in reversed(db.metadata.sorted_tables) if t.name in present]
        if not present:
            return
        if set(tables) != present or _many_rows(conn, [t for t in ("job_events", "jobs") if t in present]):
            conn.execute(text(f"TRUNCATE {', '.join(sorted(present))} RESTART IDENTITY CASCADE"))
            return
        for table in tables:
            conn.execute(text(f"DELETE FROM {table}"))
        # setval, not ALTER SEQUENCE … RESTART: that one gives the sequence a new file, as TRUNCATE does.
        conn.execute(
            text(
                "SELECT setval(format('%I', sequencename)::regclass, 1, false) FROM pg_sequences "
                "WHERE schemaname = current_schema()"
            )
        )


@functools.cache
def _wiping_engine(url: str):
    """One engine (and pooled connection) per server for the run's wipes: a new connection each time cost a
    PostgreSQL backend start per test."""
    return create_engine(
        url,
        pool_size=1,
        max_overflow=0,
        pool_pre_ping=True,  # a test may restart the server
        connect_args={"application_name": WIPING_CONNECTION},
    )


def _many_rows(conn, tables: list[str]) -> bool:
    return any(
        conn.execute(text(f"SELECT count(*) FROM (SELECT 1 FROM {table} LIMIT {_DELETE_AT_MOST + 1}) t")).scalar()
        > _DELETE_AT_MOST
        for table in tables
    )


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
    """Build a job row straight in the database, in any state: make_job(status='running', ...)."""

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
