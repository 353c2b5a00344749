"""The ticker: a thread in every server process that fires due schedules a few times a second.

No daemon of its own: gunicorn's workers start it when they are ready to serve (``serving.adopt_worker``),
``flask run`` when it loads the app (``start_if_serving``); other processes (``flask`` commands, tests, a
script that builds the app) never tick unless they call ``start``. Any number of tickers may run, in any
number of processes on any number of machines: ``firing`` lets exactly one of them enqueue each tick's
job. With one ticker per process up, a tick is enqueued within ``TICK_SECONDS`` (plus the batches of
schedules due before it) of its time. ``QUEUELOG_SCHEDULER=false`` keeps a server process from ticking.

The ticker also runs the type rollups' step (``queue.rollups.roll_up``) once a minute has closed and settled:
a comparison of the clock with a time it keeps, so a tick between two minutes costs no query. Every
process's ticker runs it then; the step takes turns through the database, and all but the first find
nothing left to roll. After a downtime each step rolls an hour and the next tick runs the next one, until
caught up.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from datetime import timedelta

from flask import Flask

log = logging.getLogger("queuelog.schedules")

#: How often each ticker asks the database for due schedules (one indexed read when none is due).
TICK_SECONDS = 0.25
#: After an error (the database is down), the ticker waits this long, doubling up to the most.
RETRY_SECONDS, MOST_RETRY_SECONDS = 0.5, 10.0
THREAD_NAME = "queuelog-ticker"
#: A gunicorn worker's ticker shares the request threads' database turns (``database.turns``): it waits up
#: to this long for one, between two requests.
TURN_WAIT_SECONDS = 2.0

_started: dict[int, int] = {}  # id(app) → the pid that started its ticker (a forked child starts its own)
_lock = threading.Lock()


def start(app: Flask) -> threading.Event | None:
    """Start this process's ticker for ``app`` (once per process); returns an Event that stops it, or None
    when it runs already or QUEUELOG_SCHEDULER is off."""
    if not app.config.get("SCHEDULER"):  # absent: not a queuelog app (e.g. the benchmark's bare ceiling)
        return None
    with _lock:
        if _started.get(id(app)) == os.getpid():
            return None
        _started[id(app)] = os.getpid()
    stop = threading.Event()
    threading.Thread(target=_tick_forever, args=(app, stop), name=THREAD_NAME, daemon=True).start()
    return stop


def start_if_serving(app: Flask) -> None:
    """Under ``flask run``, start the ticker: the development server is a server process too."""
    if serving_under_flask_run():
        start(app)


def serving_under_flask_run() -> bool:
    """Is this process ``flask run``'s server? (Not the reloader's watching parent, which serves nothing.)"""
    import click

    context = click.get_current_context(silent=True)
    if context is None or context.info_name != "run":
        return False
    return not (context.params.get("reload") and not os.environ.get("WERKZEUG_RUN_MAIN"))


def _tick_forever(app: Flask, stop: threading.Event) -> None:
    from ..core.clock import utcnow
    from ..database import turns
    from ..ops import retention
    from ..queue import rollups
    from .firing import due_at, fire_batch

    delay = RETRY_SECONDS
    failing = False
    roll_at = retain_at = utcnow()  # when the next rollup and retention steps are due: at once on start
    while not stop.is_set():
        try:
            began = time.monotonic()
            now, due = utcnow(), None
            # A turn for the read and for each batch, not for the pass: a request waits for one batch at most.
            while due is None or due:
                with turns.turn(timeout=TURN_WAIT_SECONDS) as ours:
                    if not ours:  # every request thread stayed busy: try again next tick
                        break
                    with app.app_context():
                        due = due_at(now) if due is None else fire_batch(due, now)[1]
            with turns.turn(timeout=TURN_WAIT_SECONDS) as ours:
                if ours and (now := utcnow()) >= roll_at:
                    with app.app_context():
                        roll_at = _roll_up(now, rollups)
            with turns.turn(timeout=TURN_WAIT_SECONDS) as ours:
                if ours and (now := utcnow()) >= retain_at:
                    with app.app_context():
                        retain_at = _retain(now, retention)
            if failing:
                log.info("schedules are ticking again")
            failing, delay = False, RETRY_SECONDS
            stop.wait(max(0.0, began + TICK_SECONDS - time.monotonic()))  # a long pass is not made later still
        except Exception as error:  # noqa: BLE001 - whatever broke (a database restart), ticking must go on
            if not failing:
                log.warning("schedules could not tick (%s: %s); retrying", error.__class__.__name__, error)
            failing = True
            stop.wait(delay)
            delay = min(delay * 2, MOST_RETRY_SECONDS)


def _roll_up(now, rollups):
    """Run the rollup step; when to run it next: at once while it is catching up (it rolled all it may in one
    step), else when the next minute has closed and settled. A failing step is retried a minute later and
    never holds up the schedules (its error is logged, not raised into the tick's backoff)."""
    try:
        rolled = rollups.roll_up(now)
    except Exception as error:  # noqa: BLE001 - the schedules must tick whatever the rollup's trouble
        log.warning(
            "the type rollups could not roll up (%s: %s); retrying in a minute", error.__class__.__name__, error
        )
        return now + timedelta(minutes=1)
    return _next_roll(now, rolled, rollups)


def _retain(now, retention):
    """Run a retention step (ops/retention.py); when to run the next. A failing step is retried a minute later
    and, as the rollups, never holds up the schedules."""
    try:
        done = retention.step(now)
    except Exception as error:  # noqa: BLE001 - the schedules must tick whatever retention's trouble
        log.warning("retention could not run (%s: %s); retrying in a minute", error.__class__.__name__, error)
        return now + timedelta(minutes=1)
    return retention.next_step(now, done)


def _next_roll(now, rolled, rollups):
    """After a step that rolled ``rolled``: at once while catching up, else once the next minute settled."""
    if rolled.minutes >= rollups.MOST_MINUTES:
        return now
    minute_end = rollups.as_time(rollups.period_of(now, rollups.MINUTE) + rollups.MINUTE)
    return minute_end + rollups.settle_lag() + timedelta(milliseconds=100)
