"""The shared fsync of a SQLite WAL (queuelog/database/wal_sync.py), on real files."""

from __future__ import annotations

import os
import threading
import time

import pytest
from sqlalchemy.exc import OperationalError

from queuelog.database.wal_sync import WalSync

THREADS = 16
COMMITS_PER_THREAD = 20
#: How long each fsync takes at least: a disk's takes milliseconds, but on a RAM filesystem (where
#: scripts/test keeps temporary files) it returns at once, and no commit would come while one runs.
FSYNC_SECONDS = 0.005


def test_threads_that_commit_while_an_fsync_runs_share_the_next_one(tmp_path, monkeypatch):
    fdatasync = os.fdatasync

    def fdatasync_of_a_disk(fd: int) -> None:
        fdatasync(fd)
        time.sleep(FSYNC_SECONDS)

    monkeypatch.setattr(os, "fdatasync", fdatasync_of_a_disk)
    wal = tmp_path / "queuelog.db-wal"
    wal.write_bytes(b"")
    sync = WalSync(str(wal))
    start = threading.Barrier(THREADS)
    failures: list[BaseException] = []

    def commit_and_wait(thread: int) -> None:
        try:
            start.wait(30)
            for n in range(COMMITS_PER_THREAD):
                with open(wal, "ab") as frames:  # a commit appends its frames
                    frames.write(f"{thread}:{n}\n".encode() * 64)
                sync.wait_durable(sync.committed())
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=commit_and_wait, args=(thread,)) for thread in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)

    assert failures == []
    assert 1 <= sync.syncs < THREADS * COMMITS_PER_THREAD


def test_a_commit_waits_for_an_fsync_that_began_after_it(tmp_path):
    wal = tmp_path / "queuelog.db-wal"
    wal.write_bytes(b"frames")
    sync = WalSync(str(wal))

    sync.wait_durable(sync.committed())
    sync.wait_durable(sync.committed())

    assert sync.syncs == 2


def test_a_wal_that_is_gone_was_checkpointed_and_needs_no_fsync(tmp_path):
    sync = WalSync(str(tmp_path / "checkpointed-and-deleted.db-wal"))

    sync.wait_durable(sync.committed())  # returns: nothing of it is left to lose


def test_a_failed_fsync_fails_this_commit_and_every_later_one_even_once_fsync_works_again(tmp_path):
    wal = tmp_path / "queuelog.db-wal"
    wal.symlink_to("/proc/self/stat")  # procfs refuses fsync (EINVAL), as a failing disk would
    sync = WalSync(str(wal))

    with pytest.raises(OperationalError, match="fdatasync of the SQLite WAL"):
        sync.wait_durable(sync.committed())
    wal.unlink()
    wal.write_bytes(b"frames")  # an fsync of it would succeed now
    with pytest.raises(OperationalError, match="fdatasync of the SQLite WAL"):
        sync.wait_durable(sync.committed())
