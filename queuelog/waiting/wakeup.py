"""Long-poll claims: wait for a claimable job without holding a transaction, a lock or the CPU.

Who wakes a waiting claim:
- the queue operations that make a job claimable (enqueue, fail → requeue, release, retry, reap)
  call ``jobs_ready(conn)`` inside their transaction, which marks the connection; when it goes back
  to the pool — after the commit — the waiters of this process are woken at once, and those of the
  other server processes are told: on PostgreSQL by ``NOTIFY`` on ``CHANNEL`` (sent in the
  transaction, delivered at commit, dropped on rollback), which every server process's ``LISTEN``
  connection hears (``pg_listener``); on SQLite by a datagram to every other server process's wake
  socket (``wake_signal``).
- the job's own due time: a waiter sleeps no longer than until the earliest ``run_at`` of a pending
  job it could claim (``longpoll``), so a scheduled job, or one waiting out its retry backoff, starts
  when it comes due.
- a recheck, for what nobody announced (a row written by hand, a process that may not reach the wake
  sockets): every ``LISTENING_RECHECK_SECONDS`` a waiter asks, with a read-only query, whether anything
  is due; every ``POLLING_RECHECK_SECONDS`` while its process cannot hear other processes (the LISTEN
  connection is down, no wake socket could be bound).

Each woken waiter re-runs the normal atomic claim; between attempts it holds no database connection.
The waiting itself (how many may wait, a client that hung up, the due time) is ``longpoll``'s. When a
gunicorn worker is told to stop (SIGTERM), ``serving`` calls ``stop_waiting`` and its waiting claims
answer 204 at once, so a restart is not held up for the rest of their ``wait``.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref

from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine

from ..database.channels import CHANNEL, FINISHED_CHANNEL
from ..extensions import db
from . import pg_listener, wake_signal
from .claim_floor import NO_NEW_TURN, Floor

log = logging.getLogger("queuelog.wakeup")

#: How often a waiter re-checks by itself while other processes can wake it (LISTEN, wake socket): only
#: what nobody announced needs it. Jobs coming due by run_at wake waiters at that time instead.
LISTENING_RECHECK_SECONDS = 1.0
#: While other processes cannot wake it, a waiter polls for their jobs this often.
POLLING_RECHECK_SECONDS = 0.5
_READY_MARK = "queuelog_jobs_ready"
_FINISHED_MARK = "queuelog_jobs_finished"


class Waker:
    """A wake-up call for the waiting claims of one database in this process.

    ``generation`` counts signals; a waiter notes it before claiming and sleeps only while it is
    unchanged, so a job enqueued between its empty claim and its sleep is never missed.
    """

    def __init__(self, finished: Waker | None = None):
        self._condition = threading.Condition()
        self._generation = 0
        self.listening = False  # can other processes wake it? (PostgreSQL: LISTEN is up; SQLite: a wake socket)
        #: The claims' waker carries a second one, for producers waiting on a job's end (``jobs_finished``).
        self.finished = finished
        #: Where the claims' walk may start (PostgreSQL): claim_floor.py; the listener reads it, announcements lower it.
        self.floor = Floor()

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
        """Seconds between a waiter's own checks: longer while other processes can wake it."""
        return LISTENING_RECHECK_SECONDS if self.listening else POLLING_RECHECK_SECONDS


# --- announcing ----------------------------------------------------------------------------------


def jobs_ready(conn: Connection, notified: bool = False, lowest_turn: int = 0) -> None:
    """Announce, from inside a write transaction, that it makes jobs claimable once it commits.

    ``notified``: the statement that made them sent PostgreSQL's NOTIFY itself (an enqueue does, with the
    lowest turn of its jobs). ``lowest_turn``: the lowest turn (fair_tag) among the jobs, which every process's
    claim floor drops to (claim_floor.py); 0 when the caller does not know it (no floor until the next read).
    """
    turn = max(0, int(lowest_turn))
    if conn.dialect.name == "postgresql" and not notified:
        conn.exec_driver_sql(f"NOTIFY {CHANNEL}, '{turn}'")
    conn.info[_READY_MARK] = min(turn, conn.info.get(_READY_MARK, turn))


def room_freed(conn: Connection) -> None:
    """Announce, from inside a write transaction, that jobs already pending may be claimable once it commits: a
    limited type's job stopped running, or a type was resumed or given more room.

    The waiting claims wake as for ``jobs_ready``, but the claim floor stays where it is: no job became pending,
    and the floor counts every pending job whatever its type's limits (claim_floor.py). Telling it 0 would send
    every claim back to the head of the walk until the next read, each time a limited type's job finished.
    """
    jobs_ready(conn, lowest_turn=NO_NEW_TURN)


