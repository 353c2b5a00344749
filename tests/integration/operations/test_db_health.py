"""The database's health in view (PostgreSQL): /metrics reads dead rows, table sizes and the oldest transaction
holding back vacuum from the catalog; past QUEUELOG_DB_XACT_WARN_SECONDS the dashboard warns, naming that
session, and /readyz says so while staying 200. On SQLite none of it exists: the metrics are absent, not zero.

The held transaction is a real second connection, as a forgotten console would be (tests/support/held_snapshot.py):
``BEGIN ISOLATION LEVEL REPEATABLE READ`` and one SELECT, which takes its snapshot and keeps it until closed.
"""

from __future__ import annotations

import html
import re
import time

import pytest
from sqlalchemy import delete

from queuelog import create_app
from queuelog.config import SettingError, parse_settings
from queuelog.extensions import db
from queuelog.models import Job, JobEvent
from tests.support.database import app_config, test_db_kind
from tests.support.held_snapshot import HOLDER
from tests.support.metrics import scrape, value
from tests.support.ui import span_seconds, text_of

HEALTH_METRICS = ("queuelog_db_dead_tuples", "queuelog_db_table_bytes", "queuelog_db_oldest_transaction_seconds")
OLDEST = "queuelog_db_oldest_transaction_seconds"
#: How long a test keeps its snapshot before looking: long enough to pass a threshold of 1 second.
HOLD_SECONDS = 1.5
DEADLINE_SECONDS = 15.0
NOTICE = re.compile(r'<div class="flashes" data-notice="long-transaction">(.*?)</div>', re.S)

pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")

on_postgresql = pytest.mark.skipif(test_db_kind() != "postgresql", reason="PostgreSQL's catalog only")
on_sqlite = pytest.mark.skipif(test_db_kind() != "sqlite", reason="what SQLite shows instead")
warn_after_one_second = pytest.mark.parametrize("config_overrides", [{"DB_XACT_WARN_SECONDS": 1}], indirect=True)


def poll(read, accept, what: str):
    """read() until accept(its result), at most DEADLINE_SECONDS; the last result."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        result = read()
        if accept(result):
            return result
        assert time.monotonic() < deadline, f"{what}: still {result!r} after {DEADLINE_SECONDS} s"
        time.sleep(0.1)


def notice_of(response) -> str | None:
    """The dashboard's long-transaction warning as plain text, or None."""
    found = NOTICE.search(text_of(response))
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", found.group(1))).split()) if found else None


# --- /metrics -----------------------------------------------------------------------------------


@on_postgresql
def test_each_of_the_models_tables_and_no_other_has_a_size_and_a_dead_row_count(client, admin):
    samples = scrape(client, admin)
    sized = {dict(labels)["table"] for name, labels in samples if name == "queuelog_db_table_bytes"}
    counted = {dict(labels)["table"] for name, labels in samples if name == "queuelog_db_dead_tuples"}
    assert sized == counted == set(db.metadata.tables)
    assert "alembic_version" not in sized


@on_postgresql
def test_the_jobs_table_with_its_indexes_takes_bytes_on_disk_even_empty(client, admin):
    assert value(scrape(client, admin), "queuelog_db_table_bytes", table="jobs") > 0


@on_postgresql
def test_deleted_jobs_show_as_dead_rows_of_the_jobs_table(client, admin, make_job, hold_snapshot):
    # A snapshot from before the delete: no vacuum (autovacuum included) may remove the rows while it stays,
    # so the count can only grow to them. The statistics arrive a moment after the delete: polled.
    ids = [make_job() for _ in range(20)]
    hold_snapshot()
    with db.engine.begin() as conn:
        conn.execute(delete(JobEvent.__table__).where(JobEvent.job_id.in_(ids)))
        conn.execute(delete(Job.__table__).where(Job.id.in_(ids)))
        conn.exec_driver_sql("SELECT pg_stat_force_next_flush()")
    poll(
        lambda: value(scrape(client, admin), "queuelog_db_dead_tuples", table="jobs"),
        lambda dead: dead >= len(ids),
        "dead rows of jobs",
    )


@on_postgresql
def test_the_oldest_transaction_is_zero_when_no_other_session_holds_a_snapshot(client, admin):
    assert value(scrape(client, admin), OLDEST) == 0


@on_postgresql
def test_the_oldest_transaction_is_as_old_as_a_held_snapshot(client, admin, hold_snapshot):
    held = hold_snapshot()
    held.wait_until_held_for(HOLD_SECONDS)
    at_least = held.held_for()
    seconds = value(scrape(client, admin), OLDEST)
    at_most = time.monotonic() - held.begun
    assert HOLD_SECONDS <= at_least <= seconds <= at_most


@on_sqlite
def test_sqlite_has_no_database_health_metrics(client, admin):
    names = {name for name, _labels in scrape(client, admin)}
    assert names & set(HEALTH_METRICS) == set()
    assert "queuelog_jobs" in names  # the scrape itself answered


