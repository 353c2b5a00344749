"""Group commit: write transactions of one process's threads that arrive together share one COMMIT.

At ``synchronous=FULL`` every COMMIT on SQLite waits for an fsync, and SQLite has one writer at a time,
so writers queue up behind each other's fsyncs. Here the threads of a server process (gunicorn's
gthread) that want to write while another's transaction is open join that transaction instead:

- the group's transaction (one connection, BEGIN IMMEDIATE, and on SQLite the writers' file turn held
  for the whole group) is handed from thread to thread like a baton, so bodies run one at a time;
- each member's body after the first runs inside its own SAVEPOINT: a body that raises undoes only its
  own work (the first member's undo is the whole transaction's ROLLBACK: nothing else is in it yet);
- the member that finds nobody waiting, or the group full, COMMITs once for everyone;
- every member waits until that COMMIT is on disk before it leaves ``write_transaction``, so no answer
  goes out before it, and a member that raised waits too (its answer may rest on what the others
  wrote). If the COMMIT fails, every member raises: nobody is told "done".

On a SQLite file at ``synchronous=FULL`` the group commits at NORMAL and gives the writers' turn (and
the baton) to the next writers before its fsync, which ``wal_sync`` does and shares: other processes
and this process's next group write while the disk works. The connection goes back to the pool at
FULL, so writes made elsewhere (the ORM, migrations) keep SQLite's own fsync.

The connection goes back to the pool after the COMMIT, so what a body marked on it for after the commit
(``wakeup.jobs_ready``) happens after the shared commit, once for the group. A group holds nothing
between groups: the next write after a quiet spell begins a group of its own, exactly as a plain
transaction would, and pays only the baton's bookkeeping.

A write transaction opened inside a group member's body, on the same thread, is not part of the group
(it could not be: the group waits for that thread); ``transactions`` gives it a plain transaction.
"""

from __future__ import annotations

import contextlib
import copy
import os
import threading
import weakref
from dataclasses import dataclass

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine, RootTransaction

from .driver import execute_plain
from .wal_sync import WalSync
from .writers_lock import SharedWritersTurn

_SAVEPOINT = "queuelog_group_member"
_member_of = threading.local()  # .committer: the committer whose group this thread's body runs in


@dataclass
class GroupStats:
    """What a committer has done so far: groups committed, the members they held, fsyncs of the WAL."""

    commits: int = 0
    committed_members: int = 0
    failed_groups: int = 0
    wal_syncs: int = 0

    @property
    def mean_group_size(self) -> float:
        """Members per committed group (0 before the first)."""
        return self.committed_members / self.commits if self.commits else 0.0


class _Group:
    """One open transaction, the members that joined it, and how it ended."""

    def __init__(
        self, conn: Connection, transaction: RootTransaction, turn: SharedWritersTurn, wal_sync: WalSync | None
    ):
        self.conn = conn
        self.transaction = transaction
        self.turn = turn
        self.wal_sync = wal_sync  # set: the group commits at NORMAL and syncs the WAL after its turn
        self.members = 0  # bodies that ran in it, whether they raised or not
        self.with_work = 0  # bodies whose work is in it (those that did not raise)
        self.done = False
        self.failure: BaseException | None = None


