"""Where a claim's walk of the pending jobs may start (PostgreSQL): a turn (``fair_tag``) no claimable job is
below, per database, in this server process.

Why: while a long transaction holds vacuum back, ix_jobs_claim_order keeps an entry for every job claimed since
it began, at the head of the walk: their old row versions must stay for its snapshot. A claim reads each such
entry and then its row before passing over it. Given the floor as a condition on the index's fair_tag, the walk
passes over the entries below it in the index itself, without reading a row (docs/operations.md).

How it stays at or below the turn of every job a claim may take:
- ``refreshed``: about once a second this process's listener (pg_listener.py) reads the lowest turn of the
  pending jobs due before a horizon a little ahead, so a job scheduled for later counts before it comes due,
  and never above the newest job's id, which a job enqueued later takes at least when nothing is pending
  before it (LOWEST_TURN in sql/postgresql_turns.py);
- ``next_read``: that read walks the index the claims walk, whose head holds what a held snapshot keeps of every
  job claimed since it began, so it does not start at the head each time. It counts the jobs due before a
  horizon that stays put for FULL_READ_SECONDS (an epoch), and starts from the turn the read before it found,
  lowered by every announcement since: a job below that turn which was pending then is not due before the
  horizon, and one made pending since was announced. An epoch begins with a read from the head, when less
  than HORIZON_SECONDS is left before its horizon, so a floor read is never used within HORIZON_SECONDS of it.
  Each read then passes over the entries of the jobs claimed since the one before it, however long the
  snapshot has been held, and the one from the head comes once an epoch;
- ``lower``: whatever makes jobs pending announces the lowest turn it made claimable (wakeup.jobs_ready):
  the listener hears it from every process, the pool's check-in from this one, and the floor drops to it before
  the waiting claims wake. An announcement that made no job pending (room under a limit) names NO_NEW_TURN, and
  the floor stays; one that does not know its turns says 0: no floor until the next read;
- a read counts what was announced while it ran (``next_read`` to ``refreshed``);
- ``current`` is 0 (no floor: the walk starts at the head) until a first read, while the listener is not
  listening (what other processes announce is not heard), and when the last read is older than STALE_SECONDS.

Nothing is skipped for longer than that: a job below the floor that nobody announced (a row written by hand) is
found by the next epoch's first read, within FULL_READ_SECONDS.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta

#: How often the listener reads the floor again.
REFRESH_SECONDS = 1.0
#: A pending job due within this many seconds counts for the floor: more than REFRESH_SECONDS, so that a job
#: scheduled for later counts at least one read before it comes due.
HORIZON_SECONDS = 10.0
#: How long an epoch's horizon stays put, so how often a read starts at the head of the pending jobs (``next_read``).
FULL_READ_SECONDS = 30.0
#: A floor not read again for this long is not used (the listener is stuck, or the database slow to answer).
STALE_SECONDS = 5.0
#: What a read in progress has been told so far, before any announcement: nothing.
_NOTHING_YET = 2**62
#: The turn an announcement names when it made no job pending (wakeup.room_freed): above every turn, so the
#: floor, the lower of what it was and this, stays.
NO_NEW_TURN = _NOTHING_YET


class Floor:
    """The claim floor of one database in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value = 0
        self._read_at: float | None = None
        self._lowest_announced: int | None = None  # while a read runs: the lowest turn announced meanwhile
        # Where the next read of this epoch starts (None: a new epoch, from the head) and the epoch's horizon.
        self._from_turn: int | None = None
        self._horizon: datetime | None = None

    def current(self, listening: bool) -> int:
        """The floor a claim may use now: 0 (none) unless ``listening`` and read lately."""
        with self._lock:
            if not listening or self._read_at is None or time.monotonic() - self._read_at > STALE_SECONDS:
                return 0
            return self._value

    def lower(self, turn: int) -> None:
        """Jobs as low as ``turn`` became claimable (0: turns unknown)."""
        with self._lock:
            self._value = min(self._value, turn)
            if self._lowest_announced is not None:
                self._lowest_announced = min(self._lowest_announced, turn)
            if self._from_turn is not None:
                # Turns unknown: a new epoch, rather than walks from the head with this one's horizon.
                self._from_turn = min(self._from_turn, turn) if turn > 0 else None

    def next_read(self, now: datetime) -> tuple[int, datetime]:
        """The read to send at ``now``, which begins here: the turn it starts from (0: the head), and the horizon
        it counts the pending jobs due before."""
        with self._lock:
            self._lowest_announced = _NOTHING_YET
            if self._from_turn is None or now + timedelta(seconds=HORIZON_SECONDS) > self._horizon:
                self._from_turn, self._horizon = 0, now + timedelta(seconds=FULL_READ_SECONDS + HORIZON_SECONDS)
            return self._from_turn, self._horizon

    def refreshed(self, lowest: int | None) -> None:
        """The read answered ``lowest`` (None: no job was ever made)."""
        with self._lock:
            announced = _NOTHING_YET if self._lowest_announced is None else self._lowest_announced
            self._value = min(lowest or 0, announced)
            if self._from_turn is not None:
                self._from_turn = self._value or None
            self._lowest_announced = None
            self._read_at = time.monotonic()

    def forget(self) -> None:
        """The listener lost its connection: no floor until it has read one again."""
        with self._lock:
            self._value, self._read_at, self._lowest_announced, self._from_turn = 0, None, None, None


def turn_of(payload: str) -> int:
    """The turn a NOTIFY's payload announces: 0 when it names none (wakeup.jobs_ready)."""
    return int(payload) if payload.isdigit() else 0
