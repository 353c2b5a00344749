"""Producer quotas: at most N jobs enqueued in any S seconds, and at most M jobs pending or waiting, per API key.

A quota is set when the key is issued (``flask keys create … --enqueue-rate N/S --max-pending M``, or the
keys page) and checked by every enqueue of that key, inside the enqueue's write transaction, before
anything is stored: a request that would pass a limit is refused whole (429 with Retry-After) and leaves
no trace. Only new jobs count: an idempotent replay stores nothing and is answered as before.

Why the check cannot be raced: on SQLite the enqueue's transaction holds the database's write lock from
its first statement; on PostgreSQL :func:`take_turn` takes a transaction-scoped advisory lock per key
before the enqueue reads anything, so the requests of one key take turns and each sees the jobs the one
before it committed. Keys without a quota skip every statement here.

- The rate is a sliding window, exact to the microsecond: the ledger (``enqueue_ledger``) keeps one row
  per enqueue with the key's running total of jobs, so the jobs in the window are two index seeks away,
  however many enqueues it holds. Rows that left the window are deleted once a window's worth of them
  has gathered, so the ledger holds under two windows of a key's enqueues.
- Pending counts every job of the key not yet claimed (states.BACKLOG): pending ones, scheduled ones
  (``run_at`` in the future) included, and waiting ones (children whose parents have not finished). A
  waiting job becomes pending by itself when its parents finish, with no enqueue that could be refused
  then, so a limit that let it in uncounted would not limit the backlog: twenty batches of nine children
  would all pass a limit of ten, and all 180 become pending together.
- Only this key's own enqueues are refused. Moves that bring a job of the key back without an enqueue
  are never refused, and may take it past M: a worker's failed attempt, release or lapsed lease going
  back to pending (the job was counted when it was enqueued, and left the count only while running), an
  admin's retry of a failed or cancelled job, and the children an admin's retry of their parent makes
  wait again. The next enqueue of the key then finds the count past M and is refused until it is back
  under it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.engine import Connection

from .. import sql
from ..core.clock import utcnow
from ..core.errors import QueueError
from ..models import Role

#: The longest rate window: a day. Longer windows are budgets, not rates.
MAX_WINDOW_SECONDS = 86_400
#: The largest N or M a key may be given (the columns are 32-bit integers).
MAX_LIMIT = 1_000_000_000
#: Retry-After of a refusal for max-pending. No time is known at which a job will leave pending (that is
#: up to the workers), so this is a hint: short enough to catch up quickly, long enough not to hammer.
PENDING_RETRY_AFTER_SECONDS = 5
#: The advisory-lock namespace of enqueue turns ("qlqt"); the second key is the API key's id. The two-key
#: form never collides with the one-key locks elsewhere (the schema upgrade's).
_TURN_NAMESPACE = 0x716C7174

_RATE_TEXT = re.compile(r"^\s*([0-9]{1,12})\s*/\s*([0-9]{1,12})\s*$")


@dataclass(frozen=True)
class Quota:
    """A producer key's limits; None means no such limit."""

    rate_limit: int | None = None  # N: jobs …
    rate_seconds: int | None = None  # … in any window of S seconds
    max_pending: int | None = None  # M: jobs pending or waiting at once

    @classmethod
    def of(cls, key) -> Quota | None:
        """The quota stored on an API key row (ApiKey or KeyRow), or None when it has none."""
        if key.enqueue_rate_limit is None and key.max_pending is None:
            return None
        return cls(key.enqueue_rate_limit, key.enqueue_rate_seconds, key.max_pending)

    @property
    def rate(self) -> str | None:
        """The rate as it is written on the command line: ``N/S``."""
        return None if self.rate_limit is None else f"{self.rate_limit}/{self.rate_seconds}"

    def describe(self) -> str:
        """For people: "5 jobs per 2 s, 10 pending"."""
        parts = []
        if self.rate_limit is not None:
            parts.append(f"{_jobs(self.rate_limit)} per {self.rate_seconds} s")
        if self.max_pending is not None:
            parts.append(f"{self.max_pending} pending")
        return ", ".join(parts)


class QuotaExceeded(QueueError):
    """An enqueue would pass one of the key's limits; nothing was stored. 429 with Retry-After."""

    status = 429

    def __init__(self, detail: str, title: str, problem: str, retry_after: int, **numbers):
        super().__init__(detail, **numbers)
        self.title = title
        self.problem = problem  # the problem type's slug
        self.retry_after = retry_after  # whole seconds, at least 1


def parse(role: str, enqueue_rate: str | None, max_pending: str | int | None) -> tuple[Quota | None, list[dict]]:
    """The quota asked for when issuing a key, and the problems with it ({pointer, detail} each).

    None means no such limit. Empty text is a problem, not "no limit": think ``--max-pending "$UNSET"``.
    """
    if enqueue_rate is None and max_pending is None:
        return None, []
    if role != Role.PRODUCER.value:
        pointer = "/enqueue_rate" if enqueue_rate is not None else "/max_pending"
        return None, [{"pointer": pointer, "detail": f"only producer keys take quotas, not {role} keys"}]
    problems: list[dict] = []
    limit = seconds = most_pending = None
    if enqueue_rate is not None:
        match = _RATE_TEXT.match(enqueue_rate)
        if match is None:
            problems.append(
                {
                    "pointer": "/enqueue_rate",
                    "detail": f"write it as N/S (at most N jobs in any S seconds), e.g. 100/60, not {enqueue_rate!r}",
                }
            )
        else:
            limit, seconds = int(match[1]), int(match[2])
            if not 1 <= limit <= MAX_LIMIT:
                problems.append(
                    {"pointer": "/enqueue_rate", "detail": f"N (jobs) must be 1 to {MAX_LIMIT:,}, not {limit}"}
                )
            if not 1 <= seconds <= MAX_WINDOW_SECONDS:
                problems.append(
                    {
                        "pointer": "/enqueue_rate",
                        "detail": f"S (seconds) must be 1 to {MAX_WINDOW_SECONDS:,}, not {seconds}",
                    }
                )
    if max_pending is not None:
        text_value = str(max_pending).strip()
        whole = text_value.isascii() and text_value.isdigit() and len(text_value) <= 12
        most_pending = int(text_value) if whole else None
        if most_pending is None or not 1 <= most_pending <= MAX_LIMIT:
            problems.append(
                {
                    "pointer": "/max_pending",
                    "detail": f"must be a whole number of jobs from 1 to {MAX_LIMIT:,}, not {str(max_pending)!r}",
                }
            )
    if problems:
        return None, problems
    return Quota(limit, seconds, most_pending), problems


