"""Reads planned once per connection (PostgreSQL, database/transactions.py ``read_connection(prepared=True)``):
over history's table a day, planning a job's page or the newest jobs costs more than reading them, so those
reads are prepared on their connection and PostgreSQL keeps one plan for them. Other reads (a search by text)
are planned for their values at every use. The claim, which psycopg prepares once it was sent five times, keeps
its plan too: no read ending in a rollback makes psycopg forget it any more.

What a connection has prepared is in ``pg_prepared_statements``, seen from the connection itself: each test
makes its requests one after another, and the pool hands the connection used last to the next request, so the
connection read afterwards is the one they used.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from queuelog.database.transactions import read_connection
from tests.support.database import test_db_kind

pytestmark = [
    pytest.mark.skipif(test_db_kind() != "postgresql", reason="prepared statements are PostgreSQL's"),
    pytest.mark.usefixtures("requests_in_their_own_app_context"),
]

VISITS = 12  # more than PostgreSQL's five custom plans before it settles on one plan


def _prepared(app, *fragments: str) -> list[tuple[int, int]]:
    """(generic plans, custom plans) of each statement prepared on the pool's next connection that holds every
    one of ``fragments``."""
    with app.app_context(), read_connection() as conn:
        rows = conn.execute(text("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")).all()
    return [(generic, custom) for statement, generic, custom in rows if all(f in statement for f in fragments)]


def test_a_jobs_page_is_read_with_one_plan_kept_on_its_connection(app, signed_in, make_job):
    job = make_job(status="failed", error="boom")
    for _ in range(VISITS):
        assert signed_in.get(f"/admin/jobs/{job}").status_code == 200
    [(generic, custom)] = _prepared(app, "FROM jobs", "WHERE jobs.id =")
    assert (generic, custom) == (VISITS - 5, 5)


def test_the_newest_jobs_are_read_with_one_plan_kept_on_its_connection(app, signed_in, make_job):
    make_job(status="completed")
    for _ in range(VISITS):
        assert signed_in.get("/admin/jobs").status_code == 200
    [(generic, custom)] = _prepared(app, "FROM jobs ORDER BY jobs.id DESC")
    assert (generic, custom) == (VISITS, 0)


def test_the_top_errors_are_read_with_one_plan_kept_on_its_connection(app, signed_in, make_job):
    make_job(status="failed", error="boom", error_group="boom")
    for _ in range(VISITS):
        assert signed_in.get("/admin/errors").status_code == 200
    [(generic, custom)] = _prepared(app, "GROUP BY jobs.error_group, jobs.type")
    assert (generic, custom) == (VISITS, 0)


def test_a_search_by_error_text_is_planned_for_its_text_however_often_it_is_sent(app, signed_in, make_job):
    make_job(status="failed", error="the upstream refused")
    make_job(status="failed", error="disk full")
    for _ in range(VISITS):
        assert "the upstream refused" in signed_in.get("/admin/jobs?error=upstream").get_data(as_text=True)
    assert _prepared(app, "LIKE") == []
    found = signed_in.get("/admin/jobs?error=disk").get_data(as_text=True)
    assert "disk full" in found and "the upstream refused" not in found


def test_the_claim_keeps_one_plan_on_its_connection_from_request_to_request(app, enqueue, run):
    for _ in range(VISITS):
        run(enqueue()["id"])
    [(generic, _custom)] = _prepared(app, "picked")
    assert generic >= 1


def test_the_pages_still_answer_after_a_read_failed_on_their_connection(app, signed_in, make_job):
    job = make_job(status="failed", error="boom")
    assert signed_in.get(f"/admin/jobs/{job}").status_code == 200
    with app.app_context(), pytest.raises(DBAPIError), read_connection() as conn:
        conn.exec_driver_sql("SELECT 1 / 0")
    for _ in range(VISITS):
        assert signed_in.get(f"/admin/jobs/{job}").status_code == 200


@pytest.mark.parametrize("config_overrides", [{"DATABASE_PREPARED_STATEMENTS": False}])
def test_with_prepared_statements_off_nothing_is_prepared(app, signed_in, make_job, enqueue, run):
    job = make_job(status="failed", error="boom", error_group="boom")
    for path in (f"/admin/jobs/{job}", "/admin/jobs", "/admin/errors"):
        for _ in range(VISITS):
            assert signed_in.get(path).status_code == 200
    for _ in range(VISITS):
        run(enqueue()["id"])
    assert _prepared(app, "") == []