# --- the dashboard --------------------------------------------------------------------------------


@on_postgresql
@warn_after_one_second
def test_the_dashboard_warns_of_a_transaction_open_past_the_setting_naming_its_session(signed_in, hold_snapshot):
    held = hold_snapshot()
    held.wait_until_held_for(HOLD_SECONDS)
    notice = poll(lambda: notice_of(signed_in.get("/admin")), bool, "the dashboard's warning")
    age = re.search(r"open for ([\dhms ]+):", notice).group(1)
    assert HOLD_SECONDS - 1 < span_seconds(age)[0] <= time.monotonic() - held.begun
    assert f"the session {HOLDER} from {held.client_addr or 'a local socket'} (server process {held.pid})" in notice
    assert "vacuum cannot remove" in notice and "claims slow down" in notice
    assert f"End that session, or have it commit (SELECT pg_terminate_backend({held.pid}) ends it)" in notice


@on_postgresql
@warn_after_one_second
def test_the_dashboard_warns_of_a_forgotten_prepared_transaction_and_says_how_to_end_it(signed_in, prepare_transaction):
    prepared = prepare_transaction()
    notice = poll(lambda: notice_of(signed_in.get("/admin")), bool, "the dashboard's warning")
    assert f"the prepared transaction {prepared.gid}." in notice
    assert f"Commit it or roll it back (ROLLBACK PREPARED '{prepared.gid}')" in notice


@on_postgresql
@pytest.mark.parametrize("config_overrides", [{"DB_XACT_WARN_SECONDS": 60}], indirect=True)
def test_the_dashboard_says_nothing_of_a_transaction_younger_than_the_setting(signed_in, hold_snapshot):
    hold_snapshot()
    response = signed_in.get("/admin")
    assert response.status_code == 200
    assert notice_of(response) is None


@warn_after_one_second
def test_the_dashboard_has_no_warning_without_a_held_transaction(signed_in):
    assert notice_of(signed_in.get("/admin")) is None


# --- /readyz --------------------------------------------------------------------------------------


@on_postgresql
@warn_after_one_second
def test_readyz_stays_200_and_names_a_transaction_open_past_the_setting(client, hold_snapshot):
    held = hold_snapshot()
    held.wait_until_held_for(HOLD_SECONDS)
    response = poll(lambda: client.get("/readyz"), lambda r: "warnings" in r.get_json(), "readyz's warning")
    assert response.status_code == 200
    body = response.get_json()
    [warning] = body["warnings"]
    assert body["status"] == "ok"
    assert warning["kind"] == "long_transaction"
    assert HOLD_SECONDS <= warning["seconds"] <= time.monotonic() - held.begun + 0.1  # rounded to 0.1 s
    assert (warning["application_name"], warning["client_addr"], warning["pid"]) == (
        HOLDER,
        held.client_addr,
        held.pid,
    )
    assert warning["prepared_gid"] is None


@on_postgresql
@warn_after_one_second
def test_readyz_names_a_forgotten_prepared_transaction_by_its_gid(client, prepare_transaction):
    prepared = prepare_transaction()
    response = poll(lambda: client.get("/readyz"), lambda r: "warnings" in r.get_json(), "readyz's warning")
    [warning] = response.get_json()["warnings"]
    assert warning["seconds"] >= 1  # past 1 s, rounded to 0.1 s
    assert (warning["prepared_gid"], warning["pid"], warning["application_name"], warning["client_addr"]) == (
        prepared.gid,
        None,
        None,
        None,
    )


@on_postgresql
@pytest.mark.parametrize("config_overrides", [{"DB_XACT_WARN_SECONDS": 60}], indirect=True)
def test_readyz_body_is_unchanged_by_a_transaction_younger_than_the_setting(client, hold_snapshot):
    hold_snapshot()
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.get_json() == {"status": "ok"}


# --- the setting ----------------------------------------------------------------------------------


def test_the_warning_threshold_defaults_to_300_seconds():
    assert parse_settings({})["DB_XACT_WARN_SECONDS"] == 300


@pytest.mark.parametrize("raw", [0, -5, "soon", 2.5])
def test_a_bad_warning_threshold_is_refused_naming_its_variable(raw):
    with pytest.raises(SettingError, match=r"^QUEUELOG_DB_XACT_WARN_SECONDS must be a whole number of at least 1"):
        parse_settings({"DB_XACT_WARN_SECONDS": raw})


def test_a_bad_warning_threshold_in_the_environment_stops_the_start(database_url, monkeypatch):
    monkeypatch.setenv("QUEUELOG_DB_XACT_WARN_SECONDS", "five minutes")
    with pytest.raises(SettingError, match="QUEUELOG_DB_XACT_WARN_SECONDS must be a whole number of at least 1"):
        create_app(app_config(database_url))
