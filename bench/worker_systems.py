"""The worker rows' systems: each queue with the worker command its users run.

- ``queuelog-worker bench.queuelog_tasks:worker --concurrency N`` against queuelog under the README's
  production command (``gunicorn --workers 4 --threads 8``), on SQLite and on PostgreSQL;
- ``rq worker`` (RQ's default, forking a work horse per job) and ``rq worker -w
  rq.worker.SimpleWorker`` (every job in the worker's own process), N processes, on a redis-server
  without persistence and on one with ``appendonly yes, appendfsync always`` (the durable
  comparison);
- ``huey_consumer bench.huey_tasks.huey -k thread -w N`` on SqliteHuey.

Each system enqueues a round's jobs the fastest way its producers can (queuelog: batches of 500; RQ:
``enqueue_many``; huey has no batch enqueue: one call per job), untimed, and answers from its own
state whether every job of a round ran exactly once and when the last one was done.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import DateTime, text

from bench import fill, tasks
from bench.config import Check
from bench.servers import RedisServer
from bench.targets import Queuelog
from bench.worker_pool import PoolFailed, WorkerPool

POLL_S = 0.05  # how often a round asks the queue whether it is done
_CHANGE_LINE = re.compile(
    r" job_changed job_id=(?P<job>\d+) .*\bevent=(?P<event>enqueued|claimed)\b"
    r".* pid=(?P<pid>\d+)$"
)
BIN = Path(sys.executable).parent
DB_ENV = "BENCH_HUEY_DB"  # read by bench/huey_tasks.py
ENQUEUE_BATCH = 500  # queuelog's largest POST /jobs/batch; RQ's enqueue_many gets the same


@dataclass
class Verdict:
    """Whether every job of a round ran exactly once, and when the round ran (wall clock)."""

    check: Check
    first_start: float | None = None  # the first job's handler began (its own clock reading; RQ: started_at)
    last_done: float | None = None  # the queue recorded the last completion

    @property
    def seconds(self) -> float | None:
        """From the first start to the last completion, when every job ran exactly once."""
        if not self.check.ok or self.first_start is None or self.last_done is None:
            return None
        return self.last_done - self.first_start


def wall(value: dt.datetime | None) -> float | None:
    """A naive-UTC or aware datetime as seconds since the epoch."""
    if value is None:
        return None
    return (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).timestamp()


def command(name: str) -> str:
    """A console script of this virtualenv (``queuelog-worker``, ``rq``, ``huey_consumer``)."""
    return str(BIN / name)


class WorkerSystem:
    """What the worker rounds ask of a queue and its worker command."""

    column = ""
    ready_marker = ""  # a line each worker process logs once it is listening
    stop_signal = signal.SIGTERM  # what asks the workers to finish and exit
    # Start the workers afresh for every drain round (see HueyConsumer).
    fresh_workers_each_round = False

    def pool(self, level: int, log_dir: Path) -> WorkerPool:
        return WorkerPool(
            f"{self.column}-{level}", self.argvs(level), self.worker_env(), log_dir, self.ready_marker, self.stop_signal
        )

    def argvs(self, level: int) -> list[list[str]]:
        """One command line per worker process at ``level``."""
        raise NotImplementedError

    def worker_env(self) -> dict[str, str]:
        return {}

    def enqueue(self, count: int) -> list:
        """Enqueue ``count`` no-op jobs at once (untimed); returns their ids."""
        raise NotImplementedError

    def enqueue_one(self, payload: dict):
        """Enqueue one job the way a producer does; returns its id."""
        raise NotImplementedError

    def between_samples(self, last_id) -> None:
        """What the pickup probe lets a system do after a sample, before the worker's idle spell (untimed)."""

    def same_process(self, ids: list) -> dict:
        """For each job of ``ids``: was its claim made by the server process that took its enqueue?

        Empty for a system without server processes of its own (RQ, huey).
        """
        return {}

    def unfinished(self, ids: list) -> int:
        """How many of ``ids`` are still waiting or running (polled while a round runs: cheap)."""
        raise NotImplementedError

    def verify(self, ids: list, what: str, metric: str | None) -> Verdict:
        """Whether every job of ``ids`` ran exactly once; when the first began and the last was done."""
        raise NotImplementedError

    def clear(self) -> None:
        """Forget a finished round, so the next one starts from the same state."""

    def __enter__(self) -> WorkerSystem:
        return self

    def __exit__(self, *exc) -> None:
        """Release connections (and stop the server a system owns)."""


