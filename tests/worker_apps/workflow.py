"""Handlers for the workflow proofs (tests/acceptance/races/test_workflows_proofs.py): run by real
``queuelog-worker`` processes.

Every handler declares the parents parameter, so the worker hands it a workflow child's parents with their
results; ``report`` also declares ``progress``.
"""

import os
import time

from queuelog.worker import PermanentError, Worker

worker = Worker()


@worker.handler("email")
def step(payload, parents):
    """Sleeps payload['ms'], then answers its name and what its parents answered (a fan-in's inputs)."""
    time.sleep(payload.get("ms", 0) / 1000)
    return {
        "name": payload.get("name"),
        "parents": [{"id": parent["id"], "status": parent["status"], "result": parent["result"]} for parent in parents],
    }


@worker.handler("report")
def fail_until_allowed(payload, parents):
    """Fails for good until the file payload['allowed_by'] exists; then succeeds."""
    if not os.path.exists(payload["allowed_by"]):
        raise PermanentError("not allowed yet")
    return {"allowed": True}


@worker.handler("resize-image")
def report(payload, parents, progress):
    """Reports its progress twice, then waits for the file payload['finish_when'] (at most 10 s)."""
    progress({"percent": 50, "stage": "resizing"})
    deadline = time.monotonic() + 10
    while not os.path.exists(payload["finish_when"]) and time.monotonic() < deadline:
        time.sleep(0.02)
    progress({"percent": 100, "stage": "done"})
    return {"resized": True}
