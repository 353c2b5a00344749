"""Top errors over days of history that have closed (PostgreSQL, sql/closed_days.py): retention sums each closed
day's failed jobs once, and the page adds those sums to its grouping of the days not summed. The page answers as
it did when it grouped every failed job, whatever happens to a summed day's jobs afterwards.
"""

from __future__ import annotations

import html
import re
import threading
from datetime import UTC, timedelta

import pytest
from sqlalchemy import event, text

from queuelog.core.clock import rfc3339, utcnow
from queuelog.database.transactions import write_transaction
from queuelog.extensions import db
from queuelog.ops import retention
from queuelog.sql import closed_days, partitions
from tests.support.database import test_db_kind
from tests.support.ui import post_form, text_of

pytestmark = [
    pytest.mark.skipif(test_db_kind() != "postgresql", reason="days of history: PostgreSQL's layout"),
    pytest.mark.usefixtures("requests_in_their_own_app_context"),
]

PAST_DAYS = 3


@pytest.fixture
def past_days(app) -> list[partitions.Day]:
    """A table of history for each of the PAST_DAYS days before today, oldest first: the day's own, made if no
    table holds any of it, else the one that does (a database made late in the day starts with a part of one)."""
    midnight = utcnow().replace(tzinfo=None, hour=0, minute=0, second=0, microsecond=0)
    tables = []
    for back in range(PAST_DAYS, 0, -1):
        lower, upper = midnight - back * partitions.DAY, midnight - (back - 1) * partitions.DAY
        with write_transaction() as conn:
            held = [
                day
                for day in partitions.days(conn, partitions.JOBS)
                if (day.lower is None or day.lower < upper) and day.upper > lower
            ]
        if held:
            day = held[-1]
            tables.append(partitions.Day(day.name, max(lower, day.lower or lower), min(upper, day.upper)))
            continue
        with write_transaction() as conn:
            tables.append(partitions.Day(partitions.make_day(conn, partitions.JOBS, lower, upper), lower, upper))
    return tables


def within(day: partitions.Day, fraction: float):
    """The moment ``fraction`` of the way through ``day``."""
    return day.lower + (day.upper - day.lower) * fraction


@pytest.fixture
def failures(make_job, past_days):
    """Failed jobs of two causes and two types on each past day and today, and one waiting to retry; the ids
    of the failed ones, by day (today last)."""
    now = utcnow().replace(tzinfo=None)
    today = partitions.Day("today", now - timedelta(seconds=10), now)
    by_day = []
    for day in [*past_days, today]:
        by_day.append(
            [
                make_job(status="failed", type=job_type, error=cause, error_group=cause, updated_at=within(day, at))
                for job_type, cause, at in (
                    ("email", "HTTP <n>", 0.6),
                    ("report", "HTTP <n>", 0.7),
                    ("email", "HTTP <n>", 0.8),
                    ("report", "disk full", 0.5),
                )
            ]
        )
    make_job(status="pending", error="HTTP 503", error_group="HTTP <n>")
    return by_day


def rows_shown(client) -> list[tuple[str, ...]]:
    """Each group's row as shown: cause, failed count, types, first and last seen (their exact times)."""
    response = client.get("/admin/errors")
    assert response.status_code == 200
    rows = re.findall(
        r'<tr data-group="([^"]*)">.*?<a [^>]*>([\d,]+)</a></td>\s*<td>([^<]*)</td>'
        r'.*?<time datetime="([^"]+)".*?<time datetime="([^"]+)"(.*?)</tr>',
        text_of(response),
        re.S,
    )
    return [
        (html.unescape(group), count, types, first, last, "Cancel all" in actions)
        for group, count, types, first, last, actions in rows
    ]


def counts_shown(client) -> dict[str, int]:
    return {group: int(count.replace(",", "")) for group, count, *_ in rows_shown(client)}


def settled_now():
    """Now, or the moment yesterday counts as closed if that is later (the first minutes after midnight)."""
    now = utcnow().replace(tzinfo=None)
    return max(now, now.replace(hour=0, minute=0, second=0, microsecond=0) + closed_days.SETTLE)


def sum_the_closed_days() -> None:
    """What retention's step does for Top errors, with no other work of the step around it."""
    assert retention.sum_closed_days(settled_now()) is False


def grouping_plan(app, client) -> str:
    """The plan of the statement the page sends to group failed jobs."""
    sent = []

    def keep(_conn, _cursor, statement, parameters, _context, _many):
        if "GROUP BY jobs.error_group, jobs.type" in statement:
            sent.append((statement, parameters))

    event.listen(db.engine, "before_cursor_execute", keep)
    try:
        assert client.get("/admin/errors").status_code == 200
    finally:
        event.remove(db.engine, "before_cursor_execute", keep)
    [(statement, parameters)] = sent
    with app.app_context(), db.engine.connect() as conn:
        conn.exec_driver_sql("SET enable_partitionwise_aggregate = on")
        return "\n".join(conn.exec_driver_sql(f"EXPLAIN {statement}", parameters or {}).scalars())


def past_tables(past_days) -> list[str]:
    return [day.name for day in past_days]


def test_the_page_shows_the_same_groups_once_the_closed_days_are_summed(signed_in, failures):
    before = rows_shown(signed_in)
    sum_the_closed_days()
    assert rows_shown(signed_in) == before
    assert counts_shown(signed_in) == {"HTTP <n>": 3 * (PAST_DAYS + 1), "disk full": PAST_DAYS + 1}


