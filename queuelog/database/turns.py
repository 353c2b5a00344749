"""A sync gunicorn worker's one turn at the database, which the schedule ticker shares with its requests.

A request holds at most one pooled connection at a time, so a sync worker needs one connection. The ticker
(``schedules.ticker``) is a second thread of the process; left to itself it would check a connection out
while a request holds the other, and the pool would keep both open: twice PostgreSQL's sessions for every
sync worker of every server. So each request takes the process's turn for its whole length and the ticker
takes it for each tick: a tick waits for the gap between two requests, and a request that arrives mid-tick
waits for it (an indexed read, under a millisecond, unless a schedule fires).

A gthread worker is left alone: a tick overlaps every one of its threads' requests at once only rarely (the
pool may then hold one connection more than it has threads), and a turn per thread, tried, slowed producers
beside 256 waiting claims (tests/acceptance/waiting/test_longpoll_capacity.py: enqueue p99 0.4-1.2 s against
0.25 s allowed, twice in turns with the code before it, which passed both times; on a busy machine). Outside gunicorn
(``flask run``, tests, scripts) there is no limit to keep: ``turn`` never waits.
"""

from __future__ import annotations

import contextlib
import threading

from flask import Flask, g

_turns: threading.Semaphore | None = None  # None: not a sync gunicorn worker, turns unlimited


def serve_from_threads(threads: int) -> None:
    """This process answers requests on ``threads`` threads (gunicorn.conf.py's ``post_worker_init``)."""
    global _turns
    _turns = threading.Semaphore(1) if threads == 1 else None


@contextlib.contextmanager
def turn(timeout: float):
    """Hold the process's turn for the block; yields False (and holds none) if it did not come free in
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
        g.queuelog_turn = turns  # the one taken, released at teardown even if a hook after this one fails


def _give_turn_back(_error: BaseException | None) -> None:
    turns = g.pop("queuelog_turn", None)
    if turns is not None:
        turns.release()
