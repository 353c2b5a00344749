"""What the type rollups cost: the rollup step over a busy hour, and the pages' reads at a million jobs.

    PYTHONPATH=$PWD .venv/bin/python scripts/measure_type_timings.py [--database sqlite|postgresql]
        [--jobs 1000000] [--hour-events 100000] [--rounds 20]

1. The step over a busy hour: a new database gets ``--hour-events`` events in one hour (each job enqueued,
   claimed after a wait, completed or, one in ten, failed for good after a run: three events), ending two
   hours ago; one ``roll_up`` of 60 minutes is timed (the first, which writes the rows), then again after
   moving the mark back (the same minutes recomputed and replaced).
2. The reads at ``--jobs`` jobs: a new database gets that many jobs spread evenly over the last 7 days with
   their events (4 types; wait log-normal, median 200 ms; run log-normal, median 2 s); the rollup step then
   catches up the whole week one step (an hour) at a time, as a server's ticker would after the upgrade
   (the slowest step and the total are printed); minutes older than 48 hours are pruned as ``flask purge``
   would. Then each read, in-process (no HTTP, no template), the median of ``--rounds`` runs: the chart (1 h,
   24 h, 7 days) and the types' last hour, each the rollups plus the minutes after the mark read live from
   the events (the mark is set a minute back, so two minutes are read live, as on a server).
On PostgreSQL a throwaway cluster (tests/support/pg_cluster.py), VACUUM ANALYZE after each fill.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import func, insert, select, text, update

from queuelog import create_app
from queuelog.clock import utcnow
from queuelog.extensions import db
from queuelog.models import Job, JobEvent, RollupMark, TypeRollup
from queuelog.queue import rollups
from queuelog.queue.rollups import MINUTE, period_of
from queuelog.ui import rollup_stats

TYPES = ("email", "report", "resize-image", "noop")
jobs_t, events_t, rollups_t, marks_t = Job.__table__, JobEvent.__table__, TypeRollup.__table__, RollupMark.__table__


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--hour-events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--skip", choices=("step", "reads"), help="leave one part out")
    args = parser.parse_args()
    if args.skip != "step":
        with _app(args.database) as app, app.app_context():
            _measure_step(args.database, args.hour_events)
    if args.skip != "reads":
        with _app(args.database) as app, app.app_context():
            _measure_reads(args.database, args.jobs, args.rounds)


def _measure_step(kind: str, events: int) -> None:
    now = utcnow()
    end = rollups.as_time(period_of(now, MINUTE) - 120 * MINUTE)
    jobs = events // 3
    started = time.monotonic()
    _fill(jobs, end - timedelta(hours=1), end)
    _analyze(kind)
    print(f"busy hour: {jobs * 3:,} events ({jobs:,} jobs) filled in {time.monotonic() - started:.0f} s")
    first = period_of(end - timedelta(hours=1), MINUTE)
    _set_mark(first)
    started = time.perf_counter()
    rolled = rollups.roll_up(now, most=60)
    took = time.perf_counter() - started
    print(f"roll_up of {rolled.minutes} minutes ({jobs * 3:,} events): {took * 1000:.0f} ms")
    with db.engine.connect() as conn:   # the part of it outside the write transaction
        started = time.perf_counter()
        rollups.fold(conn, first, first + 60 * MINUTE)
        folding = time.perf_counter() - started
    print(f"  of which reading and folding the events (no lock held): {folding * 1000:.0f} ms; "
          f"the write transaction: about {(took - folding) * 1000:.0f} ms")
    _set_mark(first)
    started = time.perf_counter()
    rollups.roll_up(now, most=60)
    print(f"the same 60 minutes rolled again (replaced): {(time.perf_counter() - started) * 1000:.0f} ms")


def _measure_reads(kind: str, jobs: int, rounds: int) -> None:
    now = utcnow()
    started = time.monotonic()
    _fill(jobs, now - timedelta(days=7), now - timedelta(seconds=1))
    _analyze(kind)
    print(f"filled {jobs:,} jobs ({jobs * 3:,} events) over 7 days in {time.monotonic() - started:.0f} s")
    steps: list[float] = []
    started = time.monotonic()
    while True:
        began = time.perf_counter()
        rolled = rollups.roll_up(utcnow())
        steps.append(time.perf_counter() - began)
        if rolled.minutes < rollups.MOST_MINUTES:
            break
    print(f"caught up 7 days in {len(steps)} steps, {time.monotonic() - started:.1f} s "
          f"(slowest step {max(steps) * 1000:.0f} ms, median {statistics.median(steps) * 1000:.0f} ms)")
    pruned = rollups.prune(utcnow())
    with db.engine.connect() as conn:
        stored = conn.execute(select(func.count()).select_from(rollups_t)).scalar_one()
    print(f"{stored:,} rollup rows after pruning {pruned:,} (minutes past 48 h)")
    _set_mark(rollups.closed_before(utcnow()) - MINUTE)   # two minutes read live, as on a server
    _analyze(kind)
    now = utcnow()
    reads = {f"chart, {key}": (lambda r=chart_range: rollup_stats.throughput(now, r))
             for key, chart_range in rollup_stats.RANGES.items()}
    reads["types page: every type's last hour"] = lambda: rollup_stats.last_hour(now)
    reads["one type's page: its last hour"] = lambda: rollup_stats.last_hour(now, "email")
    for name, read in reads.items():
        samples = []
        for _ in range(rounds):
            began = time.perf_counter()
            read()
            samples.append(time.perf_counter() - began)
        print(f"{name:<40} {statistics.median(samples) * 1000:>8.1f} ms")


@contextlib.contextmanager
def _app(kind: str):
    with tempfile.TemporaryDirectory() as directory, _database(kind, directory) as url:
        yield create_app({"DATABASE_URL": url, "JOB_TYPES": list(TYPES), "SECRET_KEY": "measure",
                          "SQLITE_SYNCHRONOUS": "NORMAL", "LOG_FORMAT": "text"})


@contextlib.contextmanager
def _database(kind: str, directory: str):
    if kind == "sqlite":
        yield f"sqlite:///{Path(directory) / 'type-timings.db'}"
        return
    from tests.support.pg_cluster import throwaway_cluster

    with throwaway_cluster() as cluster:
        yield cluster.url


def _fill(jobs: int, start: datetime, end: datetime) -> None:
    """``jobs`` finished jobs enqueued evenly over [start, end), each with its three events."""
    rng = random.Random(7)
    span = (end - start).total_seconds()
    with db.engine.connect() as conn:
        first_id = (conn.execute(select(func.max(jobs_t.c.id))).scalar() or 0) + 1
    chunk = 20_000
    for offset in range(0, jobs, chunk):
        job_rows, event_rows = [], []
        for i in range(offset, min(jobs, offset + chunk)):
            job_id = first_id + i
            created = start + timedelta(seconds=span * i / jobs)
            claimed = created + timedelta(milliseconds=rng.lognormvariate(5.3, 1.5))    # median ≈ 200 ms
            ended = claimed + timedelta(milliseconds=rng.lognormvariate(7.6, 1.0))      # median ≈ 2 s
            outcome = "failed" if i % 10 == 0 else "completed"
            job_rows.append({"id": job_id, "type": TYPES[i % len(TYPES)], "payload": json.dumps({}),
                             "priority": 0, "status": outcome, "retry_count": 0, "max_retries": 0,
                             "stall_count": 0, "run_at": created, "created_at": created, "updated_at": ended,
                             "claimed_at": claimed, "completed_at": ended})
            for event, to_status, at in (("enqueued", "pending", created), ("claimed", "running", claimed),
                                         (outcome, outcome, ended)):
                event_rows.append({"job_id": job_id, "event": event, "to_status": to_status, "actor": "measure",
                                   "attempt": 0, "at": at})
        with db.engine.begin() as conn:
            conn.execute(insert(jobs_t), job_rows)
            conn.execute(insert(events_t), event_rows)


def _set_mark(through: int) -> None:
    with db.engine.begin() as conn:
        if conn.execute(update(marks_t).values(through=through)).rowcount == 0:
            conn.execute(insert(marks_t).values(name=rollups.MARK, through=through))


def _analyze(kind: str) -> None:
    if kind == "postgresql":
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE"))
    else:
        with db.engine.begin() as conn:
            conn.execute(text("ANALYZE"))


if __name__ == "__main__":
    main()
