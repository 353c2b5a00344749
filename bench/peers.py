"""The peers: huey (SqliteHuey) and RQ (SimpleWorker on a local redis-server).

Both run the same no-op job as queuelog, the same job count and the same
concurrency, with their own real worker machinery: huey's ``Consumer`` with
process workers, RQ's ``SimpleWorker`` in burst mode, one per process.  In an
end-to-end round the jobs are enqueued one per call by as many processes as
there are workers (huey has no batch enqueue; RQ's ``enqueue_many`` is only
used by the enqueue-only rounds), so both are compared with queuelog's
single path and batch path alike.

The no-op task returns ``time.monotonic()`` as its result, so "last
completion" is read from the peers' own result stores after the run instead
of by polling, which would add load and granularity to the measurement.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from bench.config import Check, Config
from bench.procs import run_processes, split
from bench.servers import RedisServer
from bench.system import System

# --------------------------------------------------------------------------
# huey

STALL_S = 5.0  # no new result for this long with an empty queue = lost task


def make_huey(db_path: str):
    """A SqliteHuey with the no-op task registered (same name in every process)."""
    from huey import SqliteHuey

    huey = SqliteHuey(name="bench", filename=db_path)

    @huey.task(name="noop")
    def noop(n):  # the result is the completion timestamp; see module docstring
        return time.monotonic()

    return huey, noop


def _huey_enqueue_worker(arg: dict, go: Callable[[], float]) -> dict:
    huey, noop = make_huey(arg["db_path"])
    ids, end = [], None
    go()
    for i in range(arg["count"]):
        ids.append(noop(arg["first"] + i).id)
        end = time.monotonic()
    huey.storage.close()
    return {"ids": ids, "end": end, "errors": 0}


def _huey_consumer_worker(arg: dict, go: Callable[[], float]) -> dict:
    """Run huey's real Consumer until every task has a stored result."""
    from huey.consumer import Consumer

    huey, _ = make_huey(arg["db_path"])
    # periodic=False: no scheduler work that queuelog's workers do not do
    # either; health checks stay on, as in a default deployment.
    consumer = Consumer(huey, workers=arg["workers"], worker_type="process", periodic=False)
    go()
    consumer.start()
    try:
        deadline = time.monotonic() + arg["timeout"]
        seen, last_change = -1, time.monotonic()
        while time.monotonic() < deadline:  # bounded wait for the drain
            count = huey.result_count()
            if count >= arg["total"]:
                break
            if count != seen:
                seen, last_change = count, time.monotonic()
            elif time.monotonic() - last_change > STALL_S and huey.pending_count() == 0:
                # Queue empty, no result for a while: a task was lost (huey
                # drops a dequeued task when SQLite says "database is locked").
                break
            time.sleep(0.05)
    finally:
        consumer.stop(graceful=True)
    results = {k: huey.serializer.deserialize(v) for k, v in huey.all_results().items()}
    huey.storage.close()
    return {"ids": list(results), "end": max(results.values(), default=None), "errors": 0}


class Huey(System):
    """SqliteHuey in a temp dir; a fresh database file for every round."""

    column = "huey"
    discard_untimed = True  # enqueue() starts a fresh database file

    def __init__(self, work_dir: Path):
        self.work_dir = work_dir
        self.db_path = ""
        self.rounds = 0

    def enqueue(self, jobs: int, batch: int, clients: int, cfg: Config) -> tuple[float, list]:
        self.rounds += 1
        self.db_path = str(self.work_dir / f"huey-{self.rounds}.db")
        parts = split(jobs, clients)
        args = [{"db_path": self.db_path, "count": c, "first": sum(parts[:i])} for i, c in enumerate(parts) if c]
        run = run_processes(_huey_enqueue_worker, args, cfg.timeout)
        return run.elapsed, [i for r in run.results for i in r["ids"]]

    def drain(
        self, path: str, workers: int, ids: list, cfg: Config, metric: str | None
    ) -> tuple[float | None, list[Check]]:
        run = run_processes(
            _huey_consumer_worker,
            [{"db_path": self.db_path, "workers": workers, "total": len(ids), "timeout": cfg.timeout}],
            cfg.timeout + 30,
        )
        done = run.results[0]["ids"]
        huey, _ = make_huey(self.db_path)
        left = huey.pending_count()
        huey.storage.close()
        # huey keys results by task id, so a task run twice would not show
        # up as a duplicate here; "every task has a result" is what we check.
        check = Check(
            self.column,
            f"{workers} workers",
            set(done) == set(ids) and left == 0,
            f"{len(done)}/{len(ids)} results, {left} left in queue",
            metric,
        )
        return run.elapsed or None, [check]


