"""Long-poll claims: ``POST /jobs/claim`` with ``wait`` holds its request until a job can be claimed.

A waiting claim holds no transaction, lock or database connection (``wakeup`` says who wakes it).

- **A client that hung up gets nothing.** A waiting claim whose worker closed its connection stops
  without claiming; a job claimed in the window between that check and the answer is given
  straight back (``give_back``), because a job claimed for nobody would sit ``running`` until its
  lease ran out and ``flask reap`` came by. Both gunicorn and the development server (``flask run``)
  hand the app the client's connection, which is how we can tell.
- **A stopping server answers at once** (``wakeup.stop_waiting``).
"""
from __future__ import annotations

import logging
import socket
import time
from typing import Callable, Sequence

from flask import request
from sqlalchemy import exists, select

from .clock import utcnow
from .extensions import db
from .models import Job, JobStatus
from .wakeup import shutting_down, waker_for_current_app

log = logging.getLogger("queuelog.longpoll")

jobs = Job.__table__


def claim_or_wait(claim_once: Callable[[], list], wait: float, types: Sequence[str] | None,
                  give_back: Callable[[list], None]) -> list:
    """Claim now; if nothing is due, wait up to ``wait`` seconds for a job and claim it then.

    ``claim_once`` is the normal atomic claim; ``types`` limits the cheap due-check to the job
    types that claim would take (None: any); ``give_back`` returns claimed rows to the queue when
    the client turns out to have hung up. Returns what the client gets: the claimed rows, or [].
    """
    client = _client_connection()
    if wait <= 0:
        rows = claim_once()
    else:
        _warn_if_single_threaded()
        rows = _wait_and_claim(claim_once, wait, types, client)
    if rows and _hung_up(client):
        # It hung up while we claimed: nobody will run these jobs or heartbeat them.
        give_back(rows)
        log.info("claim_given_back jobs=%s reason=client_hung_up", ",".join(str(row.id) for row in rows))
        return []
    return rows


def _wait_and_claim(claim_once: Callable[[], list], wait: float, types: Sequence[str] | None,
                    client) -> list:
    waker = waker_for_current_app()
    deadline = time.monotonic() + wait
    seen = waker.generation
    rows = claim_once()
    while not rows and not shutting_down():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        woken = waker.wait(seen, min(remaining, waker.current_recheck()))
        seen = waker.generation
        if _hung_up(client):
            break   # claiming now would hand jobs to nobody
        if woken or _something_due(types):
            rows = claim_once()
    return rows


def _something_due(types: Sequence[str] | None) -> bool:
    """Read-only, lock-free: is any pending job of these types due? (Saves a write lock per poll.)"""
    query = select(jobs.c.id).where(jobs.c.status == JobStatus.PENDING.value, jobs.c.run_at <= utcnow())
    if types is not None:
        query = query.where(jobs.c.type.in_(list(types)))
    with db.engine.connect() as conn:
        return bool(conn.execute(select(exists(query))).scalar())


# --- the client's connection ---------------------------------------------------------------------

def _client_connection() -> socket.socket | None:
    """The client's socket, where the server hands it over (gunicorn, and flask run's dev server)."""
    environ = request.environ
    return environ.get("gunicorn.socket") or environ.get("werkzeug.socket")


def _hung_up(client: socket.socket | None) -> bool:
    """True when the client closed its connection: the end of its stream is all there is to read."""
    if client is None:
        return False
    try:
        fd = client.fileno()
    except OSError:
        return True
    if fd < 0:
        return True   # closed on our side already
    # Peek through a plain socket on the same descriptor: it works under TLS as well (raw bytes),
    # and it never waits, whatever timeout the server set on its own socket object.
    probe = socket.socket(fileno=fd)
    try:
        return probe.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False   # nothing to read: still there, waiting for our answer
    except OSError:
        return True    # reset
    finally:
        probe.detach()


_warned_single_threaded = False


def _warn_if_single_threaded() -> None:
    # gunicorn's default sync worker serves one request per process: a waiting claim blocks it.
    global _warned_single_threaded
    environ = request.environ
    if not _warned_single_threaded and environ.get("wsgi.multiprocess") and not environ.get("wsgi.multithread"):
        _warned_single_threaded = True
        log.warning("a claim with 'wait' is holding a single-threaded server process; run gunicorn "
                    "with --threads N (the gthread worker) so long-polls do not block other requests")
