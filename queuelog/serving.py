"""What queuelog needs from the gunicorn processes serving it (called from gunicorn.conf.py).

``prepare_fork`` runs in the master, which builds the app once (``preload_app``), before each worker is forked
from it: the master's database connections are closed, so no worker inherits one.

``adopt_worker`` runs once in every worker process, after the app is loaded and before the
worker serves its first request (gunicorn's ``post_worker_init`` hook). It

- tells long-polls how many threads the process answers requests with, so waiting claims can be
  capped below that (``waiting_places.waiting_limit``);
- makes the worker's graceful-stop signal (SIGTERM) also end its waiting claims at once
  (``wakeup.stop_waiting``), so a restart is not held up for the rest of their ``wait``;
- starts the process's schedule ticker (``schedules.ticker``), which fires due schedules, and has it share
  the request threads' database connections (``database.turns``) rather than hold one more;
- makes a threaded (gthread) worker a ``HeadFirstThreadWorker``: a thread is given a request only
  once its head has arrived, so clients that send half a head and stop cannot hold the threads,
  and a body that has not arrived in time is refused.

gunicorn picks its gthread class by itself when ``--threads`` is above 1, and a ``worker_class``
setting would also replace the sync worker where it is 1; so the worker becomes ours here, where
we can see which class gunicorn chose.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import time
from dataclasses import dataclass

from flask import Flask
from gunicorn import util
from gunicorn.http.errors import LimitRequestLine
from gunicorn.http2 import negotiation
from gunicorn.workers import gthread
from gunicorn.workers.gthread import ThreadWorker
from gunicorn.workers.sync import SyncWorker

from .core import telemetry
from .core.problems import PROBLEM_TYPE_BASE
from .database import turns
from .database.engine import close_connections
from .push import dispatcher
from .schedules import ticker
from .waiting import waiting_places, wakeup

#: A request head must be complete this many seconds after its first byte (nginx allows 60 by
#: default, but nginx holds no thread meanwhile; behind it, heads arrive at once).
HEAD_TIMEOUT_SECONDS = 10.0
#: A longer head is refused (431). nginx's default limit is 32 KiB (4 buffers of 8 KiB).
MAX_HEAD_BYTES = 64 * 1024
#: A request body must be in this many seconds after its head (the largest, a batch of 500 jobs, is
#: at most 1 MiB): the app reads it on its thread, so this bounds how long a slow body holds one.
BODY_TIMEOUT_SECONDS = 30.0
_END_OF_HEAD = b"\r\n\r\n"


def prepare_fork(app) -> None:
    """In the gunicorn master, before a fork: close the app's pooled database connections (``preload_app``).

    Building the app opened some (the schema check); a forked worker would inherit them, and two processes
    writing on one socket corrupt each other's conversations with the database. Another Flask app served with
    this gunicorn.conf.py (the benchmark's bare ceiling) has no database to close."""
    if isinstance(app, Flask) and "sqlalchemy" in app.extensions:
        close_connections(app)


def adopt_worker(worker) -> None:
    """Prepare this gunicorn worker process for queuelog's long-polls and for slow clients."""
    threads = request_threads(worker)
    if threads is not None:
        waiting_places.serve_from_threads(threads)
        turns.serve_from_threads(threads)
    _stop_waiting_on_graceful_stop()
    if isinstance(worker.wsgi, Flask):
        ticker.start(worker.wsgi)
        dispatcher.start(worker.wsgi)
    telemetry.enabled()  # opentelemetry (the otel extra) imported before the first request, not during it
    if type(worker) is ThreadWorker:
        worker.__class__ = HeadFirstThreadWorker


def _stop_waiting_on_graceful_stop() -> None:
    """Chain ``wakeup.stop_waiting`` before the worker's own SIGTERM handler (installed by gunicorn before
    this hook runs, in the main thread, where this hook runs too)."""
    graceful_stop = signal.getsignal(signal.SIGTERM)
    if not callable(graceful_stop):
        return

    def stop_waiting_then_stop(signum, frame):
        wakeup.stop_waiting()
        graceful_stop(signum, frame)

    signal.signal(signal.SIGTERM, stop_waiting_then_stop)


def request_threads(worker) -> int | None:
    """How many requests the worker answers at once: its threads (None for event-loop workers)."""
    if isinstance(worker, ThreadWorker):
        return worker.cfg.threads
    if isinstance(worker, SyncWorker):
        return 1
    return None


class HeadFirstThreadWorker(ThreadWorker):
    """gunicorn's gthread worker, except that a thread reads a request only once its head is in.

    gunicorn hands a connection to a thread when its first bytes arrive, and the thread then blocks
    until the rest of the head comes: a client that sends half a head and stops held the thread for
    good (64 of them took every thread of the production command). Here a thread takes whatever
    bytes have arrived without waiting; until the head is complete the connection goes back to
    gunicorn's poller, as its idle keep-alive connections do, holding no thread. gunicorn closes a
    connection silent there for its keep-alive time (``--keep-alive``, 2 s); a head still
    incomplete ``HEAD_TIMEOUT_SECONDS`` after its first byte is answered 408, one longer than
    ``MAX_HEAD_BYTES`` 431. The body is read by the app on its thread, as before, but within
    ``BODY_TIMEOUT_SECONDS`` of the head; a buffering proxy in front (README, Production) keeps
    slow bodies off the threads altogether.

    TLS, HTTP/2 and the PROXY protocol are left to gunicorn as they are: their first bytes are not
    an HTTP/1 head.
    """

    def handle(self, conn):
        if self._collects_heads(conn):
            refusal = self._collect_head(conn)
            if refusal is not None:
                return refusal
        return super().handle(conn)

    def handle_request(self, req, conn):
        """Serve a parsed request, its body read against ``BODY_TIMEOUT_SECONDS``."""
        if not self._collects_heads(conn):
            return super().handle_request(req, conn)
        unreader = conn.parser.unreader
        reads_from = unreader.sock
        unreader.sock = _ReadDeadline(reads_from, time.monotonic() + BODY_TIMEOUT_SECONDS)
        try:
            return super().handle_request(req, conn)
        finally:
            unreader.sock = reads_from
            with contextlib.suppress(OSError):  # closed already, after a failed response
                reads_from.settimeout(None)  # blocking again, as gunicorn left it

    def handle_error(self, req, client, addr, exc):
        """A request line over gunicorn's ``limit_request_line`` (4094 bytes: a long URL) is answered 414 as every
        API error is, application/problem+json (the OpenAPI document says so), not with gunicorn's HTML page."""
        if not isinstance(exc, LimitRequestLine):
            return super().handle_error(req, client, addr, exc)
        self.log.warning("Invalid request from ip=%s: %s", (addr or ("", -1))[0], exc)
        body = json.dumps(
            {
                "type": PROBLEM_TYPE_BASE + "uri-too-long",
                "title": "URI Too Long",
                "status": 414,
                "detail": f"the request line (method and URL) is longer than {self.cfg.limit_request_line} bytes",
            }
        ).encode()
        with contextlib.suppress(OSError):  # it is gone already
            util.write_nonblock(
                client,
                b"HTTP/1.1 414 URI Too Long\r\nConnection: close\r\n"
                b"Content-Type: application/problem+json\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body,
            )
        return None

    def _collects_heads(self, conn) -> bool:
        cfg = self.cfg
        return (
            not cfg.is_ssl
            and not conn.is_http2
            and getattr(cfg, "protocol", "http") == "http"
            and cfg.proxy_protocol in ("off", False, None)
            and not negotiation.prior_knowledge_allowed(cfg, conn.client)
        )

    def _collect_head(self, conn):
        """Take the bytes that have arrived. None: the head is complete, the thread may go on to
        parse it; otherwise what ``handle`` returns instead (gthread's ``_DEFER``: wait in the
        poller; False: close)."""
        partial: _PartialHead | None = getattr(conn, "queuelog_partial_head", None)
        head = partial.data if partial else b""
        if conn.parser is not None:
            # Bytes the previous request on this connection read ahead: a pipelined request.
            head = conn.parser.unreader.take_buffered() + head
        while _end_of_head(head) < 0 and len(head) <= MAX_HEAD_BYTES:
            try:
                chunk = conn.sock.recv(MAX_HEAD_BYTES, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                return False
            if not chunk:
                return False  # the client closed the connection: nobody to answer
            head += chunk
        end = _end_of_head(head)
        if end > MAX_HEAD_BYTES or (end < 0 and len(head) > MAX_HEAD_BYTES):
            return _refuse(conn, b"431 Request Header Fields Too Large")
        if end < 0:
            since = partial.since if partial else time.monotonic()
            if head and time.monotonic() - since > HEAD_TIMEOUT_SECONDS:
                return _refuse(conn, b"408 Request Timeout")
            conn.queuelog_partial_head = _PartialHead(head, since) if head else None
            return gthread._DEFER  # gthread's own "wait in the poller, no thread" answer
        # Complete: the parser reads it as if it had just come off the socket.
        conn.queuelog_partial_head = None
        conn.init()
        conn.parser.unreader.unread(head)
        return None


class _ReadDeadline:
    """The connection as the request's body reader sees it: every read ends by one deadline.

    The app reads a body on its thread; a client sending it slowly (or not at all) gets a timeout
    there, which the app answers like a client that went away (400), and the thread is free.
    """

    def __init__(self, sock: socket.socket, deadline: float):
        self._sock, self._deadline = sock, deadline

    def recv(self, size: int) -> bytes:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the request body took too long")
        self._sock.settimeout(remaining)
        return self._sock.recv(size)


def _end_of_head(head: bytes) -> int:
    """Where the blank line that ends the head is (-1: not yet); empty lines before a request do not count."""
    start = len(head) - len(head.lstrip(b"\r\n"))
    return head.find(_END_OF_HEAD, start)


@dataclass(frozen=True)
class _PartialHead:
    """The part of a request head that has arrived, and when its first byte did."""

    data: bytes
    since: float


def _refuse(conn, status: bytes) -> bool:
    """Answer a head we will not read further, and close (False tells gunicorn to)."""
    try:
        conn.sock.send(
            b"HTTP/1.1 " + status + b"\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", socket.MSG_DONTWAIT
        )
        # Shut both ways now: gunicorn's graceful close, which runs on the worker's main thread,
        # would otherwise linger up to 2 s reading whatever this client still trickles in.
        conn.sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # it is gone already
    return False
