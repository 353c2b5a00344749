"""The huey application of the worker rows: ``huey_consumer bench.huey_tasks.huey -k thread -w N``.

As in a user's project, the consumer and the producer import the same module (huey names a task by
its module and function), and the module reads its settings from the environment: the benchmark sets
``BENCH_HUEY_DB`` to a temporary SqliteHuey file before anything imports it.
"""

from __future__ import annotations

import os

from huey import SqliteHuey

from bench import tasks

DB_ENV = "BENCH_HUEY_DB"  # set by bench.worker_systems.HueyConsumer

huey = SqliteHuey("bench-workers", filename=os.environ[DB_ENV])
noop = huey.task()(tasks.noop)
