"""What the type rollups cost the queue's write path: enqueue, claim and complete timed in-process.

    PYTHONPATH=$PWD .venv/bin/python scripts/measure_rollup_cost.py [--postgres] [--rounds 1000] [--batch 100]

Each round enqueues one job, claims it and completes it through ``queuelog.queue`` (the whole operation: its
transaction, its statements and the commit; not HTTP), then does the same for ``--batch`` jobs at once
(one batch enqueue, one claim of ``--batch``, one ``complete_many``). Prints the median and 90th percentile of
each, in µs. Run it with PYTHONPATH on a checkout before the rollups and on one with them to compare: it
uses nothing the rollups added. With --paired (a checkout with the rollups) every round runs twice in this one
process, once with the rollups and once with ``rollups.tally`` made a no-op, so both see the same noise.
SQLite: a new file with synchronous=NORMAL (so disk flushes do not drown
the difference); --postgres: a throwaway cluster (tests/support/pg_cluster.py).
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from pathlib import Path

from queuelog import create_app, queue
from queuelog.keys import authenticate, create_key

STEPS = ("enqueue", "claim", "complete", "enqueue batch", "claim batch", "complete batch")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--paired", action="store_true", help="alternate rounds with and without the rollups")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory, _database(args.postgres, directory) as url:
        app = create_app({"DATABASE_URL": url, "JOB_TYPES": ["email"], "SECRET_KEY": "measure",
                          "SQLITE_SYNCHRONOUS": "NORMAL", "LOG_FORMAT": "text"})
        with app.app_context():
            runs = _measure(args.rounds, args.batch, args.paired)
    for variant, timings in runs.items():
        print(f"{variant + ':' if variant else 'step'} {'median µs':>10} {'p90 µs':>10}   ({args.rounds} rounds,"
              f" batch {args.batch}, {url.split(':')[0]})")
        for step in STEPS:
            samples = sorted(timings[step])
            print(f"  {step:<16} {statistics.median(samples) / 1000:>10.0f}"
                  f" {samples[int(len(samples) * 0.9)] / 1000:>10.0f}")


@contextlib.contextmanager
def _database(postgres: bool, directory: str):
    if not postgres:
        yield f"sqlite:///{Path(directory) / 'rollup-cost.db'}"
        return
    from tests.support.pg_cluster import throwaway_cluster

    with throwaway_cluster() as cluster:
        yield cluster.url


def _measure(rounds: int, batch: int, paired: bool) -> dict[str, dict[str, list[int]]]:
    producer = authenticate(create_key("measured-producer", "producer"))
    worker = authenticate(create_key("measured-worker", "worker"))
    variants = ["with rollups", "without"] if paired else [""]
    runs = {variant: {step: [] for step in STEPS} for variant in variants}
    if paired:
        from queuelog.queue import rollups
        tally = rollups.tally
    for _ in range(rounds):
        for variant in variants:
            if paired:
                rollups.tally = tally if variant == "with rollups" else (lambda *args, **kwargs: None)
            _round(producer, worker, batch, runs[variant])
    return runs


def _round(producer, worker, batch: int, timings: dict[str, list[int]]) -> None:
    def timed(step: str, call):
        started = time.perf_counter_ns()
        result = call()
        timings[step].append(time.perf_counter_ns() - started)
        return result

    timed("enqueue", lambda: queue.enqueue(producer, [queue.NewJob("email", {})]))
    (job,) = timed("claim", lambda: queue.claim(worker, ["email"], 1))
    timed("complete", lambda job=job: queue.complete(worker, job.id, job.claim_token))
    timed("enqueue batch", lambda: queue.enqueue(producer, [queue.NewJob("email", {})] * batch, batch=True))
    jobs = timed("claim batch", lambda: queue.claim(worker, ["email"], batch))
    timed("complete batch", lambda jobs=jobs: queue.complete_many(
        worker, [(row.id, row.claim_token, None) for row in jobs]))


if __name__ == "__main__":
    main()
