"""A gunicorn worker's turns at the database: one per request thread, and the schedule ticker shares them.

A request holds at most one pooled connection at a time, so a sync worker needs one connection and a
gthread worker one per thread. The ticker (``schedules.ticker``) is one more thread of the process; left
to itself it would check a connection out while a request holds the other, and the pool would keep both
open: twice PostgreSQL's sessions for every sync worker of every server. So each request takes a turn for
its whole length and the ticker takes one for each tick; a process has as many turns as request threads.
A tick that finds none free waits for the next request to end (requests come back to back: its turn is
free between them) and a request that arrives during a tick waits for it (an indexed read, under a
millisecond, unless a schedule fires).

Outside gunicorn (``flask run``, tests, scripts) nobody counts threads and there is no limit to keep:
``turn`` then never waits.
"""
from __future__ import annotations

import contextlib
import threading

from flask import Flask, g

_turns: threading.Semaphore | None = None   # None: not a gunicorn worker, turns unlimited


def serve_from_threads(threads: int) -> None:
    """This process answers requests on ``threads`` threads (gunicorn.conf.py's ``post_worker_init``)."""
    global _turns
    _turns = threading.Semaphore(threads)


@contextlib.contextmanager
def turn(timeout: float):
    """Hold one of the process's turns for the block; yields False (and holds none) if none came free in
    ``timeout`` seconds."""
    turns = _turns
    if turns is None:
        yield True
        return
    if not turns.acquire(timeout=timeout):
        yield False
        return
    try:
        yield True
    finally:
        turns.release()


def init_app(app: Flask) -> None:
    """Every request holds a turn from its first hook until its app context ends. Registered before
    Flask-SQLAlchemy, whose session gives its connection back at that end too: teardowns run last-in first
    out, so the turn goes only once the connection is back in the pool."""
    app.before_request(_take_turn)
    app.teardown_appcontext(_give_turn_back)


def _take_turn() -> None:
    turns = _turns
    if turns is not None:
        turns.acquire()
        g.queuelog_turn = turns   # the one taken, released at teardown even if a hook after this one fails


def _give_turn_back(_error: BaseException | None) -> None:
    turns = g.pop("queuelog_turn", None)
    if turns is not None:
        turns.release()