def wait_finished(
    system: WorkerSystem, pool: WorkerPool, ids: list, timeout: float, what: str, metric: str | None
) -> Verdict:
    """Once no job of ``ids`` waits or runs (within ``timeout``), the system's verdict on them."""
    deadline = time.monotonic() + timeout
    while system.unfinished(ids) > 0:
        pool.check_alive()
        if time.monotonic() > deadline:
            raise PoolFailed(
                f"{system.column}: {system.unfinished(ids)} of {len(ids)} jobs unfinished after {timeout:.0f}s"
            )
        time.sleep(POLL_S)
    return system.verify(ids, what, metric)


# --------------------------------------------------------------------------
# queuelog


class QueuelogWorkers(WorkerSystem):
    """``queuelog-worker`` against its own queuelog server, started and stopped with it."""

    ready_marker = "worker started"

    def __init__(self, server: Queuelog):
        self.server = server
        self.column = server.column

    def __enter__(self) -> QueuelogWorkers:
        from queuelog.worker import Client

        self.server.__enter__()
        self.producer = Client(self.server.server.url, self.server.producer)
        self.engine = fill.engine_for(self.server.db_url)
        return self

    def argvs(self, level: int) -> list[list[str]]:
        return [[command("queuelog-worker"), "bench.queuelog_tasks:worker", "--concurrency", str(level)]]

    def worker_env(self) -> dict[str, str]:
        return {"QUEUELOG_URL": self.server.server.url, "QUEUELOG_API_KEY": self.server.worker}

    def enqueue(self, count: int) -> list:
        ids = []
        for start in range(0, count, ENQUEUE_BATCH):
            jobs = [{"type": tasks.JOB_TYPE}] * min(ENQUEUE_BATCH, count - start)
            ids += [job["id"] for job in self.producer.enqueue_batch(jobs)]
        return ids

    def enqueue_one(self, payload: dict):
        return self.producer.enqueue(tasks.JOB_TYPE, payload)["id"]

    def between_samples(self, last_id) -> None:
        # A keep-alive producer would send every sample to the one server process that accepted its
        # connection, so all of a run's samples would find the worker's waiting claim in that process or
        # all in another. A new connection (opened here, untimed) lands on whichever process accepts it.
        self.producer.close()
        self.producer.get_job(last_id)

    def same_process(self, ids: list) -> dict:
        # Every state change's log line names the server process that made it (pid=…).
        wanted = {str(i) for i in ids}
        pids: dict[str, dict[str, str]] = {}
        with open(self.server.server.log_path, encoding="utf-8", errors="replace") as log:
            for line in log:
                found = _CHANGE_LINE.search(line)
                if found and found["job"] in wanted:
                    pids.setdefault(found["job"], {})[found["event"]] = found["pid"]
        return {
            int(job): seen["enqueued"] == seen["claimed"]
            for job, seen in pids.items()
            if "enqueued" in seen and "claimed" in seen
        }

    def unfinished(self, ids: list) -> int:
        with self.engine.connect() as conn:
            return conn.execute(
                text("SELECT COUNT(*) FROM jobs WHERE id BETWEEN :lo AND :hi AND status IN ('pending', 'running')"),
                {"lo": min(ids), "hi": max(ids)},
            ).scalar_one()

    def verify(self, ids: list, what: str, metric: str | None) -> Verdict:
        # One producer enqueues into this database, so a round's ids are one contiguous range.
        span = {"lo": min(ids), "hi": max(ids)}
        with self.engine.connect() as conn:
            statuses = dict(
                conn.execute(
                    text("SELECT status, COUNT(*) FROM jobs WHERE id BETWEEN :lo AND :hi GROUP BY status"), span
                ).all()
            )
            # The event log is the queue's own record of every claim and completion: a job run twice
            # would have two "claimed" events.
            events = {
                event: (n, distinct)
                for event, n, distinct in conn.execute(
                    text(
                        "SELECT event, COUNT(*), COUNT(DISTINCT job_id) FROM job_events "
                        "WHERE job_id BETWEEN :lo AND :hi GROUP BY event"
                    ),
                    span,
                ).all()
            }
            last = conn.execute(
                text("SELECT MAX(completed_at) AS last FROM jobs WHERE id BETWEEN :lo AND :hi").columns(
                    last=DateTime()
                ),
                span,
            ).scalar_one()
            results = conn.execute(text("SELECT result FROM jobs WHERE id BETWEEN :lo AND :hi"), span).scalars()
            starts = [json.loads(r)["ran_at"] for r in results if r]
        n = len(ids)
        ok = (
            len(set(ids)) == n == span["hi"] - span["lo"] + 1
            and statuses == {"completed": n}
            and events.get("claimed") == (n, n)
            and events.get("completed") == (n, n)
        )
        detail = (
            f"{n} jobs: status counts {statuses}, claimed/completed events (all, jobs) "
            f"{events.get('claimed')}/{events.get('completed')}"
        )
        return Verdict(Check(self.column, what, ok, detail, metric), min(starts, default=None), wall(last))

    def __exit__(self, *exc) -> None:
        self.engine.dispose()
        self.server.__exit__(*exc)


