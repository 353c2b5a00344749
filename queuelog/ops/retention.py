"""Retention inside the server: finished jobs older than QUEUELOG_RETENTION go, with no cron job to set up.

Every server process's ticker (schedules/ticker.py) calls ``step`` about once a minute. The database lets one
process at a time through (``_take_turn``: a mark in rollup_marks, moved on by the process whose turn it is),
so any number of servers share the work without doing it twice.

- PostgreSQL (docs/storage.md): history is one table a day. A step makes the days ahead (``AHEAD_DAYS``) and
  drops the days of finished jobs and of events that ended before the cutoff, whole: no row is deleted one by
  one, so history leaves no dead rows behind, in the live table or anywhere. A day holding a parent that a live
  job still waits on stays, with the days after it, until that job has moved on.
  Jobs that no day holds (the default partition, for a clock far off) are deleted row by row, a batch a step.
  A step also sums the failed jobs of each day that has closed, for Top errors (sql/closed_days.py).
- SQLite: no partitions; a step purges in batches, as ``flask purge`` does (``MOST_BATCHES`` a step; the next
  step follows at once while jobs are left).

``flask purge`` stays for a run by hand, exact to the second and for chosen statuses.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from flask import current_app
from sqlalchemy.exc import OperationalError

from ..database.transactions import write_transaction
from ..extensions import db
from ..sql import closed_days, partitions
from ..sql import rollups as marks
from . import purge

log = logging.getLogger("queuelog.retention")

MARK = "retention"
STEP_SECONDS = 60
AHEAD_DAYS = 3
MOST_BATCHES = 20
#: Closed days summed for Top errors in one step: a day of a million jobs takes a fraction of a second.
MOST_DAYS_SUMMED = 3
#: A day's partition of events ends a moment after its day of jobs (migration d9f4b2c6a8e1's first pair).
_EVENTS_SLACK = timedelta(microseconds=1)


@dataclass
class Retained:
    """What a step removed, and whether it left work for the next one (at once)."""

    jobs: int = 0
    events: int = 0
    more: bool = False


def step(now: datetime) -> Retained | None:
    """One step of retention, if it is this process's turn (else None)."""
    if not _take_turn(now):
        return None
    older_than = purge.parse_duration(current_app.config["RETENTION"])
    if db.engine.dialect.name != "postgresql":
        done = purge.purge(older_than, now=now, most_batches=MOST_BATCHES)
        return _reported(now, Retained(done.jobs, done.events, done.more))
    with write_transaction() as conn:
        if not partitions.is_partitioned(conn):
            return Retained()
    bounds_now = _naive_utc(now)  # as PostgreSQL's partition bounds (and the stored times) are
    make_days_ahead(bounds_now)
    dropped = drop_days_before(bounds_now - older_than)
    # Jobs no day holds (a clock far off, or days not made while no ticker ran) wait in the default partition;
    # they go row by row, a batch a step. While the days are made on time there are none.
    with write_transaction() as conn:
        strays = partitions.purge_default(conn, bounds_now - older_than, purge.DEFAULT_BATCH)
    days_left_to_sum = sum_closed_days(bounds_now)
    more = strays.jobs == purge.DEFAULT_BATCH or days_left_to_sum
    return _reported(now, Retained(dropped.jobs + strays.jobs, dropped.events + strays.events, more))


def _reported(now: datetime, done: Retained) -> Retained:
    """``done``; when it left work, the next step is due at once."""
    if done.more:
        _hand_back_turn(now)
    return done


def make_days_ahead(now: datetime) -> list[str]:
    """Make the days of history up to AHEAD_DAYS after ``now``'s, each in its own short transaction."""
    made: list[str] = []
    end = _midnight(now) + AHEAD_DAYS * partitions.DAY
    for table in (partitions.JOBS, partitions.EVENTS):
        with write_transaction() as conn:
            known = partitions.days(conn, table)
        lower = known[-1].upper if known else _midnight(now)
        while lower < end:
            upper = _midnight(lower) + partitions.DAY
            if not _locked_out(_make, table, lower, upper, into=made):
                return made
            lower = upper
    return made


