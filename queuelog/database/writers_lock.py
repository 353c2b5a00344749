"""SQLite: writers take turns on a file lock next to the database before BEGIN IMMEDIATE.

SQLite's busy handler sleeps in steps of up to 100 ms while another process holds the write lock,
so under contention from several server processes the lock sits idle while waiters sleep (a busy run
took markedly longer than it needed to). Polling this file lock every ≤2 ms hands
the turn over within a millisecond. It only orders writers: SQLite's own lock still guarantees
correctness, so after the busy timeout a waiter proceeds without the turn (and then gets SQLite's
"database is locked", a 503). Threads of one process wait here too.

A group commit (``group_commit``) holds the turn for a whole group of transactions, taken on one thread
and given back on another: it holds a :class:`SharedWritersTurn`, whose handle is the process's, not
a thread's.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import threading
import time

from sqlalchemy.engine import Engine

_writer_state = threading.local()
# Waits between tries for the writers' file lock: short, because a write transaction holds it only briefly.
_WRITER_POLL_SECONDS = (0.0002, 0.0005, 0.001, 0.002)


@contextlib.contextmanager
def sqlite_writers_turn(engine: Engine, busy_timeout_s: float):
    """Hold the writers' turn of ``engine``'s SQLite file for the block; elsewhere, do nothing."""
    path = _writers_lock_path(engine)
    if path is None or getattr(_writer_state, "holding", False):
        yield  # not SQLite, or a nested write in this thread: SQLite's lock alone decides
        return
    deadline = time.monotonic() + busy_timeout_s
    handle = _lock_handle(path)
    if handle is None:
        yield  # e.g. the database's directory is gone: let SQLite report it (a 503)
        return
    acquired = _poll_flock(handle, deadline)
    _writer_state.holding = True
    try:
        yield
    finally:
        _writer_state.holding = False
        if acquired:
            fcntl.flock(handle, fcntl.LOCK_UN)


class SharedWritersTurn:
    """The writers' turn of one SQLite file, held by an owner rather than a thread.

    Taken on one thread and given back on another, so it keeps one handle of its own (flock belongs
    to the open file, not to the thread), reopened in a forked child. Its owner makes sure that only
    one holder at a time uses it: two threads taking it at once would both succeed.
    """

    def __init__(self, engine: Engine):
        self._path = _writers_lock_path(engine)
        self._handle = None
        self._pid = None
        self._held = False

    def take(self, busy_timeout_s: float) -> None:
        """Wait for the turn, for at most ``busy_timeout_s`` (then SQLite's own lock decides)."""
        handle = self._own_handle()
        if handle is not None:
            self._held = _poll_flock(handle, time.monotonic() + busy_timeout_s)

    def _own_handle(self):
        if self._path is None:
            return None  # not SQLite, or not a file: SQLite's lock alone decides
        if self._handle is None or self._pid != os.getpid():
            if self._handle is not None:
                self._handle.close()  # the parent's copy after fork (closing a copy releases nothing)
                self._handle = None
            try:
                self._handle = open(self._path, "a")  # noqa: SIM115 - held open across writes on purpose
            except OSError:
                return None  # e.g. the database's directory is gone: let SQLite report it (a 503)
            self._pid = os.getpid()
        return self._handle

    def close(self) -> None:
        """Close the handle, unless the turn is held (its holder gives it back first)."""
        if self._handle is not None and not self._held:
            self._handle.close()
            self._handle = None

    def give_back(self) -> None:
        """Let the next writer of the file go (from any thread)."""
        if self._held:
            self._held = False
            fcntl.flock(self._handle, fcntl.LOCK_UN)


def _lock_handle(path: str):
    """This thread's open handle on the lock file, opened once rather than on every write.

    One handle per thread and process: flock belongs to the open file, so two threads sharing a
    handle (or a child sharing its parent's after fork) would both think they hold the lock. Only the
    last database's handle is kept (a server uses one; a test run makes hundreds).
    """
    held = getattr(_writer_state, "lock_file", None)  # (pid, path, handle)
    if held is not None and held[:2] == (os.getpid(), path):
        return held[2]
    if held is not None:
        held[2].close()  # another database's, or the parent's copy after fork (closing a copy releases nothing)
    _writer_state.lock_file = None
    try:
        handle = open(path, "a")  # noqa: SIM115 - held open across writes on purpose
    except OSError:
        return None
    _writer_state.lock_file = (os.getpid(), path, handle)
    return handle


def _poll_flock(handle, deadline: float) -> bool:
    for attempt in itertools.count():
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(_WRITER_POLL_SECONDS[min(attempt, len(_WRITER_POLL_SECONDS) - 1)])
    return False  # unreachable: count() never ends


def _writers_lock_path(engine: Engine) -> str | None:
    if engine.dialect.name != "sqlite":
        return None
    database = engine.url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return database + ".writers-lock"
