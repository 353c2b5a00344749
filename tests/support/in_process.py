"""Both ends in this process: the app served by Werkzeug on a thread, and a ``queuelog-worker`` runner on threads.

For tests that must see what the server and the worker do in one place: the tracing tests read the spans of both
from one in-memory exporter, which a gunicorn and a worker process of their own could not share.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from werkzeug.serving import make_server

from queuelog.worker import Client, Worker
from queuelog.worker.runner import _Runner


@contextlib.contextmanager
def serving(app) -> Iterator[str]:
    """The app on Werkzeug's threaded server, on 127.0.0.1 and a free port; yields its URL."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    # Request threads are joined on close: a worker's long-poll still held open must not outlive the test's app.
    server.daemon_threads = False
    thread = threading.Thread(target=server.serve_forever, name="test-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()


@contextlib.contextmanager
def running_worker(worker: Worker, url: str, api_key: str, wait: float = 1.0) -> Iterator[_Runner]:
    """``worker`` run as ``queuelog-worker`` runs it (one slot, no prefetch), stopped as a SIGTERM stops it."""
    runner = _Runner(worker, lambda: Client(url, api_key), 1, wait, None, 3600.0, prefetch=0)
    thread = threading.Thread(target=runner.run, name="test-worker", daemon=True)
    thread.start()
    try:
        yield runner
    finally:
        # What the runner's signal handler does (off the main thread it installs none): stop claiming, finish, exit.
        runner.signals = 1
        thread.join(timeout=30)
        assert not thread.is_alive(), "the worker did not stop within 30 s"