def test_the_page_groups_no_summed_day_again(app, signed_in, failures, past_days):
    assert all(table in grouping_plan(app, signed_in) for table in past_tables(past_days))
    sum_the_closed_days()
    plan = grouping_plan(app, signed_in)
    assert not [table for table in past_tables(past_days) if table in plan], plan


def test_a_job_retried_from_a_summed_day_leaves_its_group_at_once(signed_in, admin, client, failures):
    sum_the_closed_days()
    retried = failures[0][3]  # the oldest day's "disk full"
    assert client.post(f"/jobs/{retried}/retry", headers=admin).status_code == 200
    assert counts_shown(signed_in) == {"HTTP <n>": 3 * (PAST_DAYS + 1), "disk full": PAST_DAYS}


def test_a_job_deleted_from_a_summed_day_leaves_its_group_at_once(signed_in, failures):
    sum_the_closed_days()
    gone = failures[1][0]
    form = {"do": "delete-selected", "job_id": [gone], "confirmed": "yes"}
    assert post_form(signed_in, "/admin/jobs/bulk", form, page="/admin/jobs").status_code == 302
    assert counts_shown(signed_in)["HTTP <n>"] == 3 * (PAST_DAYS + 1) - 1


def test_a_job_that_fails_into_a_summed_day_is_counted_at_once(signed_in, make_job, failures, past_days):
    sum_the_closed_days()
    late = within(past_days[0], 0.1)  # a server's clock far behind: it lands in a closed day
    make_job(status="failed", type="resize", error="disk full", error_group="disk full", updated_at=late)
    [(_, count, types, first, _, _)] = [row for row in rows_shown(signed_in) if row[0] == "disk full"]
    assert (count, types, first) == (str(PAST_DAYS + 2), "report, resize", rfc3339(late.replace(tzinfo=UTC)))


def test_a_change_rolled_back_leaves_the_page_as_it_was(signed_in, failures):
    sum_the_closed_days()
    before = rows_shown(signed_in)
    with db.engine.connect() as conn:
        conn.execute(text("DELETE FROM jobs WHERE id = :id"), {"id": failures[0][0]})
        conn.rollback()
    assert rows_shown(signed_in) == before


def test_a_changed_day_is_summed_again_at_the_next_step(app, signed_in, admin, client, failures, past_days):
    sum_the_closed_days()
    assert client.post(f"/jobs/{failures[2][3]}/retry", headers=admin).status_code == 200
    assert past_tables(past_days)[2] in grouping_plan(app, signed_in)
    sum_the_closed_days()
    assert past_tables(past_days)[2] not in grouping_plan(app, signed_in)
    assert counts_shown(signed_in) == {"HTTP <n>": 3 * (PAST_DAYS + 1), "disk full": PAST_DAYS}


def test_a_day_dropped_by_retention_leaves_the_page(signed_in, failures, past_days):
    sum_the_closed_days()
    retention.drop_days_before(past_days[0].upper)
    assert counts_shown(signed_in) == {"HTTP <n>": 3 * PAST_DAYS, "disk full": PAST_DAYS}


def test_a_retention_step_sums_the_closed_days(app, signed_in, failures, past_days):
    retention.step(settled_now())
    plan = grouping_plan(app, signed_in)
    assert not [table for table in past_tables(past_days) if table in plan], plan


@pytest.fixture
def hold(app):
    """hold(statement, values): a transaction that has run ``statement``, open until the test ends."""
    release, writers = threading.Event(), []

    def _hold(statement: str, values: dict | None = None) -> None:
        held = threading.Event()

        def run():
            with app.app_context(), db.engine.begin() as conn:
                conn.execute(text(statement), values or {})
                held.set()
                release.wait(30)

        writers.append(threading.Thread(target=run))
        writers[-1].start()
        assert held.wait(10)

    yield _hold
    release.set()
    for writer in writers:
        writer.join()


def test_summing_does_not_wait_for_a_writer_of_the_days(monkeypatch, hold, failures):
    # A lock timeout far longer than the bound below: a step that waited for the writer at all would take 10 s
    # for each day it tried. The writer (through jobs: it holds every day) keeps its transaction open for 30 s.
    monkeypatch.setattr(partitions, "LOCK_TIMEOUT", "10s")
    hold("UPDATE jobs SET error = 'held' WHERE id = :id", {"id": failures[0][0]})
    started = utcnow()
    assert retention.sum_closed_days(settled_now()) is False
    assert utcnow() - started < timedelta(seconds=5)


def test_a_day_a_vacuum_holds_is_left_to_the_next_step_and_the_other_days_are_summed(
    app, signed_in, hold, failures, past_days
):
    hold(f"LOCK TABLE {past_days[0].name} IN SHARE UPDATE EXCLUSIVE MODE")  # what a vacuum of it holds
    retention.sum_closed_days(settled_now())
    plan = grouping_plan(app, signed_in)
    assert past_tables(past_days)[0] in plan
    assert not [table for table in past_tables(past_days)[1:] if table in plan], plan


def test_the_page_counts_every_day_while_one_waits_for_its_sum(signed_in, hold, failures, past_days):
    hold(f"LOCK TABLE {past_days[0].name} IN SHARE UPDATE EXCLUSIVE MODE")
    retention.sum_closed_days(settled_now())
    assert counts_shown(signed_in) == {"HTTP <n>": 3 * (PAST_DAYS + 1), "disk full": PAST_DAYS + 1}
