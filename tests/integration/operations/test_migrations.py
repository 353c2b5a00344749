"""Schema migrations: `flask --app app db upgrade` creates and upgrades the schema on an empty
database, is a no-op when run again, never loses data, and the migrations match the models.

Runs on the database QUEUELOG_TEST_DB selects: an empty SQLite file, or a new, empty PostgreSQL
database on the test cluster.
"""

from __future__ import annotations

import uuid

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, make_url, text

from queuelog.database.schema_upgrade import MIGRATIONS_DIR
from tests.support.api import bearer
from tests.support.database import POSTGRESQL_TABLES, TABLES, test_db_kind
from tests.support.scale import app_on, flask_command, read_rows

HEAD = ScriptDirectory(MIGRATIONS_DIR).get_current_head()


@pytest.fixture
def empty_database_url(request, tmp_path):
    """A database with nothing in it at all: a new SQLite file, or a newly created PostgreSQL database."""
    if test_db_kind() == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    server = request.getfixturevalue("postgres_server_url")
    name = f"migrations_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield make_url(server).set(database=name).render_as_string(hide_password=False)
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def _db(url: str, *args: str):
    """`flask --app app db ARGS` on ``url``; the app itself must not migrate, the command does."""
    return flask_command(
        {"QUEUELOG_DATABASE_URL": url, "QUEUELOG_AUTO_MIGRATE": "false", "QUEUELOG_SECRET_KEY": "migrations-test"},
        "db",
        *args,
    )


def _schema(url: str) -> dict:
    engine = create_engine(url)
    try:
        inspector = inspect(engine)
        return {
            table: sorted(index["name"] for index in _indexes(engine, inspector, table))
            for table in inspector.get_table_names()
            if table not in _partitions(engine)
        }
    finally:
        engine.dispose()


def _partitions(engine) -> set[str]:
    """The partitions of PostgreSQL's partitioned tables (docs/storage.md): parts of a table, not tables."""
    if engine.dialect.name != "postgresql":
        return set()
    with engine.connect() as conn:
        return set(conn.execute(text(_PARTITIONS)).scalars())


_PARTITIONS = "SELECT relname FROM pg_class WHERE relispartition AND relkind IN ('r', 'p')"
#: Indexes made on a partitioned table's partitions alone (the live jobs' claim indexes), primary keys aside.
_PARTITIONS_OWN_INDEXES = (
    "SELECT i.relname FROM pg_partition_tree(to_regclass(:table)) t"
    " JOIN pg_index x ON x.indrelid = t.relid JOIN pg_class i ON i.oid = x.indexrelid"
    " WHERE t.level = 1 AND NOT i.relispartition AND NOT x.indisprimary"
)


def _indexes(engine, inspector, table: str) -> list[dict]:
    """A table's indexes; a partitioned table's also those made on its partitions alone."""
    found = list(inspector.get_indexes(table))
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            found += [
                {"name": name} for name in conn.execute(text(_PARTITIONS_OWN_INDEXES), {"table": table}).scalars()
            ]
    return found


def _version(url: str) -> list[str]:
    return [row.version_num for row in read_rows(url, "SELECT version_num FROM alembic_version")]


