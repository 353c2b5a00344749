"""Type rollups: per job type, the jobs enqueued, completed and failed for good each minute and hour, and
histograms of their wait and run times each minute, folded from the event log off the hot path.

No state change writes them (a rollup UPSERT in every claim and completion cost the claim time and, with
several changes in one PostgreSQL transaction, deadlocked). Instead ``roll_up`` folds *closed* minutes of
``job_events`` into them: the schedule ticker of every server process calls it when a minute has closed
(``schedules.ticker``), and ``flask rollup`` does from cron or a test. What it folds, from each event:

- enqueued: an ``enqueued`` event;
- wait: a ``claimed`` event's time minus when the job was due: its ``run_at`` (a scheduled job's time, a
  retry's backoff; the branch's definition), or its ``created_at`` when ``run_at`` has since moved past the
  claim (the job was retried after this claim, and the due time of this wait is no longer stored);
- run: a worker's ``completed``, ``requeued`` or ``failed`` event's time minus that run's claim (the job's
  latest ``claimed`` event before it); a run the reaper ended has no end to time;
- completed / failed: events that left the job completed, or failed for good (a worker's last failure, the
  reaper or a timeout giving up), as the chart shows.

Readers (``queuelog.ui.rollup_stats``) take the rolled minutes from here and the minutes after the mark live
from the events (``fold``, the same code). ``flask purge`` deletes minutes after MINUTES_KEPT and hours after
HOURS_KEPT (``prune``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from flask import current_app
from sqlalchemy.engine import Connection

from ..core.timing_buckets import bucket_of
from ..database.transactions import read_connection, write_transaction
from ..extensions import db
from ..sql import rollups as rollup_sql
from ..states import Event, JobStatus

MINUTE, HOUR = 60, 3600
ENQUEUED, COMPLETED, FAILED, WAIT, RUN = "enqueued", "completed", "failed", "wait", "run"
COUNTS = (ENQUEUED, COMPLETED, FAILED)
HISTOGRAMS = (WAIT, RUN)
COUNT_BUCKET = 0
MINUTES_KEPT = timedelta(hours=48)
HOURS_KEPT = timedelta(days=8)
#: A minute is rolled up only once it ended this long ago (``settle_lag``). A state change reads its clock
#: ("now", its events' ``at``) and commits a few milliseconds later, or seconds when it waits for a row lock
#: (PostgreSQL) or its writers' turn. Past the lag every transaction that stamped an event in the minute has
#: committed or failed, so the minute's events are final and rolling it cannot miss one committed later.
SETTLE = timedelta(seconds=15)
#: Minutes one step rolls at most: a server back from a long downtime catches up an hour a step, each step a
#: short transaction, instead of one long one over days of events.
MOST_MINUTES = 60
#: With no mark yet (a new install, or a database whose rollups were never run), the first step starts at
#: the oldest event of the last BACKFILL, so the 7-day chart fills from the events still stored.
BACKFILL = timedelta(days=7)
MARK = "type_rollups"

#: Events that count, and what they count.
_COUNTED_EVENTS = {Event.ENQUEUED.value: ENQUEUED, Event.COMPLETED.value: COMPLETED}
_FINAL_STATUSES = {JobStatus.FAILED.value: FAILED}
#: A worker's own end of a run (complete, fail_retry, fail_final): its run is timed from its claim.
RUN_ENDS = (Event.COMPLETED.value, Event.REQUEUED.value, Event.FAILED.value)
#: Every event ``fold`` reads: the ones above, a claim, and the reaper's and timeouts' final failures.
FOLDED = tuple(
    sorted({Event.ENQUEUED.value, Event.CLAIMED.value, *RUN_ENDS, Event.REAPED.value, Event.TIMED_OUT.value})
)

Folded = Counter  # (minute start, metric, type, bucket) → jobs


def period_of(at: datetime, span: int) -> int:
    """The start, in Unix seconds, of the minute or hour (``span`` seconds) that ``at`` falls in."""
    seconds = int(at.timestamp())
    return seconds - seconds % span


def as_time(seconds: int) -> datetime:
    """A period's start (Unix seconds) as an aware UTC time."""
    return datetime.fromtimestamp(seconds, UTC)


