"""Long-poll claims: wait for a claimable job without holding a transaction, a lock or the CPU.

Who wakes a waiting claim:
- the queue operations that make a job claimable (enqueue, fail → requeue, release, retry, reap)
  call ``jobs_ready(conn)`` inside their transaction. On PostgreSQL that sends ``NOTIFY`` on
  ``CHANNEL`` (delivered at commit, dropped on rollback); every server process keeps one
  dedicated ``LISTEN`` connection whose thread wakes that process's waiters. On both dialects the
  connection is also marked, and when it goes back to the pool — after the commit — the waiters of
  this process are woken at once.
- a short poll, because nothing announces a job whose ``run_at`` comes due, and on SQLite nothing
  crosses from another server process: every ``SQLITE_RECHECK_SECONDS`` (PostgreSQL:
  ``POSTGRES_RECHECK_SECONDS``) a waiter asks, with a read-only query, whether anything is due.

Each woken waiter re-runs the normal atomic claim; between attempts it holds no database connection.
The waiting itself (how many may wait, a client that hung up) is ``longpoll``'s; the PostgreSQL
LISTEN thread is ``pg_listener``'s. When a gunicorn worker is told to stop (SIGTERM), ``serving`` calls
``stop_waiting`` and its waiting claims answer 204 at once, so a restart is not held up for the rest
of their ``wait``.
"""
from __future__ import annotations

import logging
import os
import threading
import weakref

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from . import pg_listener
from .extensions import db

log = logging.getLogger("queuelog.wakeup")

#: How often a waiter re-checks by itself: jobs enqueued by another process, or coming due by run_at.
SQLITE_RECHECK_SECONDS = 0.5
#: With a live LISTEN connection only jobs coming due by run_at need the re-check.
POSTGRES_RECHECK_SECONDS = 1.0
#: While the LISTEN connection is down, PostgreSQL waiters poll like SQLite ones.
LISTENER_DOWN_RECHECK_SECONDS = 0.5
_READY_MARK = "queuelog_jobs_ready"


class Waker:
    """A wake-up call for the waiting claims of one database in this process.

    ``generation`` counts signals; a waiter notes it before claiming and sleeps only while it is
    unchanged, so a job enqueued between its empty claim and its sleep is never missed.
    """

    def __init__(self, postgres: bool):
        self._condition = threading.Condition()
        self._generation = 0
        self.postgres = postgres
        self.listening = False  # PostgreSQL: is the LISTEN connection up?

    @property
    def generation(self) -> int:
        """The number of wake-ups so far."""
        with self._condition:
            return self._generation

    def signal(self) -> None:
        """Wake every waiter."""
        with self._condition:
            self._generation += 1
            self._condition.notify_all()

    def wait(self, seen: int, timeout: float) -> bool:
        """Sleep until a wake-up after generation ``seen`` (True) or ``timeout`` seconds (False)."""
        with self._condition:
            return self._condition.wait_for(lambda: self._generation != seen, timeout)

    def current_recheck(self) -> float:
        """Seconds between a waiter's own checks, given the state of the listener."""
        if not self.postgres:
            return SQLITE_RECHECK_SECONDS
        return POSTGRES_RECHECK_SECONDS if self.listening else LISTENER_DOWN_RECHECK_SECONDS


# --- announcing ----------------------------------------------------------------------------------

def jobs_ready(conn: Connection) -> None:
    """Announce, from inside a write transaction, that it makes jobs claimable once it commits."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"NOTIFY {pg_listener.CHANNEL}")
    _watch_checkins(conn.engine)
    conn.info[_READY_MARK] = True


def _watch_checkins(engine: Engine) -> None:
    # The pool takes a connection back only after its transaction ended, so this is the earliest
    # moment waiters can see the new jobs. A rolled-back transaction costs one useless wake-up.
    with _wakers_lock:
        if engine in _checkin_watched:
            return
        _checkin_watched[engine] = True
    key = _key_for_url(engine.url)

    def after_checkin(_dbapi_connection, record) -> None:
        if record is not None and record.info.pop(_READY_MARK, False):
            waker = _wakers.get(key)
            if waker is not None:
                waker.signal()

    event.listen(engine, "checkin", after_checkin)


# --- one waker (and, on PostgreSQL, one listener) per database per process -----------------------

_wakers: dict[str, Waker] = {}
_wakers_lock = threading.Lock()
_wakers_pid = os.getpid()
_checkin_watched: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def waker_for_current_app() -> Waker:
    """The waker for the app's database, starting its PostgreSQL listener on first use."""
    return waker_for(db.engine)


def waker_for(engine: Engine) -> Waker:
    """The waker for ``engine``'s database in this process (a forked child gets its own)."""
    global _wakers_pid
    key = _key_for_url(engine.url)
    with _wakers_lock:
        if os.getpid() != _wakers_pid:
            # Threads do not survive fork: a child must start its own listener.
            _wakers.clear()
            _wakers_pid = os.getpid()
        waker = _wakers.get(key)
        if waker is None:
            postgres = engine.dialect.name == "postgresql"
            waker = Waker(postgres)
            _wakers[key] = waker
            if postgres:
                pg_listener.start(engine, waker)
    _watch_checkins(engine)
    return waker


def _key_for_url(url) -> str:
    return url.render_as_string(hide_password=False)


# --- a server stopping ---------------------------------------------------------------------------

_shutting_down = threading.Event()


def shutting_down() -> bool:
    """Has this server process been told to stop? (Waiting claims then answer at once.)"""
    return _shutting_down.is_set()


def stop_waiting() -> None:
    """The server is stopping: waiting claims answer 204 now, and new ones do not wait."""
    _shutting_down.set()
    for waker in list(_wakers.values()):
        waker.signal()