def drop_days_before(cutoff: datetime) -> Retained:
    """Drop the days of finished jobs and of events that ended at or before ``cutoff``, in one transaction."""
    with write_transaction() as conn:
        job_days = [day for day in partitions.days(conn, partitions.JOBS) if day.upper <= cutoff]
        for index, day in enumerate(job_days):
            if partitions.holds_needed_parent(conn, day):
                log.info("history of %s is kept: a live job still depends on a job finished then", day.name)
                job_days = job_days[:index]
                break
        kept_until = job_days[-1].upper if job_days else None
        event_days = [
            day
            for day in partitions.days(conn, partitions.EVENTS)
            if kept_until is not None and day.upper <= kept_until + _EVENTS_SLACK
        ]
    if not job_days and not event_days:
        return Retained()
    dropped: list[tuple[int, int]] = []
    _locked_out(_drop, job_days, event_days, into=dropped)
    if not dropped:
        return Retained()
    jobs, events = dropped[0]
    log.info("retention dropped %d days of history: %d jobs, %d events", len(job_days), jobs, events)
    return Retained(jobs, events)


def sum_closed_days(now: datetime) -> bool:
    """Sum the failed jobs of up to MOST_DAYS_SUMMED closed days of history that have no current sum, for Top
    errors (sql/closed_days.py), each in its own transaction; True when more are left for a step at once."""
    with write_transaction() as conn:
        due = closed_days.days_to_sum(conn, now)
    summed = 0
    for day in due:
        if summed == MOST_DAYS_SUMMED:
            return True
        # A day that a writer or a vacuum holds is left to the next step, in a minute; the others go on.
        if _locked_out(_sum, day, into=[]):
            summed += 1
            log.info("retention summed the failed jobs of %s for Top errors", day.name)
    return False


def _sum(day) -> None:
    with write_transaction() as conn:
        closed_days.sum_day(conn, day)


def _make(table, lower: datetime, upper: datetime) -> str:
    with write_transaction() as conn:
        return partitions.make_day(conn, table, lower, upper)


def _drop(job_days, event_days) -> tuple[int, int]:
    with write_transaction() as conn:
        dropped = partitions.drop_days(conn, job_days, event_days)
        closed_days.forget(conn, job_days)
        return dropped


def _locked_out(work, *args, into: list) -> bool:
    """Run ``work(*args)`` into ``into``; False when it gave up waiting for a lock (a long reader holds the
    table): the next step tries again."""
    try:
        into.append(work(*args))
    except OperationalError as error:
        if getattr(error.orig, "sqlstate", None) != "55P03":  # lock_not_available
            raise
        log.info("retention waited too long for a lock; it tries again at its next step")
        return False
    return True


def _take_turn(now: datetime) -> bool:
    """Is this step this process's? The mark says when the next step is due; the first to move it on runs."""
    at = _seconds(now)
    with write_transaction() as conn:
        due = marks.lock_mark(conn, MARK)
        if due is not None and due > at:
            return False
        marks.set_mark(conn, MARK, at + STEP_SECONDS)
    return True


def _hand_back_turn(now: datetime) -> None:
    """Work is left: the next step is due at once (whichever process's ticker comes first)."""
    with write_transaction() as conn:
        marks.lock_mark(conn, MARK)
        marks.set_mark(conn, MARK, _seconds(now))


def next_step(now: datetime, done: Retained | None) -> datetime:
    """When this process's ticker should call ``step`` again: at once while work is left, else in a minute."""
    return now if done is not None and done.more else now + timedelta(seconds=STEP_SECONDS)


def _seconds(moment: datetime) -> int:
    return int(moment.replace(tzinfo=UTC).timestamp())


def _naive_utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment


def _midnight(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)