# --- the check, inside the enqueue's transaction -------------------------------------------------------
# The statements are QUOTA_* in queuelog/sql, sent on the driver like every statement of the enqueue: built
# with SQLAlchemy Core they cost more than the rest of the enqueue.


def take_turn(conn: Connection, key_id: int) -> None:
    """Make this transaction the key's only enqueue until it ends (PostgreSQL; SQLite's write lock does it)."""
    if conn.dialect.name == "postgresql":
        sql.quota_turn(conn, _TURN_NAMESPACE, key_id)


def admit(conn: Connection, key_id: int, key_name: str, quota: Quota, count: int) -> None:
    """Let ``count`` new jobs of the key in, or raise QuotaExceeded; records them in the rate's ledger.

    Runs in the enqueue's transaction after :func:`take_turn`, so what it reads stays true until commit.
    """
    now = utcnow()
    rated = quota.rate_limit is not None
    window = timedelta(seconds=quota.rate_seconds or 0)
    state = sql.quota_state(conn, key_id, now - window, quota.max_pending or 0)
    newest_total = state.newest_total or 0
    if rated:
        used = 0 if state.before is None else newest_total - state.before
        _check_rate(conn, key_id, key_name, quota, newest_total, used, count, now)
    if quota.max_pending is not None:
        _check_pending(key_name, quota.max_pending, state.pending, count)
    if not rated:
        return
    # Never earlier than the newest row: the window's arithmetic needs times in ledger order, and
    # another server's clock may be a little behind.
    at = now if state.newest_at is None else max(now, state.newest_at)
    sql.quota_record(conn, key_id, at, count, newest_total + count)
    if state.oldest_at is not None and state.oldest_at <= now - 2 * window:
        # Rows that left the window go once a whole window of them has gathered, not one by one on every
        # enqueue: the ledger stays under two windows' worth, at one DELETE per window.
        sql.quota_forget(conn, key_id, now - window)


def _check_rate(
    conn: Connection, key_id: int, key_name: str, quota: Quota, newest_total: int, used: int, count: int, now: datetime
) -> None:
    limit, seconds = quota.rate_limit, quota.rate_seconds
    if used + count <= limit:
        return
    numbers = {
        "quota": "enqueue_rate",
        "limit": limit,
        "window_seconds": seconds,
        "in_window": used,
        "requested": count,
    }
    rate = f"at most {_jobs(limit)} in any {seconds} s"
    if count > limit:
        # No wait makes it fit: say so, and that splitting it does.
        raise QuotaExceeded(
            f"key {key_name!r} may enqueue {rate}; a batch of {count} can never fit, send at most {limit} at a time",
            "Enqueue rate exceeded",
            "enqueue-rate-exceeded",
            seconds,
            **numbers,
        )
    # It fits once the job that takes the running total past the limit has left the window.
    entered = sql.quota_frees_at(conn, key_id, now - timedelta(seconds=seconds), newest_total + count - limit)
    wait = _whole_seconds(entered + timedelta(seconds=seconds) - now)
    raise QuotaExceeded(
        f"key {key_name!r} may enqueue {rate}; {used} were enqueued in the last {seconds} s, so "
        f"{count} more would pass the limit; retry after {wait} s",
        "Enqueue rate exceeded",
        "enqueue-rate-exceeded",
        wait,
        **numbers,
    )


def _check_pending(key_name: str, most: int, pending: int, count: int) -> None:
    if pending + count <= most:
        return
    numbers = {"quota": "max_pending", "limit": most, "pending": pending, "requested": count}
    limit = f"key {key_name!r} may have at most {_jobs(most)} pending (waiting ones included)"
    if count > most:
        raise QuotaExceeded(
            f"{limit}; a batch of {count} can never fit, send at most {most} at a time",
            "Too many pending jobs",
            "max-pending-reached",
            PENDING_RETRY_AFTER_SECONDS,
            **numbers,
        )
    if pending >= most:
        held = f"all {most} are taken; retry once workers have claimed some"
    else:
        held = f"it has {pending}, so {count} more would pass the limit"
    raise QuotaExceeded(
        f"{limit}; {held}", "Too many pending jobs", "max-pending-reached", PENDING_RETRY_AFTER_SECONDS, **numbers
    )


def _whole_seconds(delta: timedelta) -> int:
    """Retry-After: whole seconds, rounded up (earlier would be refused again), at least 1."""
    return max(1, math.ceil(delta.total_seconds()))


def _jobs(number: int) -> str:
    return f"{number} job" if number == 1 else f"{number} jobs"
