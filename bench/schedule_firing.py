"""Measure one server process's ticker under the default schedules cap: N every-second schedules for S seconds.

Prints the jobs fired per second, how late each tick's job was enqueued (p50/p99/max), the ticks skipped
(no job: a gap of more than a second between a schedule's jobs), and the latency of a producer's enqueue
(POST /jobs through the app, every 50 ms on a thread beside the ticker, as a gthread worker's request).

    python -m bench.schedule_firing                    # SQLite, then PostgreSQL (a throwaway cluster)
    python -m bench.schedule_firing --no-postgresql
    python -m bench.schedule_firing --quick            # a smoke test: 20 schedules for 3 s, SQLite only
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

from sqlalchemy import select, update

from bench.servers import databases
from bench.targets import percentile
from queuelog import create_app, schedules
from queuelog.auth.keys import create_key
from queuelog.core.clock import utcnow
from queuelog.extensions import db
from queuelog.models import Job, Schedule
from queuelog.schedules import ticker

PROBE_SECONDS = 0.05


def probe(app, secret: str, stop: threading.Event, latencies: list[float]) -> None:
    """Enqueue one job every PROBE_SECONDS and record how long each request took."""
    client = app.test_client()
    headers = {"Authorization": f"Bearer {secret}"}
    while not stop.is_set():
        began = time.perf_counter()
        response = client.post("/jobs", json={"type": "email", "payload": {}}, headers=headers)
        latencies.append(time.perf_counter() - began)
        assert response.status_code == 201, response.get_json()
        stop.wait(PROBE_SECONDS)


def measure(name: str, url: str, count: int, seconds: float) -> None:
    app = create_app(
        {
            "DATABASE_URL": url,
            "JOB_TYPES": ["email", "noop"],
            "SECRET_KEY": "measure",
            "LOG_FORMAT": "text",
            "MAX_SCHEDULES": max(count, 1000),
        }
    )
    for logger in ("queuelog.jobs", "queuelog.request"):
        logging.getLogger(logger).setLevel(logging.WARNING)  # a line per job would drown the figures
    table = Schedule.__table__
    with app.app_context():
        for index in range(count):
            schedules.create_schedule(
                {"name": f"every-second-{index:04d}", "every_seconds": 1, "job": {"type": "noop"}, "paused": True}
            )
        secret = create_key("probe", "producer")
        # Resumed at once, all due on the same whole second: the ticker's worst case.
        first = utcnow().replace(microsecond=0) + timedelta(seconds=2)
        with db.engine.begin() as conn:
            conn.execute(update(table).values(paused=False, next_run_at=first))
        stop_ticker = ticker.start(app)
        stop_probe, latencies = threading.Event(), []
        prober = threading.Thread(target=probe, args=(app, secret, stop_probe, latencies))
        prober.start()
        time.sleep(max(0.0, (first - utcnow()).total_seconds()) + seconds)
        with db.engine.begin() as conn:
            conn.execute(update(table).values(paused=True))
        stopped = utcnow()
        stop_probe.set()
        prober.join()
        stop_ticker.set()
        time.sleep(ticker.TICK_SECONDS * 4)
        with db.engine.connect() as conn:
            jobs = conn.execute(
                select(Job.schedule, Job.scheduled_for, Job.created_at).where(Job.schedule.is_not(None))
            ).all()
    late = [(job.created_at - job.scheduled_for).total_seconds() for job in jobs]
    fired = {(job.schedule, job.scheduled_for) for job in jobs}
    # Skipped: a tick with no job, up to 2 s before the pause (later ones may still have been in flight).
    span = (stopped - first).total_seconds()
    ticks = [first + timedelta(seconds=second) for second in range(int(span) - 1)]
    skipped = sum((f"every-second-{index:04d}", tick) not in fired for index in range(count) for tick in ticks)
    print(
        f"{name}: {count} every-second schedules, {span:.1f} s: {len(jobs)} jobs, {len(jobs) / span:.0f} jobs/s; "
        f"lateness p50 {statistics.median(late):.3f} s, p99 {percentile(late, 99):.3f} s, "
        f"max {max(late):.3f} s; ticks skipped {skipped}"
    )
    print(
        f"enqueue beside the ticker ({len(latencies)} requests): p50 {statistics.median(latencies) * 1000:.1f} ms, "
        f"p99 {percentile(latencies, 99) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--no-postgresql", action="store_true", help="SQLite only")
    parser.add_argument("--quick", action="store_true", help="20 schedules for 3 s on SQLite: does it still run?")
    args = parser.parse_args()
    count, seconds = (20, 3.0) if args.quick else (args.schedules, args.seconds)
    with tempfile.TemporaryDirectory() as directory:
        for name, url in databases(Path(directory), postgresql=not (args.quick or args.no_postgresql)):
            measure(name, url, count, seconds)


if __name__ == "__main__":
    main()
