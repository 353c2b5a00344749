"""Where a pickup's milliseconds go: the shipped worker, idle and waiting, and one job enqueued at a time.

    PYTHONPATH=$PWD .venv/bin/python scripts/measure_pickup_breakdown.py [--samples 80] [--no-postgresql]

For each database, the production command (``gunicorn -w 4 --threads 8 app:app``) and one
``queuelog-worker --concurrency 1`` (bench.queuelog_tasks) as ``bench.run`` starts them. Each sample waits
0.3-0.9 s, as the benchmark's pickup probe does, then enqueues one job and reads four moments, all
against the producer's clock reading just before its request (for all samples, and apart for those whose
claim ran in the server process that took the enqueue and those whose claim ran in another: between
samples the producer reconnects, so its enqueues land on any process):

- *enqueued*: the job's ``enqueued`` event time (the server's clock, taken as the enqueue writes);
- *answered*: the producer has the 201;
- *claimed*: the job's ``claimed`` event time;
- *handler*: the handler's first clock reading (it reports it over UDP, bench.tasks).

Then it times the same server's round trips with no idle time between them and after 0.3-0.6 s of idle:
``GET /healthz`` (no database) and ``POST /jobs``. The gap between the two is what an idle machine
costs every hop of a request, whatever serves it. A figure to read, not a test: it fails on nothing.
"""
from __future__ import annotations

import argparse
import http.client
import json
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import text

from bench import fill
from bench.pickup import Inbox
from bench.servers import databases
from bench.targets import Queuelog
from bench.worker_systems import QueuelogWorkers

IDLE_S = (0.3, 0.9)
MOMENTS = ("enqueued", "answered", "claimed", "handler")
# Every sample, and split by whether the claim was made in the server process that took the enqueue.
PLACEMENTS = ("all", "same process", "other process")


def _seconds(value) -> float:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def pickups(system: QueuelogWorkers, samples: int) -> dict[str, list[float]]:
    """Milliseconds from just before each enqueue request to each moment, one list per moment."""
    samples_taken = []
    with Inbox() as inbox:
        for n in range(samples + 5):   # the first five warm up
            time.sleep(random.uniform(*IDLE_S))
            wall, before = time.time(), time.monotonic()
            job_id = system.enqueue_one({"report_to": inbox.port, "sample": [0, n]})
            answered = time.monotonic()
            started = inbox.wait_for((0, n), 10)
            if n >= 5:
                samples_taken.append((job_id, wall, (answered - before) * 1000, (started - before) * 1000))
            system.between_samples(job_id)   # the next enqueue may land on any server process
    time.sleep(1)   # the last job's completion
    same = system.same_process([taken[0] for taken in samples_taken])
    moments = {where: {name: [] for name in MOMENTS} for where in PLACEMENTS}
    engine = fill.engine_for(system.server.db_url)
    try:
        with engine.connect() as conn:
            for job_id, wall, answered, handler in samples_taken:
                events = dict(conn.execute(text("SELECT event, at FROM job_events WHERE job_id = :id"),
                                           {"id": job_id}).all())
                seen = {"enqueued": (_seconds(events["enqueued"]) - wall) * 1000, "answered": answered,
                        "claimed": (_seconds(events["claimed"]) - wall) * 1000, "handler": handler}
                # A sample whose placement the log did not show counts in "all" only.
                places = {True: ["all", "same process"], False: ["all", "other process"]}.get(same.get(job_id), ["all"])
                for where in places:
                    for name, value in seen.items():
                        moments[where][name].append(value)
    finally:
        engine.dispose()
    return moments


def round_trips(server: Queuelog, idle: bool, count: int) -> dict[str, float]:
    """Median milliseconds of GET /healthz and POST /jobs on one kept-alive connection."""
    host, port = server.server.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    headers = {"Authorization": f"Bearer {server.producer}", "Content-Type": "application/json"}
    body = json.dumps({"type": "noop"})

    def timed(method: str, path: str, **kwargs) -> float:
        if idle:
            time.sleep(random.uniform(0.3, 0.6))
        start = time.perf_counter()
        conn.request(method, path, **kwargs)
        conn.getresponse().read()
        return (time.perf_counter() - start) * 1000

    try:
        for _ in range(0 if idle else 20):   # warm-up
            timed("GET", "/healthz")
        return {"healthz": statistics.median(timed("GET", "/healthz") for _ in range(count)),
                "enqueue": statistics.median(timed("POST", "/jobs", body=body, headers=headers)
                                             for _ in range(count))}
    finally:
        conn.close()


def measure(column: str, url: str, log_dir: Path, samples: int) -> None:
    with QueuelogWorkers(Queuelog(column, url, log_dir, threads=8)) as system:
        pool = system.pool(1, log_dir)
        pool.launch()
        try:
            pool.wait_ready(120)
            moments = pickups(system, samples)
        finally:
            pool.stop()
        busy, after_idle = round_trips(system.server, False, 300), round_trips(system.server, True, 40)
    for where in PLACEMENTS:
        taken = len(moments[where]["handler"])
        print(f"\n{column}, {where}: ms after the producer's clock reading, {taken} samples")
        if not taken:
            continue
        print(f"  {'moment':<10} {'p50':>7} {'p90':>7} {'max':>7}")
        for name in MOMENTS:
            values = sorted(moments[where][name])
            print(f"  {name:<10} {statistics.median(values):7.2f} {values[int(0.9 * (len(values) - 1))]:7.2f} "
                  f"{values[-1]:7.2f}")
    for what in ("healthz", "enqueue"):
        print(f"  {what} round trip, median: {busy[what]:.2f} ms back to back, {after_idle[what]:.2f} ms after "
              f"0.3-0.6 s idle ({after_idle[what] / busy[what]:.1f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=80)
    parser.add_argument("--no-postgresql", action="store_true")
    args = parser.parse_args()
    log_dir = Path(tempfile.mkdtemp(prefix="pickup-breakdown-"))
    for column, url in databases(log_dir, postgresql=not args.no_postgresql):
        measure(column, url, log_dir, args.samples)
    print(f"\nlogs: {log_dir}")


if __name__ == "__main__":
    main()