# --------------------------------------------------------------------------
# RQ


def rq_noop(n):
    """The RQ job: must be importable by dotted path for the worker."""
    return time.monotonic()


def _rq_queue(redis_url: str):
    from redis import Redis
    from rq import Queue

    return Queue("bench", connection=Redis.from_url(redis_url))


def _rq_enqueue_worker(arg: dict, go: Callable[[], float]) -> dict:
    from rq import Queue

    queue = _rq_queue(arg["redis_url"])
    ids, end = [], None
    count, batch, first = arg["count"], arg["batch"], arg["first"]
    go()
    if batch == 1:
        for i in range(count):
            ids.append(queue.enqueue(rq_noop, first + i).id)
            end = time.monotonic()
    else:
        # RQ's own batch API: one Redis pipeline per batch.
        for start in range(0, count, batch):
            datas = [Queue.prepare_data(rq_noop, (first + i,)) for i in range(start, min(start + batch, count))]
            ids.extend(j.id for j in queue.enqueue_many(datas))
            end = time.monotonic()
    return {"ids": ids, "end": end, "errors": 0}


def _rq_worker(arg: dict, go: Callable[[], float]) -> dict:
    from rq import SimpleWorker

    queue = _rq_queue(arg["redis_url"])
    worker = SimpleWorker([queue], connection=queue.connection)
    go()
    worker.work(burst=True, logging_level="WARNING")
    return {"ids": [], "end": None, "errors": 0}


class Rq(System):
    """RQ on its own throwaway redis-server; the database is flushed per round."""

    column = "rq"
    enqueue_batches = frozenset({1, 50, 100, 500})  # via Queue.enqueue_many
    discard_untimed = True  # enqueue() flushes the private redis first

    def __init__(self, work_dir: Path, log_dir: Path):
        self.redis = RedisServer(work_dir, log_dir / "redis.log")

    def __enter__(self) -> Rq:
        self.redis.start()
        return self

    def __exit__(self, *exc) -> None:
        self.redis.stop()

    def enqueue(self, jobs: int, batch: int, clients: int, cfg: Config) -> tuple[float, list]:
        _rq_queue(self.redis.url).connection.flushdb()  # this redis is ours alone
        parts = split(jobs, clients)
        args = [
            {"redis_url": self.redis.url, "count": c, "batch": batch, "first": sum(parts[:i])}
            for i, c in enumerate(parts)
            if c
        ]
        run = run_processes(_rq_enqueue_worker, args, cfg.timeout)
        return run.elapsed, [i for r in run.results for i in r["ids"]]

    def drain(
        self, path: str, workers: int, ids: list, cfg: Config, metric: str | None
    ) -> tuple[float | None, list[Check]]:
        from rq.job import Job
        from rq.registry import FailedJobRegistry

        queue = _rq_queue(self.redis.url)
        run = run_processes(_rq_worker, [{"redis_url": self.redis.url}] * workers, cfg.timeout)
        # Burst workers exit when the queue is empty; the real end is the last
        # job's own completion timestamp, read back from RQ's result store.
        ends = []
        for chunk in range(0, len(ids), 500):
            for job in Job.fetch_many(ids[chunk : chunk + 500], connection=queue.connection):
                if job is not None and job.get_status() == "finished":
                    ends.append(job.return_value())
        failed, left = len(FailedJobRegistry(queue=queue)), len(queue)
        check = Check(
            self.column,
            f"{workers} workers",
            len(ends) == len(ids) and failed == 0 and left == 0,
            f"{len(ends)}/{len(ids)} finished, {failed} failed, {left} left",
            metric,
        )
        return (max(ends) - run.start if ends else None), [check]
