"""The database each test runs on: QUEUELOG_TEST_DB picks SQLite (a copy of a migrated file per test) or
PostgreSQL (the session's server, emptied per test); app_config is the settings every test app starts from.

QUEUELOG_TEST_PG_URL names a PostgreSQL server; without it a throwaway cluster is started from the machine's
/usr/lib/postgresql/*/bin for the session.
"""

from __future__ import annotations

import functools
import os
import shutil

import pytest
from sqlalchemy import create_engine, text

from queuelog import create_app
from queuelog.extensions import db
from tests.support import pg_sessions

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
    "push_secrets",
    "push_status",
]
#: Tables only PostgreSQL's layout has: the sums of closed days of history (migration a3c5e7f9b1d2).
POSTGRESQL_TABLES = ["closed_days", "closed_day_errors"]


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
        with pg_sessions.shown_on_failure(url):
            yield url
        return
    from tests.support.pg_cluster import throwaway_cluster

    with throwaway_cluster() as cluster, pg_sessions.shown_on_failure(cluster.url):
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
            # Partitions are emptied through their table (jobs, job_events: docs/storage.md).
            conn.execute(
                text(
                    "SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace"
                    " AND relkind IN ('r', 'p') AND NOT relispartition"
                )
            ).scalars()
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