class GroupCommitter:
    """The group commit of one engine in one process: who holds the baton, the open group, who waits."""

    def __init__(self, writing_engine: Engine, max_members: int, wal_path: str | None = None):
        """``wal_path``: sync this WAL after the writers' turn instead of inside each COMMIT (SQLite at FULL)."""
        self._wal_sync = WalSync(wal_path) if wal_path else None
        self._journal_checked = False
        self._engine = writing_engine
        self.max_members = max_members
        self._turn = SharedWritersTurn(writing_engine)
        self._state = threading.Condition()
        self._baton_taken = False  # a thread is running a body, beginning a group or ending one
        self._open: _Group | None = None
        self._waiting = 0  # threads waiting for the baton
        self._stats = GroupStats()

    def close(self) -> None:
        """Close the writers' turn's handle once no group holds it (a later take opens it again)."""
        with self._state:
            if not self._baton_taken and self._open is None:
                self._turn.close()

    @property
    def waiting(self) -> int:
        """How many threads wait for the baton now."""
        with self._state:
            return self._waiting

    @property
    def stats(self) -> GroupStats:
        """A copy of the counts so far."""
        with self._state:
            stats = copy.copy(self._stats)
        stats.wal_syncs = self._wal_sync.syncs if self._wal_sync else 0
        return stats

    def inside_a_body(self) -> bool:
        """Is the calling thread running a member's body of this committer's group?"""
        return getattr(_member_of, "committer", None) is self

    @contextlib.contextmanager
    def transaction(self, busy_timeout_s: float):
        """A connection in a group transaction; leaving the block waits until the group's COMMIT is on disk."""
        self._take_baton()
        try:
            group, first = self._group_to_join(busy_timeout_s)
        except BaseException:
            self._pass_baton()
            raise
        try:
            if not first:
                execute_plain(group.conn, f"SAVEPOINT {_SAVEPOINT}")
        except BaseException as error:
            self._end(group, failure=error)
            raise
        group.members += 1
        _member_of.committer = self
        try:
            yield group.conn
        except BaseException:
            _member_of.committer = None
            self._undo_member(group, first)
            raise
        else:
            _member_of.committer = None
            self._keep_member(group, first)

    # --- the baton -------------------------------------------------------------------------------

    def _take_baton(self) -> None:
        orphan = None
        try:
            with self._state:
                self._waiting += 1
                try:
                    while self._baton_taken:
                        self._state.wait()
                except BaseException:
                    # Interrupted while waiting (a signal, in the main thread): if the baton was just
                    # handed to this thread and nobody else waits, the open group would wait for ever.
                    if not self._baton_taken and self._open is not None and self._waiting == 1:
                        self._baton_taken, orphan = True, self._open
                    raise
                finally:
                    self._waiting -= 1
                self._baton_taken = True
        finally:
            if orphan is not None:
                self._end(orphan)

    def _pass_baton(self) -> None:
        with self._state:
            self._baton_taken = False
            self._state.notify_all()

    def _group_to_join(self, busy_timeout_s: float) -> tuple[_Group, bool]:
        """The open group, or a new one begun by this thread (True: this thread is its first member)."""
        if self._open is not None:
            return self._open, False
        # The pool checkout and the writers' turn happen while the other threads of this process
        # queue up behind the baton: the longer they take, the larger the group that follows.
        conn = self._engine.connect()
        try:
            self._turn.take(busy_timeout_s)
            try:
                wal_sync = self._wal_sync_for(conn)
                if wal_sync is not None:
                    execute_plain(conn, "PRAGMA synchronous=NORMAL")  # FULL again in _give_back
                transaction = conn.begin()
            except BaseException:
                self._turn.give_back()
                raise
        except BaseException:
            conn.close()
            raise
        self._open = _Group(conn, transaction, self._turn, wal_sync)
        return self._open, True

    def _wal_sync_for(self, conn: Connection) -> WalSync | None:
        """The WAL sync, once the database is seen to be in WAL mode: in a rollback journal (a file
        system without shared memory refuses WAL) NORMAL would leave commits unsynced for good."""
        if self._wal_sync is not None and not self._journal_checked:
            # On the driver: through SQLAlchemy this would begin the transaction first.
            mode = conn.connection.driver_connection.execute("PRAGMA journal_mode").fetchone()[0]
            self._journal_checked = True
            if str(mode).lower() != "wal":
                self._wal_sync = None
        return self._wal_sync

    # --- after a body ----------------------------------------------------------------------------

    def _keep_member(self, group: _Group, first: bool) -> None:
        """The body succeeded: its work stays in the group; hand on the baton or commit, then wait."""
        if not first:
            try:
                execute_plain(group.conn, f"RELEASE SAVEPOINT {_SAVEPOINT}")
            except BaseException as error:
                self._end(group, failure=error)
                raise
        group.with_work += 1
        self._hand_on_or_end(group)
        if group.failure is not None:
            raise _for_member(group.failure)

    def _undo_member(self, group: _Group, first: bool) -> None:
        """The body raised: undo its work alone, hand on the baton or commit the others', then wait."""
        if first:
            # Nothing else is in the transaction: roll it all back, and the next waiter begins afresh.
            self._end(group, failure=None, commit=False)
            return
        try:
            execute_plain(group.conn, f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}")
            execute_plain(group.conn, f"RELEASE SAVEPOINT {_SAVEPOINT}")
        except BaseException as error:
            # The transaction itself is gone (SQLite rolls it all back on some errors, a connection
            # can break): the others' work went with it.
            self._end(group, failure=error)
            return
        self._hand_on_or_end(group)

    def _hand_on_or_end(self, group: _Group) -> None:
        """Give the baton to a waiting thread while the group has room; else end the group. Then wait for its end."""
        with self._state:
            hand_on = self._waiting > 0 and group.members < self.max_members
            if hand_on:
                self._baton_taken = False
                self._state.notify_all()
        if not hand_on:
            self._end(group)
        with self._state:
            while not group.done:
                self._state.wait()

    def _end(self, group: _Group, failure: BaseException | None = None, commit: bool = True) -> None:
        """COMMIT the group (or roll it back after ``failure``), let the next writers go, wake its members."""
        if failure is None and commit and group.with_work:
            try:
                group.transaction.commit()
            except BaseException as error:
                failure = error
                _roll_back_what_the_commit_left(group.conn)
        try:
            if group.transaction.is_active:
                group.transaction.rollback()
        except BaseException as error:
            failure = failure or error
        finally:
            self._give_back(group)
        if failure is None and group.with_work and group.wal_sync is not None:
            try:
                group.wal_sync.wait_durable(group.wal_sync.committed())
            except BaseException as error:
                failure = error
        with self._state:
            if failure is None and group.with_work:
                self._stats.commits += 1
                self._stats.committed_members += group.with_work
            elif failure is not None:
                self._stats.failed_groups += 1
            group.failure = failure
            group.done = True
            self._state.notify_all()

    def _give_back(self, group: _Group) -> None:
        """The connection to the pool (at FULL again), the writers' turn and the baton to the next writers."""
        try:
            if group.wal_sync is not None:
                try:
                    execute_plain(group.conn, "PRAGMA synchronous=FULL")
                except BaseException:
                    group.conn.invalidate()  # never back in the pool at NORMAL
            # Back to the pool (which rolls back whatever a failed COMMIT left open) before the next
            # writer may begin; the check-in is also what wakes waiting claims, after the COMMIT.
            group.conn.close()
        finally:
            group.turn.give_back()
            with self._state:
                self._open = None
                self._baton_taken = False
                self._state.notify_all()


