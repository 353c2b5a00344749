"""Handlers for the pickup tests (tests/acceptance/waiting/test_pickup_latency.py): run by a real
``queuelog-worker``."""

import time

from queuelog.worker import Worker

worker = Worker()
_failed_once: set[str] = set()


@worker.handler("stamp")
def stamp(payload):
    """Says when its handler started (the wall clock, which the test process shares)."""
    return {"started_at": time.time()}


@worker.handler("flaky")
def flaky(payload):
    """Fails its first attempt (a retryable error, so the job waits out its backoff), then succeeds."""
    if payload["token"] not in _failed_once:
        _failed_once.add(payload["token"])
        raise RuntimeError("the first attempt always fails")
    return {"started_at": time.time()}
