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
- ``lower``: whatever makes jobs pending announces the lowest turn it made claimable (wakeup.jobs_ready):
  the listener hears it from every process, the pool's check-in from this one, and the floor drops to it before
  the waiting claims wake. An announcement that made no job pending (room under a limit) names NO_NEW_TURN, and
  the floor stays; one that does not know its turns says 0: no floor until the next read;
- a read counts what was announced while it ran (``begin_refresh``);
- ``current`` is 0 (no floor: the walk starts at the head) until a first read, while the listener is not
  listening (what other processes announce is not heard), and when the last read is older than STALE_SECONDS.

Nothing is skipped for longer than that: a job below the floor that nobody announced is found by the next read.
"""

from __future__ import annotations

import threading
import time

#: How often the listener reads the floor again.
REFRESH_SECONDS = 1.0
#: A pending job due within this many seconds counts for the floor: more than REFRESH_SECONDS, so that a job
#: scheduled for later counts at least one read before it comes due.
HORIZON_SECONDS = 10.0
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

    def begin_refresh(self) -> None:
        """A read of the lowest turn is about to be sent."""
        with self._lock:
            self._lowest_announced = _NOTHING_YET

    def refreshed(self, lowest: int | None) -> None:
        """The read answered ``lowest`` (None: no job was ever made)."""
        with self._lock:
            announced = _NOTHING_YET if self._lowest_announced is None else self._lowest_announced
            self._value = min(lowest or 0, announced)
            self._lowest_announced = None
            self._read_at = time.monotonic()

    def forget(self) -> None:
        """The listener lost its connection: no floor until it has read one again."""
        with self._lock:
            self._value, self._read_at, self._lowest_announced = 0, None, None


def turn_of(payload: str) -> int:
    """The turn a NOTIFY's payload announces: 0 when it names none (wakeup.jobs_ready)."""
    return int(payload) if payload.isdigit() else 0