def fold(conn: Connection, start: int, end: int) -> Folded:
    """What the events of minutes [``start``, ``end``) (Unix seconds) count, per minute, metric, type, bucket."""
    folded: Folded = Counter()
    for event, to_status, at, job_type, run_at, created_at, claimed in rollup_sql.events_between(
        conn, as_time(start), as_time(end), FOLDED, RUN_ENDS
    ):  # times in microseconds
        minute = at // 60_000_000 * MINUTE
        metric = _COUNTED_EVENTS.get(event) or (_FINAL_STATUSES.get(to_status) if event != Event.CLAIMED else None)
        if metric is not None:
            folded[(minute, metric, job_type, COUNT_BUCKET)] += 1
        if event == Event.CLAIMED:
            due = run_at if run_at <= at else created_at
            folded[(minute, WAIT, job_type, bucket_of(timedelta(microseconds=at - due)))] += 1
        elif event in RUN_ENDS and claimed is not None:
            folded[(minute, RUN, job_type, bucket_of(timedelta(microseconds=at - claimed)))] += 1
    return folded


@dataclass(frozen=True)
class Rolled:
    """What one step did: how many minutes it rolled, and the mark after it (the first minute not rolled)."""

    minutes: int
    through: int

    @property
    def last_minute(self) -> datetime:
        """The start of the last minute rolled up."""
        return as_time(self.through - MINUTE)


def settle_lag() -> timedelta:
    """How long after a minute ended it may be rolled up: SETTLE, and on SQLite also the longest a writer
    may wait for the write lock (SQLITE_BUSY_TIMEOUT_MS): most operations read their clock before they wait
    for it, so an event can commit that long after its ``at``."""
    if db.engine.dialect.name == "sqlite":
        return SETTLE + timedelta(milliseconds=current_app.config["SQLITE_BUSY_TIMEOUT_MS"])
    return SETTLE


def closed_before(now: datetime) -> int:
    """The end (Unix seconds) of the minutes that may be rolled at ``now``: those that ended settle_lag ago."""
    return period_of(now - settle_lag(), MINUTE)


def roll_up(now: datetime, most: int = MOST_MINUTES) -> Rolled:
    """Fold the closed minutes after the mark (at most ``most``) into their minute and hour rows, and move it.

    The events are read first, outside the write transaction: a settled minute's events are final, so folding
    them needs no lock, and on SQLite the writers (every claim) wait only for the short write that follows.
    The write takes the step's lock (``sql.rollups.lock_mark``) and goes ahead only if the mark is still the
    one the read started from; else another step rolled these minutes meanwhile, and this one leaves them.
    So steps take turns, and each replaces the minutes it rolls: none is counted twice, however many
    processes step at once, and a step run again over rolled minutes (the mark moved back) rewrites the same.
    """
    end_limit = closed_before(now)
    with read_connection() as conn:
        through = rollup_sql.read_mark(conn, MARK)
        if through is None:  # the first step: from the oldest event still stored, or from now on
            oldest = rollup_sql.oldest_event(conn, FOLDED, now - BACKFILL)
            start = end_limit if oldest is None else period_of(oldest, MINUTE)
        else:
            start = through
        end = max(start, min(end_limit, start + most * MINUTE))
        folded = fold(conn, start, end) if end > start else Folded()
    with write_transaction() as conn:
        now_through = rollup_sql.lock_mark(conn, MARK)
        if now_through != through:
            return Rolled(0, now_through)
        if end > start:
            rollup_sql.replace_minutes(
                conn,
                start,
                end,
                COUNTS + HISTOGRAMS,
                [
                    (MINUTE, metric, minute, job_type, bucket, 0, n)
                    for (minute, metric, job_type, bucket), n in sorted(folded.items())
                ],
            )
            # An hour is the sum of its minutes: each hour the step touched is summed again from all of its.
            for hour in range(period_of(as_time(start), HOUR), end, HOUR):
                rollup_sql.rederive_hour(conn, hour, COUNTS)
        if end != through:
            rollup_sql.set_mark(conn, MARK, end)
    return Rolled((end - start) // MINUTE, end)


def mark(conn: Connection) -> int | None:
    """The first minute (Unix seconds) not rolled up yet; None: no step has rolled anything."""
    return rollup_sql.read_mark(conn, MARK)


def prune(now: datetime) -> int:
    """Delete minutes older than MINUTES_KEPT and hours older than HOURS_KEPT; how many rows went."""
    deleted = 0
    for span, kept, metrics in ((MINUTE, MINUTES_KEPT, COUNTS + HISTOGRAMS), (HOUR, HOURS_KEPT, COUNTS)):
        before = period_of(now - kept, span)
        for metric in metrics:  # one short transaction each: on SQLite the writers wait only that long
            with write_transaction() as conn:
                deleted += rollup_sql.prune(conn, span, metric, before)
    return deleted