# --------------------------------------------------------------------------
# RQ


class RqWorkers(WorkerSystem):
    """N ``rq worker`` processes of one worker class on one logical database of a redis-server."""

    ready_marker = "Listening on"
    queue_name = "bench"

    def __init__(self, column: str, redis: RedisServer, db: int, worker_class: str | None):
        from redis import Redis
        from rq import Queue

        self.column = column
        self.url = redis.url_for(db)
        self.worker_class = worker_class
        self.queue = Queue(self.queue_name, connection=Redis.from_url(self.url))

    def argvs(self, level: int) -> list[list[str]]:
        cls = ["--worker-class", self.worker_class] if self.worker_class else []
        return [[command("rq"), "worker", "--url", self.url, *cls, self.queue_name]] * level

    def enqueue(self, count: int) -> list:
        from rq import Queue

        ids = []
        for start in range(0, count, ENQUEUE_BATCH):
            datas = [Queue.prepare_data(tasks.noop, ({},)) for _ in range(min(ENQUEUE_BATCH, count - start))]
            ids += [job.id for job in self.queue.enqueue_many(datas)]
        return ids

    def enqueue_one(self, payload: dict):
        return self.queue.enqueue(tasks.noop, payload).id

    def _ended(self) -> int:
        from rq.registry import FailedJobRegistry, FinishedJobRegistry

        return sum(
            registry(queue=self.queue).get_job_count(cleanup=False)
            for registry in (FinishedJobRegistry, FailedJobRegistry)
        )

    def unfinished(self, ids: list) -> int:
        return len(ids) - self._ended()

    def verify(self, ids: list, what: str, metric: str | None) -> Verdict:
        from rq.job import Job
        from rq.registry import FailedJobRegistry, StartedJobRegistry

        starts, ends = [], []
        for chunk in range(0, len(ids), ENQUEUE_BATCH):
            for job in Job.fetch_many(ids[chunk : chunk + ENQUEUE_BATCH], connection=self.queue.connection):
                if job is not None and job.get_status(refresh=False) == "finished" and job.ended_at:
                    starts.append(wall(job.started_at))
                    ends.append(wall(job.ended_at))
        failed = FailedJobRegistry(queue=self.queue).get_job_count(cleanup=False)
        started = StartedJobRegistry(queue=self.queue).get_job_count(cleanup=False)
        left = len(self.queue)
        ok = len(ends) == len(ids) == len(set(ids)) and failed == started == left == 0
        detail = f"{len(ends)}/{len(ids)} finished, {failed} failed, {started} still started, {left} left"
        return Verdict(
            Check(self.column, what, ok, detail, metric),
            min(filter(None, starts), default=None),
            max(ends, default=None),
        )

    def clear(self) -> None:
        # Delete the round's jobs, results and registries; keep the workers' own keys
        # (rq:worker:<name>, rq:workers…), which running workers rely on. Not FLUSHDB for that reason.
        conn = self.queue.connection
        doomed = [key for key in conn.scan_iter(match="rq:*", count=1000) if not key.startswith(b"rq:worker")]
        for start in range(0, len(doomed), 1000):
            conn.delete(*doomed[start : start + 1000])

    def __exit__(self, *exc) -> None:
        self.queue.connection.close()


