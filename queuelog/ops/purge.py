"""Retention: deleting finished jobs, with their event logs, once they are older than the retention period.

Only finished jobs (completed, failed, cancelled) can be purged; pending and running jobs never. A job's age
is the time since it last changed (``updated_at``: when it finished). The work goes in small batches, each its
own short write transaction, with a pause between them, so the server keeps serving while a purge runs.

A purged job is gone for good: its event log goes with it, and its idempotency key is free again — the same
producer sending the same key afterwards creates a new job.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from .. import sql
from ..core.clock import utcnow
from ..database.transactions import write_transaction
from ..states import PURGEABLE, names, spell

FINISHED = names(PURGEABLE)  # ('completed', 'failed', 'cancelled'): the CLI's default, in this order
DEFAULT_BATCH = 500
MAX_BATCH = 10_000

_DURATION = re.compile(r"^(\d{1,9})([smhdw])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass
class PurgeReport:
    """How many jobs, and how many of their events, a purge deleted."""

    jobs: int = 0
    events: int = 0
    more: bool = False  # stopped at its most batches with jobs left to purge


def parse_duration(text: str | None) -> timedelta:
    """'30s', '15m', '12h', '7d' or '2w' → a timedelta; anything else is a ValueError that says what to write."""
    match = _DURATION.match((text or "").strip().lower())
    if not match:
        raise ValueError(f"{text!r} is not a duration: write a whole number and a unit (s, m, h, d or w), e.g. 7d")
    return timedelta(seconds=int(match.group(1)) * _UNIT_SECONDS[match.group(2)])


def parse_statuses(text: str | None) -> tuple[str, ...]:
    """'completed,failed' → ('completed', 'failed'); only finished statuses are allowed."""
    chosen = [part.strip().lower() for part in (text or "").split(",") if part.strip()]
    if not chosen:
        raise ValueError(f"name at least one status: {spell(PURGEABLE)}")
    refused = [status for status in chosen if status not in FINISHED]
    if refused:
        raise ValueError(f"cannot purge {refused[0]!r} jobs: only {spell(PURGEABLE)} jobs can be purged")
    return tuple(dict.fromkeys(chosen))


def purge(
    older_than: timedelta,
    statuses: tuple[str, ...] = FINISHED,
    batch_size: int = DEFAULT_BATCH,
    now: datetime | None = None,
    most_batches: int | None = None,
) -> PurgeReport:
    """Delete jobs in ``statuses`` unchanged for longer than ``older_than``, and their events, batch by batch
    (at most ``most_batches`` of each status: then ``more`` says whether any were left)."""
    refused = set(statuses) - set(FINISHED)
    if refused:
        raise ValueError(f"cannot purge {sorted(refused)[0]!r} jobs")
    if not 1 <= batch_size <= MAX_BATCH:
        raise ValueError(f"batch size must be between 1 and {MAX_BATCH}")
    # A fixed cutoff: jobs finishing while we work are younger than it, so the loop has an end.
    cutoff = (now or utcnow()) - older_than
    report = PurgeReport()
    for status in statuses:
        batches = 0
        while True:
            started = time.monotonic()
            selected, purged_jobs, purged_events = _purge_batch(status, cutoff, batch_size)
            report.jobs += purged_jobs
            report.events += purged_events
            batches += 1
            if selected < batch_size:
                break
            if most_batches is not None and batches >= most_batches:
                report.more = True
                break
            # Step aside as long as the batch took, so the server's writers (on SQLite: the one write lock)
            # get their turn between batches.
            time.sleep(min(0.1, time.monotonic() - started))
    return report


def _purge_batch(status: str, cutoff: datetime, batch_size: int) -> tuple[int, int, int]:
    """One short transaction: take up to ``batch_size`` old jobs (PURGEABLE), delete their events, then them."""
    with write_transaction() as conn:
        ids = sql.purgeable(conn, status, cutoff, batch_size)
        if not ids:
            return 0, 0, 0
        purged_jobs, purged_events = sql.purge(conn, ids, status, cutoff)
    return len(ids), purged_jobs, purged_events
