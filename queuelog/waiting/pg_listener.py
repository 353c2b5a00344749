"""PostgreSQL's wake-up for waiting claims: one LISTEN connection per server process, on its own thread.

A write transaction that makes jobs claimable sends ``NOTIFY`` on ``CHANNEL`` (``wakeup.jobs_ready``);
PostgreSQL delivers it at commit to every listening connection, so waiting claims in every server
process, on every app server, wake at once. The thread reconnects with backoff when the connection
drops, and tells the waker whether it is listening, so waiters poll meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

from sqlalchemy.engine import Engine

from ..core.clock import utcnow
from ..database.channels import CHANNEL, FINISHED_CHANNEL
from ..sql.postgresql import IN_INDEX_ORDER, LOWEST_TURN
from . import claim_floor

log = logging.getLogger("queuelog.wakeup")


class Waker(Protocol):
    """What the listener wakes: wakeup.Waker, which starts the listener (so this module never imports it)."""

    listening: bool
    finished: Waker
    floor: claim_floor.Floor

    def signal(self) -> None: ...


LISTENER_NAME = "queuelog-listen"  # application_name of the LISTEN connections, in pg_stat_activity


def start(engine: Engine, waker: Waker) -> None:
    """Start this process's listener thread for ``engine``'s database."""
    conninfo = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    thread = threading.Thread(target=_listen_forever, args=(conninfo, waker), name=LISTENER_NAME, daemon=True)
    thread.start()


def _listen_forever(conninfo: str, waker: Waker) -> None:
    """The listener thread: LISTEN on a dedicated connection, wake waiters, reconnect with backoff."""
    import psycopg

    delay = 0.5
    while True:
        try:
            with psycopg.connect(conninfo, autocommit=True, connect_timeout=10, application_name=LISTENER_NAME) as conn:
                conn.execute(f"LISTEN {CHANNEL}")
                conn.execute(f"LISTEN {FINISHED_CHANNEL}")
                waker.listening = waker.finished.listening = True
                delay = 0.5
                # Anything announced while we were away is picked up by this first wake-up.
                waker.signal()
                waker.finished.signal()
                while True:
                    # Also: a quiet half-open connection raises here. A NOTIFY arriving during the read is kept
                    # for the notifies() below (psycopg 3.2.4 on), so the floor hears every announcement.
                    _read_floor(conn, waker.floor)
                    for notify in conn.notifies(timeout=claim_floor.REFRESH_SECONDS):
                        if notify.channel == FINISHED_CHANNEL:
                            waker.finished.signal()
                        else:
                            waker.floor.lower(claim_floor.turn_of(notify.payload))  # before the waiters wake
                            waker.signal()
        except Exception as exc:  # noqa: BLE001 - whatever broke, the listener must come back
            if waker.listening:
                log.warning("LISTEN connection lost (%s); waiting claims poll until it is back", exc.__class__.__name__)
        waker.listening = waker.finished.listening = False
        waker.floor.forget()
        waker.signal()
        waker.finished.signal()
        time.sleep(delay)
        delay = min(delay * 2, 10.0)


def _read_floor(conn, floor: claim_floor.Floor) -> None:
    """Read the claim floor again (claim_floor.py): the lowest turn of the pending jobs due before the epoch's
    horizon, from where the floor says this read may start."""
    from_turn, horizon = floor.next_read(utcnow().replace(tzinfo=None))
    # Planned in the claim order's index, as the runner plans the reads that must take one (IN_INDEX_ORDER): with
    # the live table analyzed nearly empty, the planner would otherwise read it whole and sort it, dead rows too.
    plan_in_index_order, back = IN_INDEX_ORDER
    conn.execute(plan_in_index_order)
    try:
        (lowest,) = conn.execute(LOWEST_TURN, {"from_turn": from_turn, "horizon": horizon}).fetchone()
    finally:
        conn.execute(back)
    floor.refreshed(lowest)