def _roll_back_what_the_commit_left(conn: Connection) -> None:
    """After a failed COMMIT, end the transaction on the driver (SQLite keeps it open after a deferred
    constraint fails). SQLAlchemy counts the transaction as over, so the pool would not roll it back."""
    with contextlib.suppress(Exception):  # a broken connection: the pool will not hand it out again
        conn.connection.driver_connection.rollback()


def _for_member(failure: BaseException) -> BaseException:
    """The error one member raises for its group's failed COMMIT: its own copy, with the original as cause.

    Each member raises in its own thread, and one exception object raised in several threads at once
    would mix their tracebacks. A copy keeps the class, so the API answers each alike (a 503 for an
    OperationalError).
    """
    try:
        own = copy.copy(failure)
    except Exception:
        own = RuntimeError(f"the group's COMMIT failed: {failure!r}")
    own.__cause__ = failure
    return own


# --- one committer per engine per process --------------------------------------------------------

_committers: weakref.WeakKeyDictionary[Engine, GroupCommitter] = weakref.WeakKeyDictionary()
_committers_lock = threading.Lock()
_committers_pid = os.getpid()


def committer_for(
    engine: Engine, writing_engine: Engine, max_members: int, wal_path: str | None = None
) -> GroupCommitter:
    """The committer of ``engine`` in this process (a forked child gets its own: threads do not cross fork)."""
    global _committers_pid
    with _committers_lock:
        if os.getpid() != _committers_pid:
            _committers.clear()
            _committers_pid = os.getpid()
        committer = _committers.get(engine)
        if committer is None:
            committer = _committers[engine] = GroupCommitter(writing_engine, max_members, wal_path)
            event.listen(engine, "engine_disposed", _forget_committer)
        committer.max_members = max_members
        return committer


def _forget_committer(engine: Engine) -> None:
    """A disposed engine's committer goes, with its lock file's handle. The committer holds the engine (its
    writing engine is built on it), so the weak mapping alone would keep both, and an open file, for as long
    as the process lives: one per app in a process that builds many (a test run). A write after the dispose
    gets a new committer; one in flight finishes with the old one, whose turn still excludes the new one's."""
    with _committers_lock:
        committer = _committers.pop(engine, None)
    if committer is not None:
        committer.close()


def committer_of(engine: Engine) -> GroupCommitter | None:
    """``engine``'s committer in this process, None while no write has asked for one."""
    with _committers_lock:
        return _committers.get(engine) if os.getpid() == _committers_pid else None
