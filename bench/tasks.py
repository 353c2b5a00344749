"""The no-op job of the worker rows, loaded the way users load their handlers.

``rq worker`` imports ``bench.tasks.noop`` by the dotted path RQ stores in each job;
``queuelog-worker bench.queuelog_tasks:worker`` and ``huey_consumer bench.huey_tasks.huey`` register
it with their own library (bench/queuelog_tasks.py, bench/huey_tasks.py). The worker processes find
these modules because the benchmark starts them in the repository root with it on PYTHONPATH.

Only the standard library here: RQ's default worker imports a job's module afresh in every work
horse it forks, so a heavy import would be timed as part of every one of its jobs.

It does nothing but say when it ran. A pickup probe's job carries ``report_to`` (a UDP port on
127.0.0.1) and ``sample``: the handler's first act is to read the clock, and only then does it send
that reading to the probe, so the report itself is never part of the measured pickup.
"""

from __future__ import annotations

import json
import socket
import time

JOB_TYPE = "noop"


def noop(payload: dict | None = None) -> dict:
    """The job: returns the wall-clock time it ran at, which a drain round reads back from the results."""
    started = time.monotonic()  # CLOCK_MONOTONIC: system-wide, so the probe's readings compare
    ran_at = time.time()  # wall clock: what the queues record their completions in
    if payload and "report_to" in payload:
        _report(payload["report_to"], payload.get("sample"), started)
    return {"ran_at": ran_at}


def _report(port: int, sample, started: float) -> None:
    message = json.dumps({"sample": sample, "started": started}).encode()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(message, ("127.0.0.1", int(port)))
