"""What queuelog needs from the gunicorn worker process serving it (called from gunicorn.conf.py).

``adopt_worker`` runs once in every worker process, after the app is loaded and before the
worker serves its first request (gunicorn's ``post_worker_init`` hook). It tells long-polls how
many threads the process answers requests with, so waiting claims can be capped below that
(``longpoll.waiting_limit``).
"""
from __future__ import annotations

import logging

from gunicorn.workers.gthread import ThreadWorker
from gunicorn.workers.sync import SyncWorker

from . import longpoll

log = logging.getLogger("queuelog.serving")


def adopt_worker(worker) -> None:
    """Prepare this gunicorn worker process for queuelog's long-polls."""
    threads = request_threads(worker)
    if threads is not None:
        longpoll.serve_from_threads(threads)


def request_threads(worker) -> int | None:
    """How many requests the worker answers at once: its threads (None for event-loop workers)."""
    if isinstance(worker, ThreadWorker):
        return worker.cfg.threads
    if isinstance(worker, SyncWorker):
        return 1
    return None