def jobs_finished(conn: Connection) -> None:
    """Announce, from inside a write transaction, that jobs someone waits for are final once it commits.

    Sent only for watched jobs (a producer asked ``GET /jobs/{id}?wait=S``), so finishing other jobs costs
    no NOTIFY and no datagram.
    """
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"NOTIFY {FINISHED_CHANNEL}")
    conn.info[_FINISHED_MARK] = True


def watch_checkins(engine: Engine) -> None:
    """Wake waiters when a connection that made jobs ready (or finished them) is back in the pool.

    The app factory calls this once the engine exists, before any request, and nothing calls it later:
    SQLAlchemy's listeners may not be added while another thread's check-in walks them (that thread fails).
    A pool the engine makes anew (dispose) inherits its listeners.
    """
    # The pool takes a connection back only after its transaction ended, so this is the earliest
    # moment waiters can see the new jobs. A rolled-back transaction costs one useless wake-up.
    with _wakers_lock:
        if engine in _checkin_watched:
            return
        _checkin_watched[engine] = True
    key = _key_for_url(engine.url)
    sqlite_file = _sqlite_file(engine.url)

    def after_checkin(_dbapi_connection, record) -> None:
        if record is None:
            return
        turn = record.info.pop(_READY_MARK, None)
        if turn is not None:
            waker = _wakers.get(key)
            if waker is not None:
                waker.floor.lower(turn)  # before the waiters wake: they claim from it
                waker.signal()
            if sqlite_file is not None:
                wake_signal.announce(sqlite_file)  # PostgreSQL's NOTIFY went with the commit
        if record.info.pop(_FINISHED_MARK, False):
            waker = _wakers.get(key)
            if waker is not None:
                waker.finished.signal()
            if sqlite_file is not None:
                wake_signal.announce(sqlite_file, wake_signal.JOBS_FINISHED)

    event.listen(engine, "checkin", after_checkin)
    if sqlite_file is not None:
        # Disposing of the engine (the end of a test's app, a script's) removes this process's wake
        # socket too; a later waiting claim binds a new one.
        event.listen(engine, "engine_disposed", lambda _engine: wake_signal.stop(sqlite_file))


# --- one waker (and, on PostgreSQL, one listener) per database per process -----------------------

_wakers: dict[str, Waker] = {}
_wakers_lock = threading.Lock()
_wakers_pid = os.getpid()
_checkin_watched: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def waker_for_current_app() -> Waker:
    """The waker for the app's database, starting its PostgreSQL listener on first use."""
    return waker_for(db.engine)


def waker_for(engine: Engine) -> Waker:
    """The waker for ``engine``'s database in this process (a forked child gets its own).

    Other processes can wake it from its first use: SQLite's wake socket is bound (again, after
    ``wake_signal.stop``) before the caller's first claim; PostgreSQL's listener starts, and wakes the
    waiters once it listens, for whatever came before.
    """
    global _wakers_pid
    key = _key_for_url(engine.url)
    with _wakers_lock:
        if os.getpid() != _wakers_pid:
            # Threads do not survive fork: a child must start its own listener.
            _wakers.clear()
            _wakers_pid = os.getpid()
        waker = _wakers.get(key)
        if waker is None:
            waker = Waker(finished=Waker())
            _wakers[key] = waker
            if engine.dialect.name == "postgresql":
                pg_listener.start(engine, waker)
    sqlite_file = _sqlite_file(engine.url)
    if sqlite_file is not None:
        waker.listening = waker.finished.listening = wake_signal.listen(sqlite_file, waker.signal)
        wake_signal.listen(sqlite_file, waker.finished.signal, wake_signal.JOBS_FINISHED)
    return waker


def claim_floor(engine: Engine) -> int:
    """Where this process's claims of ``engine``'s database may start their walk (claim_floor.py); 0: at the head."""
    if engine.dialect.name != "postgresql":
        return 0
    waker = waker_for(engine)
    return waker.floor.current(waker.listening)


def _key_for_url(url) -> str:
    return url.render_as_string(hide_password=False)


def _sqlite_file(url: URL) -> str | None:
    """The database file of a SQLite URL; None for PostgreSQL and for databases only in memory."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    if url.database.startswith("file:") or url.query.get("mode") == "memory":
        return None  # a URI filename: left to polling
    return url.database


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
        waker.finished.signal()
