"""Handlers for the worker end-to-end tests: run by real ``queuelog-worker`` processes."""

import time

from queuelog.worker import PermanentError, Worker

worker = Worker()


@worker.handler("ok")
def ok(payload):
    """Succeeds, echoing the payload as the result."""
    return {"echo": payload}


@worker.handler("boom")
def boom(payload):
    """Fails with an ordinary (retryable) exception."""
    raise ValueError(f"cannot handle {payload.get('what', 'this')}")


@worker.handler("permanent")
def permanent(payload):
    """Fails for good."""
    raise PermanentError("the invoice does not exist")


@worker.handler("sleep")
def sleep(payload):
    """Takes payload['seconds'] seconds, then succeeds."""
    time.sleep(payload.get("seconds", 1))
    return {"slept": payload.get("seconds", 1)}