def test_db_upgrade_creates_the_schema_on_an_empty_database(empty_database_url):
    assert _schema(empty_database_url) == {}
    upgraded = _db(empty_database_url, "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"-> {HEAD}" in upgraded.stderr  # Alembic's "Running upgrade ... -> HEAD" log line
    expected = set(TABLES) | (set(POSTGRESQL_TABLES) if test_db_kind() == "postgresql" else set())
    assert set(_schema(empty_database_url)) == expected | {"alembic_version"}
    assert _version(empty_database_url) == [HEAD]


def test_db_upgrade_again_changes_nothing(empty_database_url):
    assert _db(empty_database_url, "upgrade").returncode == 0
    before = _schema(empty_database_url)
    again = _db(empty_database_url, "upgrade")
    assert again.returncode == 0, again.stderr
    assert "Running upgrade" not in again.stderr
    assert _schema(empty_database_url) == before
    assert _version(empty_database_url) == [HEAD]


def test_an_app_started_on_a_database_with_data_keeps_the_data(empty_database_url):
    # Start from the oldest schema there is, with data in it, then start the app on it.
    first = ScriptDirectory(MIGRATIONS_DIR).get_base()
    assert _db(empty_database_url, "upgrade", first).returncode == 0
    with app_on(empty_database_url, AUTO_MIGRATE=False):
        from queuelog.auth.keys import create_key

        secret = create_key("old-producer", "producer")
    engine = create_engine(empty_database_url)
    with engine.begin() as conn:
        key_id = conn.execute(text("SELECT id FROM api_keys")).scalar_one()
        conn.execute(
            text(
                "INSERT INTO jobs (type, payload, priority, status, retry_count, max_retries, stall_count,"
                " producer_key_id, producer, run_at, created_at, updated_at) VALUES ('email',"
                " '{\"to\": \"a@example.com\"}', 10, 'pending', 0, 3, 0, :key, 'old-producer',"
                " '2026-01-01 00:00:00', '2026-01-01 00:00:00', '2026-01-01 00:00:00')"
            ),
            {"key": key_id},
        )
    engine.dispose()

    with app_on(empty_database_url) as app:
        response = app.test_client().get("/jobs/1", headers=bearer(secret))
    assert _version(empty_database_url) == [HEAD]
    assert response.status_code == 200
    assert (response.get_json()["payload"], response.get_json()["priority"]) == ({"to": "a@example.com"}, "medium")


def test_the_models_and_the_migrations_agree(empty_database_url):
    assert _db(empty_database_url, "upgrade").returncode == 0
    checked = _db(empty_database_url, "check")
    assert checked.returncode == 0, checked.stderr
    assert "No new upgrade operations detected" in checked.stdout + checked.stderr


def test_the_claim_index_is_partial_and_in_claim_order(empty_database_url):
    # `db check` cannot compare this index on SQLite (it is on an expression), so check it here.
    assert _db(empty_database_url, "upgrade").returncode == 0
    if test_db_kind() == "sqlite":
        sql = "SELECT sql AS definition FROM sqlite_master WHERE name = 'ix_jobs_claim_order'"
    else:
        sql = "SELECT indexdef AS definition FROM pg_indexes WHERE indexname = 'ix_jobs_claim_order'"
    [row] = read_rows(empty_database_url, sql)
    definition = " ".join(row.definition.replace('"', "").split()).lower()
    assert "(priority desc, fair_tag, id)" in definition
    assert "where" in definition and "status" in definition and "'pending'" in definition


def test_the_error_groups_migration_gives_jobs_that_already_failed_their_group(empty_database_url):
    assert _db(empty_database_url, "upgrade", "c4e8a1d2f7b3").returncode == 0
    engine = create_engine(empty_database_url)
    insert = (
        "INSERT INTO jobs (type, payload, priority, status, retry_count, max_retries, stall_count, error,"
        " run_at, created_at, updated_at) VALUES ('email', '{}', 0, :status, 0, 3, 0, :error,"
        " '2026-01-01 00:00:00', '2026-01-01 00:00:00', '2026-01-01 00:00:00')"
    )
    with engine.begin() as conn:
        for status, error in (
            ("failed", "Timeout after 30s talking to 10.0.0.7"),
            ("pending", "HTTP 503"),
            ("completed", None),
        ):
            conn.execute(text(insert), {"status": status, "error": error})
    engine.dispose()
    upgraded = _db(empty_database_url, "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    assert [
        (row.status, row.error_group)
        for row in read_rows(empty_database_url, "SELECT status, error_group FROM jobs ORDER BY id")
    ] == [("failed", "Timeout after <n>s talking to <ip>"), ("pending", "HTTP <n>"), ("completed", None)]
    assert "ix_jobs_error_groups" in _schema(empty_database_url)["jobs"]


def test_the_unique_scope_migration_gives_each_window_to_the_producer_whose_job_holds_it(empty_database_url):
    assert _db(empty_database_url, "upgrade", "e6b9d4f2a018").returncode == 0
    engine = create_engine(empty_database_url)
    job = (
        "INSERT INTO jobs (type, payload, priority, status, retry_count, max_retries, stall_count, run_at,"
        " created_at, updated_at, producer_key_id, unique_key) VALUES ('email', '{}', 0, 'pending', 0, 3, 0,"
        " '2026-01-01 00:00:00', '2026-01-01 00:00:00', '2026-01-01 00:00:00', :key_id, :unique_key)"
    )
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO api_keys (name, role, max_priority, prefix, digest, created_at) VALUES"
                " ('producer-a', 'producer', 1, 'ql_aaaa', 'digest-a', '2026-01-01 00:00:00')"
            )
        )
        conn.execute(text(job), {"key_id": 1, "unique_key": "invoice-42"})
        conn.execute(text(job), {"key_id": None, "unique_key": "keyless"})
        conn.execute(
            text(
                "INSERT INTO unique_slots (type, unique_key, job_id, enqueued_at) VALUES"
                " ('email', 'invoice-42', 1, '2026-01-01 00:00:00'),"
                " ('email', 'keyless', 2, '2026-01-01 00:00:00')"
            )
        )
        conn.execute(
            text("INSERT INTO type_settings (type, paused, updated_at) VALUES ('email', true, '2026-01-01 00:00:00')")
        )
    engine.dispose()
    upgraded = _db(empty_database_url, "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    assert [
        tuple(row) for row in read_rows(empty_database_url, "SELECT type, scope, unique_key, job_id FROM unique_slots")
    ] == [("email", 1, "invoice-42", 1)]
    # A type's settings as they were, its windows per producer.
    assert [tuple(row) for row in read_rows(empty_database_url, "SELECT type, unique_scope FROM type_settings")] == [
        ("email", "producer")
    ]


