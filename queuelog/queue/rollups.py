"""Type rollups: per job type, the jobs enqueued, completed and failed for good each minute and hour, and
histograms of their wait and run times each minute, counted by the change itself.

``moves.changed`` calls ``tally`` after every statement that moved jobs, in its transaction: the counts
commit or roll back with the change, so they never drift from the jobs. One UPSERT (ROLLUP_ADD) a call,
whatever the batch; nothing when the move counts nothing (a heartbeat, a cancel, a release).

- wait: from when the job was due (enqueued, or its run_at: a scheduled job, a retry's backoff) to its claim;
- run: from the claim to the holding worker's complete or fail (a run the reaper ended has no end to time);
- failed: failed for good (a worker's last failure, the reaper or a timeout giving up), as the chart shows.

The dashboard's chart and the types page read them (``queuelog.ui.rollup_stats``); ``flask purge`` deletes
minutes after MINUTES_KEPT and hours after HOURS_KEPT (``prune``).
"""
from __future__ import annotations

import random
from collections import Counter
from datetime import datetime, timedelta

from sqlalchemy.engine import Connection

from .. import sql
from ..database.transactions import write_transaction
from ..sql import JobRow
from ..states import Event, JobStatus, Transition
from ..timing_buckets import bucket_of

MINUTE, HOUR = 60, 3600
ENQUEUED, COMPLETED, FAILED, WAIT, RUN = "enqueued", "completed", "failed", "wait", "run"
COUNTS = (ENQUEUED, COMPLETED, FAILED)
HISTOGRAMS = (WAIT, RUN)
COUNT_BUCKET = 0
#: Rows one busy type's counts are spread over on PostgreSQL, so its concurrent finishes do not queue on
#: one row's lock until each commits. SQLite's writers take turns anyway: one row there.
SHARDS = 8
MINUTES_KEPT = timedelta(hours=48)
HOURS_KEPT = timedelta(days=8)

_BY_STATUS = {JobStatus.COMPLETED: COMPLETED, JobStatus.FAILED: FAILED}
_TIMED_RUNS = frozenset({"complete", "fail_retry", "fail_final"})


def period_of(at: datetime, span: int) -> int:
    """The start, in Unix seconds, of the minute or hour (``span`` seconds) that ``at`` falls in."""
    seconds = int(at.timestamp())
    return seconds - seconds % span


def tally(conn: Connection, transition: Transition, rows: list[JobRow], at: datetime,
          ran_since: datetime | None = None) -> None:
    """Count what ``transition`` did to ``rows`` at ``at``, in ``conn``'s transaction.

    ``ran_since``: the claim time of a run whose rows no longer carry it (a failure sent back to pending).
    """
    counted: Counter[tuple[str, str, int]] = Counter()   # (metric, type, bucket) → jobs
    if transition.event is Event.ENQUEUED:
        counted.update((ENQUEUED, row.type, COUNT_BUCKET) for row in rows)
    elif transition.action == "claim":
        counted.update((WAIT, row.type, bucket_of(row.claimed_at - row.run_at)) for row in rows)
    if transition.to_status in _BY_STATUS:
        counted.update((_BY_STATUS[transition.to_status], row.type, COUNT_BUCKET) for row in rows)
    if transition.action in _TIMED_RUNS:
        counted.update((RUN, row.type, bucket_of(at - claimed)) for row in rows
                       if (claimed := row.claimed_at or ran_since) is not None)
    if not counted:
        return
    minute, hour = period_of(at, MINUTE), period_of(at, HOUR)
    shard = random.randrange(SHARDS) if conn.dialect.name == "postgresql" else 0
    adds = [(MINUTE, metric, minute, job_type, bucket, shard, n) for (metric, job_type, bucket), n in counted.items()]
    adds += [(HOUR, metric, hour, job_type, bucket, shard, n) for (metric, job_type, bucket), n in counted.items()
             if metric in COUNTS]
    sql.add_rollups(conn, sorted(adds))


def prune(now: datetime) -> int:
    """Delete minutes older than MINUTES_KEPT and hours older than HOURS_KEPT; how many rows went."""
    deleted = 0
    for span, kept, metrics in ((MINUTE, MINUTES_KEPT, COUNTS + HISTOGRAMS), (HOUR, HOURS_KEPT, COUNTS)):
        before = period_of(now - kept, span)
        for metric in metrics:   # one short transaction each: on SQLite the writers wait only that long
            with write_transaction() as conn:
                deleted += sql.prune_rollups(conn, span, metric, before)
    return deleted
