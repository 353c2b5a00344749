"""The failed jobs of each closed day of history, summed by cause, for Top errors (PostgreSQL; docs/storage.md).

A day of finished jobs is written as jobs finish that day; once it has ended it is only read, but for an
admin's retry, a delete or a purge. Retention sums each closed day's failed jobs by cause and type once
(``sum_day``), and the page adds those sums to its grouping of the days not summed, so its read does not grow
with the history kept.

How a sum is known to be current: each summed day has a sequence of its own, ``{day}_changes``, which a
trigger on the day moves on before any of its rows is inserted, updated or deleted, and at a TRUNCATE
(``closed_day_changed``, migration a3c5e7f9b1d2). A sum records the value the sequence had when it was taken,
and holds while the sequence still has it. A sequence is not transactional, so a write that is rolled back
makes the sum stale too: the page then groups that day itself until the next step sums it again, which is
always right, only slower. A sum is taken with the day locked against writers (``SHARE ROW EXCLUSIVE``, which
creating the trigger takes anyway), so no write can fall between the value it records and what it reads; a day
already held is left for the next step.

Off the hot path (a retention step a minute), so plain SQL on SQLAlchemy's connection.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.engine import Connection

from ..states import JobStatus
from . import partitions
from .partitions import Day

#: A day is summed this long after it ended: a job that finished just before midnight may commit a moment later.
#: (One that comes later still is no error, only a sum taken again.)
SETTLE = timedelta(minutes=15)

_TRIGGERS = (
    "CREATE TRIGGER closed_day_changed BEFORE INSERT OR UPDATE OR DELETE ON {day}"
    " FOR EACH ROW EXECUTE FUNCTION closed_day_changed('{day}_changes')",
    "CREATE TRIGGER closed_day_truncated BEFORE TRUNCATE ON {day}"
    " FOR EACH STATEMENT EXECUTE FUNCTION closed_day_changed('{day}_changes')",
)

#: The summed days whose sum is current: the counter has not moved since. A day whose sequence is gone (or
#: was reset and not moved since) has NULL there, and matches nothing.
_CURRENT = (
    "SELECT day, lower, upper FROM closed_days"
    " WHERE changes = pg_sequence_last_value(to_regclass(day || '_changes')) ORDER BY upper"
)


def current_sums(conn: Connection) -> list[Day]:
    """The days whose sums hold, oldest first."""
    return [Day(*row) for row in conn.exec_driver_sql(_CURRENT).all()]


def days_to_sum(conn: Connection, now: datetime) -> list[Day]:
    """The days of finished jobs that ended ``SETTLE`` before ``now`` and have no current sum, oldest first."""
    current = {day.name for day in current_sums(conn)}
    return [
        day for day in partitions.days(conn, partitions.JOBS) if day.upper <= now - SETTLE and day.name not in current
    ]


def sum_day(conn: Connection, day: Day) -> None:
    """Sum the failed jobs of ``day`` by cause and type, replacing its earlier sum, in the caller's transaction.

    The first time, the day gets its sequence and its triggers. A day that a writer or a vacuum holds is not
    waited for (``NOWAIT``: lock_not_available at once): a sum can wait a minute, and a lock request queued on
    the day would hold up its writers behind it. A writer through ``jobs`` (an admin's retry by id) holds every
    day while it runs.
    """
    name = day.name
    partitions.set_lock_timeout(conn)
    conn.exec_driver_sql(f"LOCK TABLE {name} IN SHARE ROW EXCLUSIVE MODE NOWAIT")
    conn.exec_driver_sql(f"CREATE SEQUENCE IF NOT EXISTS {name}_changes OWNED BY {name}.id")
    has_triggers = conn.exec_driver_sql(
        "SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass(%(day)s)"
        " AND tgname = 'closed_day_changed')",
        {"day": name},
    ).scalar()
    if not has_triggers:
        for statement in _TRIGGERS:
            conn.exec_driver_sql(statement.format(day=name))
    changes = conn.exec_driver_sql(f"SELECT nextval('{name}_changes')").scalar()
    values = {"day": name, "lower": day.lower, "upper": day.upper, "changes": changes}
    conn.exec_driver_sql("DELETE FROM closed_day_errors WHERE day = %(day)s", values)
    conn.exec_driver_sql(
        "INSERT INTO closed_day_errors (day, error_group, type, failed, first_seen, last_seen)"
        f" SELECT %(day)s, error_group, type, count(*), min(updated_at), max(updated_at) FROM {name}"
        f" WHERE status = '{JobStatus.FAILED.value}' AND error_group IS NOT NULL GROUP BY error_group, type",
        values,
    )
    conn.exec_driver_sql(
        "INSERT INTO closed_days (day, lower, upper, changes) VALUES (%(day)s, %(lower)s, %(upper)s, %(changes)s)"
        " ON CONFLICT (day) DO UPDATE SET lower = excluded.lower, upper = excluded.upper, changes = excluded.changes",
        values,
    )


def forget(conn: Connection, days: list[Day]) -> None:
    """Delete the sums of ``days`` (dropped in the caller's transaction; their sequences go with them)."""
    names = {"days": [day.name for day in days]}
    conn.exec_driver_sql("DELETE FROM closed_day_errors WHERE day = ANY(%(days)s)", names)
    conn.exec_driver_sql("DELETE FROM closed_days WHERE day = ANY(%(days)s)", names)
