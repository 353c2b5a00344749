"""Stage stamps for scripts/measure_pickup_stages.py: loaded by every Python process it starts, none other.

Python imports ``sitecustomize`` at start-up from the first directory on its path that has one; the script puts
this directory first on PYTHONPATH of the server and the worker it starts, with QUEUELOG_STAGE_STAMPS naming a
directory. Then, before the app or the worker is imported, this wraps the functions a pickup passes through so
that each call writes a line "<CLOCK_MONOTONIC seconds> <stage>" to "<pid>.stamps" there. The product's code is
not changed: the same functions are called, each with two clock readings and a buffered write around it.
"""
from __future__ import annotations

import functools
import os
import threading
import time

_DIRECTORY = os.environ.get("QUEUELOG_STAGE_STAMPS")
_files: dict[int, object] = {}
_lock = threading.Lock()


def stamp(stage: str) -> None:
    """Note that this process reached ``stage`` now (CLOCK_MONOTONIC: one clock for every process)."""
    now = time.monotonic()
    pid = os.getpid()
    with _lock:
        out = _files.get(pid)   # a forked gunicorn worker opens its own file
        if out is None:
            # Open for the life of the process; each line is written through (line-buffered).
            out = _files[pid] = open(os.path.join(_DIRECTORY, f"{pid}.stamps"), "a", buffering=1,  # noqa: SIM115
                                     encoding="utf-8")
        out.write(f"{now:.6f} {stage}\n")


def _wrap(owner, name: str, entered: str | None, left: str | None = None) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def stamped(*args, **kwargs):
        if entered:
            stamp(entered)
        try:
            return original(*args, **kwargs)
        finally:
            if left:
                stamp(left)

    setattr(owner, name, stamped)


def _install() -> None:
    import gunicorn.workers.gthread as gthread

    from queuelog import ops, queue, wake_signal, wakeup
    from queuelog.api import auth
    from queuelog.database import turns, wal_sync
    from queuelog.queue import flow
    from queuelog.worker import client, runner

    # The server: gunicorn hands a request to a thread, which answers it (the answer is written when it returns).
    _wrap(gthread.ThreadWorker, "handle_request", "request read", "answer written")
    _wrap(ops, "_begin_request", "flask's hooks")
    _wrap(auth, "authenticate", "key lookup", "key found")
    _wrap(queue, "enqueue", "enqueue", "enqueue returned")
    _wrap(wake_signal, "announce", None, "other processes told")
    _wrap(wakeup.Waker, "signal", "wake-up heard")
    _wrap(queue, "claim", "claim", "claim returned")
    _wrap(flow, "_read_controlled", "flow settings read", "flow settings known")
    _wrap(wal_sync, "_fdatasync", "WAL fsync", "WAL fsync done")
    _wrap(ops, "_finish_request", "response hooks", "response hooks done")
    _wrap(turns, "_give_turn_back", "request torn down")
    # The worker: the long-poll's answer, the job held, a slot thread running it.
    _wrap(client.Client, "claim", None, "claim answered")
    _wrap(runner._Runner, "_take", "jobs taken")
    _wrap(runner._Runner, "_execute", "slot starts job")


if _DIRECTORY:
    _install()
