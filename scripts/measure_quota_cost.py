"""What a producer quota costs one enqueue: single enqueues timed in-process, with and without quotas.

    PYTHONPATH=$PWD .venv/bin/python scripts/measure_quota_cost.py [--database-url URL] [--rounds 1000]

Each round enqueues one job through ``queuelog.queue.enqueue`` (the whole enqueue: its transaction,
the quota's statements, the insert and the commit; not HTTP) for every variant in turn, so the variants
share the machine's noise; each measured job is cancelled afterwards (untimed), so every key's backlog of
pending jobs stays what it was filled to. Prints the median and 90th percentile per variant, in µs.
Run it on an older checkout with ``--variants none`` to compare a key without quotas before and after.
Without --database-url it uses a new SQLite file (synchronous=NORMAL, so disk flushes do not drown the
difference) in a temporary directory.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from queuelog import create_app, queue
from queuelog.keys import authenticate, create_key

# name: (quota options, pending jobs the key holds throughout)
VARIANTS = {
    "none": ({}, 100),
    "rate": ({"enqueue_rate": "1000000000/60"}, 100),
    "pending (backlog 100)": ({"max_pending": 1_000_000_000}, 100),
    "pending (backlog 10000)": ({"max_pending": 1_000_000_000}, 10_000),
    "rate+pending (backlog 100)": ({"enqueue_rate": "1000000000/60", "max_pending": 1_000_000_000}, 100),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url")
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names of VARIANTS")
    args = parser.parse_args()
    chosen = [name.strip() for name in args.variants.split(",")]
    with tempfile.TemporaryDirectory() as directory:
        url = args.database_url or f"sqlite:///{Path(directory) / 'quota-cost.db'}"
        app = create_app({"DATABASE_URL": url, "JOB_TYPES": ["email"], "SECRET_KEY": "measure",
                          "SQLITE_SYNCHRONOUS": "NORMAL", "LOG_FORMAT": "text"})
        with app.app_context():
            callers = {name: _filled_key(index, *VARIANTS[name]) for index, name in enumerate(chosen)}
            timings = _measure(callers, args.rounds)
    print(f"{'variant':<30} {'median µs':>10} {'p90 µs':>10}   ({args.rounds} enqueues each, {url.split(':')[0]})")
    for name in chosen:
        samples = sorted(timings[name])
        p90 = samples[int(len(samples) * 0.9)]
        print(f"{name:<30} {statistics.median(samples) / 1000:>10.0f} {p90 / 1000:>10.0f}")


def _filled_key(index: int, quota: dict, backlog: int):
    """A producer key with ``quota`` holding ``backlog`` pending jobs; its verified Caller."""
    caller = authenticate(create_key(f"measured-{index}", "producer", **quota))
    for start in range(0, backlog, 500):
        queue.enqueue(caller, [queue.NewJob("email", {})] * min(500, backlog - start), batch=True)
    return caller


def _measure(callers: dict, rounds: int) -> dict[str, list[int]]:
    timings: dict[str, list[int]] = {name: [] for name in callers}
    for _ in range(rounds):
        for name, caller in callers.items():
            started = time.perf_counter_ns()
            job = queue.enqueue(caller, [queue.NewJob("email", {})])[0].job
            timings[name].append(time.perf_counter_ns() - started)
            queue.cancel(job.id, "measure")
    return timings


if __name__ == "__main__":
    main()
