"""SQLite: commits made durable after the writers' turn, by fsyncs of the WAL that threads share.

At ``synchronous=FULL`` SQLite syncs the WAL inside every COMMIT, while the commit still holds the
database's one write lock (and our writers' turn): every writer of every process waits for every
fsync. A group commit (``group_commit``) instead commits at NORMAL — SQLite appends the group's
frames to the WAL and syncs only at checkpoints — lets the next writer go, and then syncs the WAL
itself before any member is answered. That is FULL's promise for every answered write: the WAL is
append-only and a commit's frames count on recovery only if every frame before them is intact, so
one fsync that began after a commit covers that commit and everything before it, whoever wrote it.
A WAL that is gone was checkpointed into the database file, which SQLite syncs before it lets a WAL
be deleted or reused.

One difference from FULL remains: between a group's COMMIT and its fsync, other connections can
already read what it wrote. A write that reads it is answered only after its own fsync, which covers
it too; a read-only request may show it, and a power cut in that moment loses it, as it would lose
the write whose answer had not gone out yet. And when an fsync of the WAL fails, the kernel may have
dropped what it could not write: every later write of the process answers 503 until it restarts.
"""

from __future__ import annotations

import os
import threading

from sqlalchemy.exc import OperationalError


class WalSync:
    """fsyncs of one SQLite file's WAL for this process's commits, one at a time, shared by all that wait."""

    def __init__(self, wal_path: str):
        self._wal_path = wal_path
        self._state = threading.Condition()
        self._committed = 0  # commits announced so far, numbered 1, 2, …
        self._synced = 0  # every commit up to this number is on disk
        self._syncing = False
        self._disk_failed: OSError | None = None
        self.syncs = 0  # fsyncs done (for the stats)

    def committed(self) -> int:
        """Note a commit that has just returned; returns its number, for ``wait_durable``."""
        with self._state:
            self._committed += 1
            return self._committed

    def wait_durable(self, commit: int) -> None:
        """Return once an fsync that began after commit number ``commit`` returned has finished.

        The first thread to need one starts it; threads that need one meanwhile wait, and the next
        fsync covers all of them. Raises OperationalError when the WAL cannot be synced (the API
        answers 503, and an idempotent retry finds out what happened).
        """
        while True:
            with self._state:
                while self._syncing and self._synced < commit:
                    self._state.wait()
                if self._synced >= commit:
                    return
                if self._disk_failed is not None:
                    raise _unsynced(self._disk_failed)
                self._syncing = True
                covers = self._committed
            try:
                _fdatasync(self._wal_path, self._note_disk_failure)
            except OSError as error:
                raise _unsynced(error) from error
            else:
                with self._state:
                    self._synced = max(self._synced, covers)
                    self.syncs += 1
            finally:
                with self._state:
                    self._syncing = False
                    self._state.notify_all()

    def _note_disk_failure(self, error: OSError) -> None:
        # After a failed fsync the kernel may have dropped the pages it could not write and will not
        # report it again, and a WAL with a hole loses every commit after it: nothing written to this
        # file by this process can be promised durable any more (PostgreSQL stops for the same reason).
        with self._state:
            self._disk_failed = error


def _fdatasync(path: str, on_disk_failure) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return  # checkpointed into the database file (synced) and deleted: nothing left to sync
    try:
        os.fdatasync(fd)  # the file's data and size; the WAL's frames are all there is to it
    except OSError as error:
        on_disk_failure(error)
        raise
    finally:
        os.close(fd)


def _unsynced(error: OSError) -> OperationalError:
    return OperationalError("fdatasync of the SQLite WAL", None, error)