_JOB_INDEXES = (
    "SELECT t.relid::regclass::text AS part, pg_get_indexdef(x.indexrelid) AS definition"
    " FROM pg_partition_tree('jobs') t JOIN pg_index x ON x.indrelid = t.relid WHERE t.isleaf"
)


def _job_indexes_on(url: str, columns: str) -> dict[str, list[str]]:
    """Each partition of jobs: its indexes' definitions that list ``columns`` first (whole-word, in order)."""
    found: dict[str, list[str]] = {}
    for row in read_rows(url, _JOB_INDEXES):
        if f"btree ({columns})" in row.definition:
            found.setdefault(row.part, []).append(row.definition.split(f"btree ({columns})", 1)[1].strip())
    return found


@pytest.mark.skipif(test_db_kind() != "postgresql", reason="PostgreSQL's partitioned layout")
def test_the_live_tables_own_indexes_migration_keeps_every_job_and_the_indexes_of_history(empty_database_url):
    assert _db(empty_database_url, "upgrade", "a3c5e7f9b1d2").returncode == 0
    engine = create_engine(empty_database_url)
    with engine.begin() as conn:
        for status in ("completed", "failed", "pending", "running"):
            conn.execute(
                text(
                    "INSERT INTO jobs (type, payload, priority, status, retry_count, max_retries, stall_count,"
                    " run_at, created_at, updated_at) VALUES ('email', '{}', 0, :status, 0, 3, 0,"
                    " now() AT TIME ZONE 'utc', now() AT TIME ZONE 'utc', now() AT TIME ZONE 'utc')"
                ),
                {"status": status},
            )
    engine.dispose()
    jobs = "SELECT id, status FROM jobs ORDER BY id"
    before = [tuple(row) for row in read_rows(empty_database_url, jobs)]

    upgraded = _db(empty_database_url, "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    assert [tuple(row) for row in read_rows(empty_database_url, jobs)] == before
    for columns, live_condition in (
        ("producer_key_id, id", "WHERE (producer_key_id IS NOT NULL)"),
        ("status, id", "WHERE ((status)::text = ANY"),
    ):
        indexes = _job_indexes_on(empty_database_url, columns)
        # Every day of history keeps its index whole; the live table's is partial, a write by id cannot use it.
        assert set(indexes) == {row.part for row in read_rows(empty_database_url, _JOB_INDEXES)}
        history = [definitions for part, definitions in indexes.items() if part != "jobs_live"]
        assert history and all(definitions == [""] for definitions in history)
        [live] = indexes["jobs_live"]
        assert live.startswith(live_condition)

    downgraded = _db(empty_database_url, "downgrade", "a3c5e7f9b1d2")
    assert downgraded.returncode == 0, downgraded.stderr
    assert [tuple(row) for row in read_rows(empty_database_url, jobs)] == before
    assert _job_indexes_on(empty_database_url, "producer_key_id, id")["jobs_live"] == [""]
