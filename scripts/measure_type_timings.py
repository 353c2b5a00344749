"""Query times of the dashboard's chart (1 h, 24 h, 7 days) and the types' wait/run percentiles, with the
type rollups as a million jobs over the last week leave them, on SQLite or PostgreSQL.

    PYTHONPATH=$PWD .venv/bin/python scripts/measure_type_timings.py [--database sqlite|postgresql] [--jobs 1000000]

The pages read only ``type_rollups`` (never the jobs), so this fills that table alone, as the queue's write
path would have for ``--jobs`` jobs spread evenly over the last 7 days, of 4 types: each enqueued, claimed
after a wait (log-normal, median 200 ms) and completed or, one in ten, failed for good after a run
(log-normal, median 2 s); minutes older than 48 hours already pruned, as ``flask purge`` leaves them. The
rows are made by the same bucket and period functions as ``queuelog.queue.rollups.tally`` (on PostgreSQL
spread over its shards). Then times, in-process (no HTTP, no template), the median of ``--rounds`` runs of
each read, on PostgreSQL after a VACUUM. Prints the rollup rows and one line per read, in ms.
"""
from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import tempfile
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

from sqlalchemy import func, insert, select, text

from queuelog import create_app
from queuelog.clock import utcnow
from queuelog.extensions import db
from queuelog.models import TypeRollup
from queuelog.queue.rollups import HOUR, MINUTE, MINUTES_KEPT, SHARDS, period_of
from queuelog.timing_buckets import bucket_of
from queuelog.ui import rollup_stats

TYPES = ("email", "report", "resize-image", "noop")
rollups = TypeRollup.__table__


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory, _database(args.database, directory) as url:
        app = create_app({"DATABASE_URL": url, "JOB_TYPES": list(TYPES), "SECRET_KEY": "measure",
                          "SQLITE_SYNCHRONOUS": "NORMAL", "LOG_FORMAT": "text"})
        with app.app_context():
            started = time.monotonic()
            rows = _fill(args.jobs, SHARDS if args.database == "postgresql" else 1)
            print(f"filled {rows:,} rollup rows for {args.jobs:,} jobs in {time.monotonic() - started:.0f} s")
            if args.database == "postgresql":
                with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                    conn.execute(text("VACUUM ANALYZE type_rollups"))
            now = utcnow()
            reads = {f"chart, {key}": (lambda r=chart_range: rollup_stats.throughput(now, r))
                     for key, chart_range in rollup_stats.RANGES.items()}
            reads["types page: every type's last hour"] = lambda: rollup_stats.last_hour(now)
            reads["one type's page: its last hour"] = lambda: rollup_stats.last_hour(now, "email")
            for name, read in reads.items():
                samples = []
                for _ in range(args.rounds):
                    started = time.perf_counter()
                    read()
                    samples.append(time.perf_counter() - started)
                print(f"{name:<40} {statistics.median(samples) * 1000:>8.1f} ms")


@contextlib.contextmanager
def _database(kind: str, directory: str):
    if kind == "sqlite":
        yield f"sqlite:///{Path(directory) / 'type-timings.db'}"
        return
    from tests.support.pg_cluster import throwaway_cluster

    with throwaway_cluster() as cluster:
        yield cluster.url


def _fill(jobs: int, shards: int) -> int:
    """The rollup rows ``jobs`` jobs over the last 7 days leave; how many rows."""
    now = utcnow()
    week = timedelta(days=7).total_seconds()
    kept_from = period_of(now - MINUTES_KEPT, MINUTE)
    rng = random.Random(7)
    counts: Counter = Counter()
    for i in range(jobs):
        at = now - timedelta(seconds=week * i / jobs)
        job_type = TYPES[i % len(TYPES)]
        shard = rng.randrange(shards)
        wait = timedelta(milliseconds=rng.lognormvariate(5.3, 1.5))     # median ≈ 200 ms
        run = timedelta(milliseconds=rng.lognormvariate(7.6, 1.0))      # median ≈ 2 s
        outcome = "failed" if i % 10 == 0 else "completed"
        minute, hour = period_of(at, MINUTE), period_of(at, HOUR)
        for metric in ("enqueued", outcome):
            counts[(HOUR, metric, hour, job_type, 0, shard)] += 1
            if minute >= kept_from:
                counts[(MINUTE, metric, minute, job_type, 0, shard)] += 1
        if minute >= kept_from:
            counts[(MINUTE, "wait", minute, job_type, bucket_of(wait), shard)] += 1
            counts[(MINUTE, "run", minute, job_type, bucket_of(run), shard)] += 1
    names = ("span", "metric", "period", "type", "bucket", "shard")
    rows = [dict(zip(names, key, strict=True), n=n) for key, n in counts.items()]
    with db.engine.begin() as conn:
        for start in range(0, len(rows), 20_000):
            conn.execute(insert(rollups), rows[start:start + 20_000])
        return conn.execute(select(func.count()).select_from(rollups)).scalar_one()


if __name__ == "__main__":
    main()