# --------------------------------------------------------------------------
# huey


class HueyConsumer(WorkerSystem):
    """``huey_consumer`` with N threads on a SqliteHuey file."""

    column = "huey_consumer"
    ready_marker = "Huey consumer started"
    stop_signal = signal.SIGINT  # huey's graceful shutdown signal
    # huey's threads poll SqliteHuey, backing off ×1.15 per empty poll up to 10 s: after the other
    # systems' rounds they would sleep for seconds when a round's jobs arrive. A consumer started
    # for the round has been idle for well under a second, and every thread's wait has run out
    # while it was paused for the enqueue, so the round times huey draining, not huey's backoff.
    # (Its pickup probe keeps one consumer: there the backoff is what an idle worker does.)
    fresh_workers_each_round = True

    def __init__(self, work_dir: Path):
        self.db_path = str(work_dir / "huey-workers.db")
        # bench.huey_tasks reads its database from the environment when it is imported, as a user's
        # settings would, and the producer (this process) must import the very module the consumer
        # runs: so the variable is set here, before anything imports it.
        os.environ[DB_ENV] = self.db_path

    @property
    def _tasks(self):
        from bench import huey_tasks

        return huey_tasks

    def argvs(self, level: int) -> list[list[str]]:
        return [[command("huey_consumer"), "bench.huey_tasks.huey", "--worker-type", "thread", "--workers", str(level)]]

    def worker_env(self) -> dict[str, str]:
        return {DB_ENV: self.db_path}

    def enqueue(self, count: int) -> list:
        noop = self._tasks.noop
        return [noop({}).id for _ in range(count)]

    def enqueue_one(self, payload: dict):
        return self._tasks.noop(payload).id

    def unfinished(self, ids: list) -> int:
        return len(ids) - self._tasks.huey.result_count()

    def verify(self, ids: list, what: str, metric: str | None) -> Verdict:
        huey = self._tasks.huey
        results = {key: huey.serializer.deserialize(value) for key, value in huey.all_results().items()}
        left = huey.pending_count()
        # Results are keyed by task id, so a task run twice would not show here; "every task has
        # exactly its one result and nothing is left" is what huey's state can say.
        ok = set(results) == set(ids) and len(set(ids)) == len(ids) and left == 0
        detail = f"{len(results)} results for {len(ids)} tasks, {left} left in queue"
        # huey records no times of its own: the handler's reading is both start and end.
        ran = [r["ran_at"] for r in results.values() if isinstance(r, dict) and "ran_at" in r]
        return Verdict(Check(self.column, what, ok, detail, metric), min(ran, default=None), max(ran, default=None))

    def clear(self) -> None:
        self._tasks.huey.storage.flush_results()

    def __exit__(self, *exc) -> None:
        self._tasks.huey.storage.close()
