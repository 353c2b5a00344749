"""Query times of the Workers page and the dashboard's figures at 1M jobs, on SQLite or PostgreSQL.

    PYTHONPATH=$PWD .venv/bin/python scripts/measure_operator_pages.py [--database sqlite|postgresql] [--jobs 1000000]

Fills a new database as scripts/measure_error_pages.py does (80% completed, 10% failed, 5% pending, 5%
cancelled over the last week, so about 140,000 jobs finished in the last day), then hands the finished jobs
to 10 worker keys with one registered process each, makes one pending job in 50 running (half of them with
their lease run out: stalled) and one in 10 scheduled an hour ahead. Times, in-process (no HTTP, no
template), the median of ``--rounds`` runs of each read the Workers page and the dashboard make.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure_error_pages import TYPES, database, fill, timed, vacuum  # noqa: E402

from queuelog import create_app, keys, worker_processes  # noqa: E402
from queuelog.clock import utcnow  # noqa: E402
from queuelog.database.transactions import write_transaction  # noqa: E402
from queuelog.ui import stats  # noqa: E402

WORKERS = 10


def hand_out(jobs: int) -> None:
    """Workers and processes for the finished jobs; some pending jobs running (half stalled) or scheduled."""
    process_ids = []
    for n in range(WORKERS):
        caller = keys.authenticate(keys.create_key(f"worker-{n}", "worker"))
        process_ids.append(worker_processes.register(caller, worker_processes.NewProcess(
            host=f"box-{n}", pid=1000 + n, version="measure", concurrency=8, types=())).id)
    which = "CASE id % {n} {whens} END".format(
        n=WORKERS, whens=" ".join(f"WHEN {n} THEN {pid}" for n, pid in enumerate(process_ids)))
    now = utcnow()
    with write_transaction() as conn:
        conn.execute(text(f"UPDATE jobs SET worker_id = 'worker-' || (id % {WORKERS}), process_id = {which},"
                          " claimed_at = created_at WHERE status IN ('completed', 'failed')"))
        conn.execute(text(f"UPDATE jobs SET status = 'running', worker_id = 'worker-' || (id % {WORKERS}),"
                          f" process_id = {which}, claimed_at = :now, heartbeat_at = :now,"
                          " lease_expires_at = CASE WHEN id % 2 = 0 THEN :past ELSE :ahead END"
                          " WHERE status = 'pending' AND id % 50 = 38"),
                     {"now": now, "past": now - timedelta(days=1), "ahead": now + timedelta(days=365)})
        conn.execute(text("UPDATE jobs SET run_at = :ahead WHERE status = 'pending' AND id % 10 = 8"),
                     {"ahead": now + timedelta(hours=1)})
        conn.execute(text("ANALYZE"))


def reads() -> dict:
    """Each read the Workers page and the dashboard make."""
    def dashboard_figures():
        now = utcnow()
        counts = stats.job_counts()
        stats.oldest_due(now, counts)
        stats.pending_split(now)
        stats.stalled_jobs(now)

    counts = stats.job_counts()
    return {
        "Workers page: processes, what each holds, done/failed in the last hour and day":
            lambda: worker_processes.with_work(worker_processes.list_for(None)),
        "Workers page: worker keys, what each holds, done/failed (all time)": stats.workers,
        "Dashboard: counts by type and status": stats.job_counts,
        "Dashboard: oldest due job (tile = queuelog_oldest_pending_age_seconds)":
            lambda: stats.oldest_due(utcnow(), counts),
        "Dashboard: stalled jobs (count and the first 10)": lambda: stats.stalled_jobs(utcnow()),
        "Dashboard: every figure above together": dashboard_figures,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory, database(args.database, directory) as url:
        app = create_app({"DATABASE_URL": url, "JOB_TYPES": list(TYPES), "SECRET_KEY": "measure",
                          "LOG_FORMAT": "text"})
        with app.app_context():
            seconds = fill(args.jobs)
            hand_out(args.jobs)
            if args.database == "postgresql":
                vacuum()
            print(f"{args.database}: {args.jobs:,} jobs filled in {seconds:.0f} s; median of {args.rounds} runs:")
            for name, read in reads().items():
                print(f"  {timed(read, args.rounds):>9.1f} ms  {name}")


if __name__ == "__main__":
    main()
