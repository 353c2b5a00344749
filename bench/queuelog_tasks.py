"""The queuelog application of the worker rows: ``queuelog-worker bench.queuelog_tasks:worker``.

The shipped worker runs bench.tasks.noop as the ``noop`` job type, registered as the README's worker
section registers a handler.
"""

from __future__ import annotations

from bench import tasks
from queuelog.worker import Worker

worker = Worker()
worker.handler(tasks.JOB_TYPE)(tasks.noop)
