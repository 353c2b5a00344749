"""The places of a server process's waiting requests, and whether the client of one is still there.

Two kinds of request wait: a worker's long-poll claim (``longpoll``) and a producer waiting for a job's end
(``result_wait``). Each holds a server thread while it waits (gunicorn's gthread worker serves one request
per thread), so both take a place from one count per process, capped below the process's threads
(``waiting_limit``): the rest stay free for enqueues and acknowledgements, whichever kind fills the places.
A request that finds no place is answered at once with 503 and ``Retry-After`` (``LongPollsFull``), or, a
claim, takes a job if one is due.

A waiting request whose client hung up gives its place back at its next look (``client_gone``): a worker
that exited, a producer whose HTTP client gave up, both are gone, and their places would otherwise stay
taken until their ``wait`` ran out. Both gunicorn and the development server (``flask run``) hand the app
the client's connection, which is how we can tell.
"""

from __future__ import annotations

import contextlib
import logging
import random
import socket
import threading
from collections.abc import Iterator

from flask import current_app, request

from ..core.errors import LongPollsFull

log = logging.getLogger("queuelog.longpoll")

#: Seconds a request refused for capacity is told to wait before it asks again: drawn anew for each refusal
#: from this range (5 s on average). Long enough that a fleet far larger than the cap costs the server little
#: (each refusal is one cheap request), short enough that a refused worker is back soon after a burst of
#: jobs. Drawn, not fixed: a fleet refused in one burst and told one number comes back in one burst, and
#: producers' requests queue behind each such wave; few clients add jitter of their own.
RETRY_AFTER_SECONDS = range(3, 8)


def retry_after_seconds() -> int:
    """The Retry-After of one refusal (whole seconds, as the header takes)."""
    return random.choice(RETRY_AFTER_SECONDS)


# --- a place to wait -----------------------------------------------------------------------------


class _WaitingRequests:
    """The requests waiting in this process right now, against the limit."""

    def __init__(self):
        self._lock = threading.Lock()
        self.count = 0

    def enter(self, limit: int | None) -> bool:
        """Take a place to wait, if there is one under ``limit`` (None: no limit)."""
        with self._lock:
            if limit is not None and self.count >= limit:
                return False
            self.count += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self.count -= 1


_waiting = _WaitingRequests()


@contextlib.contextmanager
def place_if_free(limit: int | None) -> Iterator[bool]:
    """Hold a place among this process's waiting requests for the block, if one is free under ``limit``
    (None: no limit); yields whether it got one."""
    if not _waiting.enter(limit):
        yield False
        return
    try:
        yield True
    finally:
        _waiting.leave()


@contextlib.contextmanager
def waiting_place(what: str) -> Iterator[None]:
    """A place among this process's waiting requests, or LongPollsFull (503 with Retry-After) when they are
    all taken; ``what`` the client should do again after that long."""
    limit = waiting_limit()
    with place_if_free(limit) as placed:
        if not placed:
            retry_after = retry_after_seconds()
            raise LongPollsFull(
                f"this server process is holding as many waiting requests as it can ({limit}); "
                f"{what} again in {retry_after} s",
                retry_after=retry_after,
            )
        yield


# --- the client's connection ---------------------------------------------------------------------


def client_gone() -> bool:
    """Has the client of the current request closed its connection? (Never waits.)"""
    return _hung_up(_client_connection())


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
        return True  # closed on our side already
    # Peek through a plain socket on the same descriptor: it works under TLS as well (raw bytes),
    # and it never waits, whatever timeout the server set on its own socket object.
    probe = socket.socket(fileno=fd)
    try:
        return probe.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False  # nothing to read: still there, waiting for our answer
    except OSError:
        return True  # reset
    finally:
        probe.detach()


# --- how many requests may wait in this process --------------------------------------------------

_server_threads: int | None = None
_warned_uncapped = False


def serve_from_threads(threads: int) -> None:
    """Tell waiting requests how many threads this server process answers requests with.

    gunicorn.conf.py calls it for every gunicorn worker (``post_worker_init``).
    """
    global _server_threads
    _server_threads = threads


def reserved_threads(threads: int) -> int:
    """Threads a process keeps free of waiting requests: a quarter of them, at least 2."""
    return max(2, threads // 4)


def waiting_limit() -> int | None:
    """How many requests may wait at once in this process (None: as many as come)."""
    configured = current_app.config["LONGPOLL_MAX_WAITING"]
    if configured is not None:
        return configured
    if _server_threads is not None:
        return max(_server_threads - reserved_threads(_server_threads), 0)
    environ = request.environ
    if environ.get("wsgi.multiprocess") and not environ.get("wsgi.multithread"):
        return 0  # one request at a time (gunicorn's sync worker): a wait would block the process
    _warn_uncapped(environ)
    return None


def _warn_uncapped(environ) -> None:
    # The development server starts a thread per request; under gunicorn, no cap means that
    # gunicorn.conf.py was not read and idle workers can take every thread.
    global _warned_uncapped
    if not _warned_uncapped and str(environ.get("SERVER_SOFTWARE", "")).startswith("gunicorn"):
        _warned_uncapped = True
        log.warning(
            "waiting claims are not capped: start gunicorn from the repository root (or with "
            "-c gunicorn.conf.py), or set QUEUELOG_LONGPOLL_MAX_WAITING"
        )
