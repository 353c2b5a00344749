"""A pickup stage by stage: when each process on the path reached each step, one job enqueued at a time.

    PYTHONPATH=$PWD .venv/bin/python scripts/measure_pickup_stages.py [--samples 60] [--no-postgresql]

As measure_pickup_breakdown.py does: the production command (``gunicorn -w 4 --threads 8 app:app``), one idle
``queuelog-worker --concurrency 1``, a job enqueued after 0.3-0.9 s of idle, the producer reconnecting between
samples. Every process it starts loads scripts/pickup_stages/sitecustomize.py, which stamps the entry and exit
of the functions a pickup passes through (gunicorn's request handling, the key lookup, the enqueue, the wake-up,
the claim, the WAL's fsync, the response hooks, the worker's claim and slot), all on CLOCK_MONOTONIC, the
clock of the producer's reading and of the handler's report.

For the samples whose claim ran in another server process than the enqueue (most of them), it prints each
stage's milliseconds after the producer's clock reading, by role: E the process that took the enqueue, C the
one holding the waiting claim, K the worker. A figure to read, not a test: it fails on nothing.
"""
from __future__ import annotations

import argparse
import collections
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from bench.pickup import Inbox
from bench.servers import databases
from bench.targets import Queuelog, percentile
from bench.worker_systems import QueuelogWorkers

IDLE_S = (0.3, 0.9)
WARM_UP = 5
STAMPS_HOME = Path(__file__).resolve().parent / "pickup_stages"
WORKER_STAGES = {"claim answered", "jobs taken", "slot starts job"}


def samples(system: QueuelogWorkers, count: int) -> list[tuple[float, float]]:
    """(producer's clock reading, handler's start) of each sample, CLOCK_MONOTONIC seconds."""
    taken = []
    with Inbox() as inbox:
        for n in range(count + WARM_UP):
            time.sleep(random.uniform(*IDLE_S))
            before = time.monotonic()
            job_id = system.enqueue_one({"report_to": inbox.port, "sample": [0, n]})
            started = inbox.wait_for((0, n), 10)
            if n >= WARM_UP:
                taken.append((before, started))
            system.between_samples(job_id)
    return taken


def read_stamps(directory: Path) -> dict[int, list[tuple[float, str]]]:
    stamps = {}
    for path in directory.glob("*.stamps"):
        with open(path, encoding="utf-8") as lines:
            stamps[int(path.stem)] = [(float(at), stage) for at, stage in (line.rstrip("\n").split(" ", 1)
                                                                       for line in lines)]
    return stamps


def stages_by_role(taken: list[tuple[float, float]], stamps: dict[int, list[tuple[float, str]]]):
    """Per (role, stage), the milliseconds after each other-process sample's start; and the count of samples
    whose claim ran in the enqueue's process (their stages would mix, so they are only counted)."""
    worker = {pid for pid, seen in stamps.items() if any(stage in WORKER_STAGES for _, stage in seen)}
    seen_at: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    same_process = 0
    for before, started in taken:
        window = {pid: [(at, stage) for at, stage in seen if before <= at <= started] for pid, seen in stamps.items()}
        enqueuer = next((pid for pid, seen in window.items() if any(s == "enqueue" for _, s in seen)), None)
        claimer = next((pid for pid, seen in window.items() if pid != enqueuer and pid not in worker
                        and any(s == "claim" for _, s in seen)), None)
        if enqueuer is None or claimer is None:
            same_process += 1
            continue
        roles = {enqueuer: "E", claimer: "C", **{pid: "K" for pid in worker}}
        for pid, role in roles.items():
            firsts: dict[str, float] = {}
            for at, stage in window.get(pid, []):
                firsts.setdefault(stage, at)
            for stage, at in firsts.items():
                seen_at[(role, stage)].append((at - before) * 1000)
        seen_at[("K", "handler starts")].append((started - before) * 1000)
    return seen_at, same_process


def measure(column: str, url: str, log_dir: Path, count: int) -> None:
    stamps_dir = Path(tempfile.mkdtemp(prefix="stamps-", dir=log_dir))
    saved = {name: os.environ.get(name) for name in ("PYTHONPATH", "QUEUELOG_STAGE_STAMPS")}
    # Read when the server and the worker are made: their environments are copies of this one.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(STAMPS_HOME), saved["PYTHONPATH"]) if p)
    os.environ["QUEUELOG_STAGE_STAMPS"] = str(stamps_dir)
    try:
        with QueuelogWorkers(Queuelog(column, url, log_dir, threads=8)) as system:
            pool = system.pool(1, log_dir)
            pool.launch()
            try:
                pool.wait_ready(120)
                taken = samples(system, count)
            finally:
                pool.stop()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    seen_at, same_process = stages_by_role(taken, read_stamps(stamps_dir))
    print(f"\n{column}: ms after the producer's clock reading, the {len(taken) - same_process} of {len(taken)} "
          f"samples claimed in another server process (E enqueue's process, C the waiting claim's, K the worker)")
    print(f"  {'stage':<32} {'n':>3} {'p50':>7} {'p90':>7}")
    for (role, stage), values in sorted(seen_at.items(), key=lambda item: statistics.median(item[1])):
        print(f"  {role + ' ' + stage:<32} {len(values):>3} {statistics.median(values):7.2f} "
              f"{percentile(sorted(values), 90):7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--no-postgresql", action="store_true")
    args = parser.parse_args()
    log_dir = Path(tempfile.mkdtemp(prefix="pickup-stages-"))
    for column, url in databases(log_dir, postgresql=not args.no_postgresql):
        measure(column, url, log_dir, args.samples)
    print(f"\nlogs: {log_dir}")


if __name__ == "__main__":
    main()
