"""A push target for the tests: a real HTTP server on 127.0.0.1 that records every delivery and answers it as the
test says (a status, headers, a body, after a delay)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Delivery:
    """One POST the target received: its path, headers (lower-cased names), raw body, and when."""

    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def job(self) -> dict:
        return json.loads(self.body)

    @property
    def webhook_id(self) -> str:
        return self.headers["webhook-id"]


@dataclass
class Reply:
    """How the target answers: ``status``, ``body`` (a dict is sent as JSON), ``headers``, after ``delay`` s."""

    status: int = 200
    body: dict | bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


Answer = Callable[[Delivery], Reply]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's backlog of 5 drops the connections of a burst of deliveries (a 4-process server claims dozens
    # at once); a dropped SYN is sent again only after a second, which a 1 s timeout_seconds does not outlast.
    request_queue_size = 256


class PushTarget:
    """The server and what it saw; ``answer`` decides each reply (200 and no body by default)."""

    def __init__(self, answer: Answer | None = None):
        self.answer = answer or (lambda delivery: Reply())
        self.deliveries: list[Delivery] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.lock = threading.Lock()
        self.server = _Server(("127.0.0.1", 0), self._handler())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/hook"

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Delivery]:
        """The deliveries once there are at least ``count`` of them (AssertionError after ``timeout`` s)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.deliveries) >= count:
                    return list(self.deliveries)
            time.sleep(0.02)
        raise AssertionError(f"{len(self.deliveries)} deliveries after {timeout} s, expected {count}")

    def _handler(self):
        target = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                delivery = Delivery(self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.time())
                with target.lock:
                    target.deliveries.append(delivery)
                    target.in_flight += 1
                    target.most_in_flight = max(target.most_in_flight, target.in_flight)
                try:
                    reply = target.answer(delivery)
                    if reply.delay:
                        time.sleep(reply.delay)
                    raw = json.dumps(reply.body).encode() if isinstance(reply.body, dict) else (reply.body or b"")
                    with contextlib.suppress(OSError):  # the server gave up on it (a hang past the timeout)
                        self.send_response(reply.status)
                        for name, value in reply.headers.items():
                            self.send_header(name, value)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(raw)))
                        self.end_headers()
                        self.wfile.write(raw)
                finally:
                    with target.lock:
                        target.in_flight -= 1

            def log_message(self, *args):
                pass

        return Handler


@contextlib.contextmanager
def push_target(answer: Answer | None = None) -> Iterator[PushTarget]:
    """A PushTarget serving on its own thread for the block."""
    target = PushTarget(answer)
    thread = threading.Thread(target=target.server.serve_forever, name="push-target", daemon=True)
    thread.start()
    try:
        yield target
    finally:
        target.server.shutdown()
        target.server.server_close()
