"""The peers: huey (SqliteHuey) and RQ (SimpleWorker on a local redis-server).

Both run the same no-op job as queuelog, the same job count and the same
concurrency, with their own real worker machinery: huey's ``Consumer`` with
process workers, RQ's ``SimpleWorker`` in burst mode, one per process.

The no-op task returns ``time.monotonic()`` as its result, so "last
completion" is read from the peers' own result stores after the run instead
of by polling, which would add load and granularity to the measurement.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from bench.config import Check, Config
from bench.procs import fmt_rate, run_processes, split

# --------------------------------------------------------------------------
# huey


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
        while time.monotonic() < deadline:  # bounded wait for the drain
            if huey.result_count() >= arg["total"]:
                break
            time.sleep(0.05)
    finally:
        consumer.stop(graceful=True)
    results = {k: huey.serializer.deserialize(v) for k, v in huey.all_results().items()}
    huey.storage.close()
    return {"ids": list(results), "end": max(results.values(), default=None), "errors": 0}


def huey_round(db_path: str, jobs: int, workers: int, enqueue_clients: int,
               timeout: float) -> dict:
    """Enqueue ``jobs`` no-op tasks, then drain them with ``workers`` processes."""
    args = [{"db_path": db_path, "count": c, "first": sum(split(jobs, enqueue_clients)[:i])}
            for i, c in enumerate(split(jobs, enqueue_clients))]
    enq = run_processes(_huey_enqueue_worker, args, timeout)
    enqueued = [i for r in enq.results for i in r["ids"]]
    drain = run_processes(_huey_consumer_worker, [{
        "db_path": db_path, "workers": workers, "total": len(enqueued), "timeout": timeout}], timeout + 30)
    done = drain.results[0]["ids"]
    huey, _ = make_huey(db_path)
    left = huey.pending_count()
    huey.storage.close()
    return {
        "enqueue_rate": jobs / enq.elapsed if enq.elapsed else None,
        "e2e_rate": len(done) / drain.elapsed if drain.elapsed else None,
        # huey keys results by task id, so a task run twice would not show
        # up as a duplicate here; "every task has a result" is what we check.
        "ok": set(done) == set(enqueued) and left == 0,
        "detail": f"{len(done)}/{len(enqueued)} results, {left} left in queue",
    }


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
            datas = [Queue.prepare_data(rq_noop, (first + i,))
                     for i in range(start, min(start + batch, count))]
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


def rq_round(redis_url: str, jobs: int, workers: int, enqueue_clients: int,
             batch: int, timeout: float) -> dict:
    """Enqueue ``jobs`` (singly or via ``enqueue_many``), drain with SimpleWorkers."""
    from rq.job import Job
    from rq.registry import FailedJobRegistry

    queue = _rq_queue(redis_url)
    queue.connection.flushdb()  # a fresh round; this redis is ours alone
    parts = split(jobs, enqueue_clients)
    args = [{"redis_url": redis_url, "count": c, "batch": batch, "first": sum(parts[:i])}
            for i, c in enumerate(parts)]
    enq = run_processes(_rq_enqueue_worker, args, timeout)
    enqueued = [i for r in enq.results for i in r["ids"]]
    drain = run_processes(_rq_worker, [{"redis_url": redis_url}] * workers, timeout)
    # Burst workers exit when the queue is empty; the real end is the last
    # job's own completion timestamp, read back from RQ's result store.
    ends, finished = [], 0
    for chunk in range(0, len(enqueued), 500):
        for job in Job.fetch_many(enqueued[chunk:chunk + 500], connection=queue.connection):
            if job is not None and job.get_status() == "finished":
                finished += 1
                ends.append(job.return_value())
    failed = len(FailedJobRegistry(queue=queue))
    return {
        "enqueue_rate": jobs / enq.elapsed if enq.elapsed else None,
        "e2e_rate": None if not ends else finished / (max(ends) - drain.start),
        "ok": finished == len(enqueued) == jobs and failed == 0 and len(queue) == 0,
        "detail": f"{finished}/{jobs} finished, {failed} failed, {len(queue)} left",
    }


# --------------------------------------------------------------------------
# Whole peer runs, shaped like bench.targets.run_queuelog


def run_huey(cfg: Config, work_dir: Path) -> tuple[dict, list[Check]]:
    """One fresh SqliteHuey file per worker count; huey has no batch enqueue."""
    metrics: dict = {}
    checks: list[Check] = []
    for workers in cfg.workers:
        db_path = str(work_dir / f"huey-w{workers}.db")
        res = huey_round(db_path, cfg.jobs, workers, cfg.enqueue_clients, cfg.timeout)
        metrics.setdefault("enqueue_1", res["enqueue_rate"])
        metrics[f"e2e_single_w{workers}"] = res["e2e_rate"]
        print(f"[bench] huey: {workers} workers: enqueue {fmt_rate(res['enqueue_rate'])}/s, "
              f"drain {fmt_rate(res['e2e_rate'])} jobs/s", flush=True)
        checks.append(Check("huey", f"{workers} workers", res["ok"], res["detail"],
                            f"e2e_single_w{workers}"))
    return metrics, checks


def run_rq(cfg: Config, redis_url: str) -> tuple[dict, list[Check]]:
    """Like queuelog: each drain round is filled by the next enqueue mode."""
    metrics: dict = {}
    checks: list[Check] = []
    modes = list(cfg.enqueue_batches)
    for idx in range(max(len(cfg.workers), len(modes))):
        batch = modes[idx] if idx < len(modes) else 1
        workers = cfg.workers[idx] if idx < len(cfg.workers) else max(cfg.workers)
        res = rq_round(redis_url, cfg.jobs, workers, cfg.enqueue_clients, batch, cfg.timeout)
        if idx < len(modes):
            metrics[f"enqueue_{batch}"] = res["enqueue_rate"]
        if idx < len(cfg.workers):
            metrics[f"e2e_single_w{workers}"] = res["e2e_rate"]
        print(f"[bench] rq: enqueue batch={batch} {fmt_rate(res['enqueue_rate'])}/s, "
              f"{workers} workers drain {fmt_rate(res['e2e_rate'])} jobs/s", flush=True)
        checks.append(Check("rq", f"{workers} workers", res["ok"], res["detail"],
                            f"e2e_single_w{workers}" if idx < len(cfg.workers) else None))
    return metrics, checks
