"""Query times of the Top errors page and the jobs page's new filters at 1M jobs, on SQLite or PostgreSQL.

    PYTHONPATH=$PWD .venv/bin/python scripts/measure_error_pages.py [--database sqlite|postgresql] [--jobs 1000000]

Fills a new database (a temporary SQLite file, or a throwaway PostgreSQL cluster from tests/support) with
``--jobs`` jobs straight in SQL: 80% completed, 10% failed, 5% pending, 5% cancelled, of 4 types, over the
last week, each failed job with one of 60 error texts (30 causes once masked: the numbers and hosts differ)
and its stored error_group, as the fail path writes it; every 10th pending job waits to retry after an
error. Then times, in-process (no HTTP, no template), the median of ``--rounds`` runs of each read the pages
make, on PostgreSQL once more before and after a VACUUM (what autovacuum does to a table at rest). Prints one
line per read, in ms.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from pathlib import Path

from sqlalchemy import text

from queuelog import create_app
from queuelog.database.transactions import write_transaction
from queuelog.error_groups import error_group
from queuelog.payload_match import PayloadMatch
from queuelog.ui.listing import JobSearch, count_matching, find_jobs
from queuelog.ui.top_errors import top_errors

TYPES = ("email", "report", "resize-image", "noop")
CAUSES = 30


def _errors() -> list[tuple[str, str]]:
    """60 error texts, two per cause (differing in numbers and hosts), with their groups."""
    texts = []
    for cause in range(CAUSES):
        for variant in (1, 2):
            texts.append(f"Error{cause}: timeout after {variant * 7}s talking to 10.0.{cause}.{variant}"
                         f" for 'customer_{variant * 31}'")
    return [(error, error_group(error)) for error in texts]


FILL = {
    # i runs over 0..jobs-1; status by i % 20: 0-15 completed, 16-17 failed, 18 pending, 19 cancelled.
    "sqlite": """
WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i + 1 < :jobs)
INSERT INTO jobs (type, payload, priority, status, retry_count, max_retries, stall_count, concurrency_key, fair_tag,
                  error, error_group, run_at, created_at, updated_at)
SELECT CASE i % 4 WHEN 0 THEN 'email' WHEN 1 THEN 'report' WHEN 2 THEN 'resize-image' ELSE 'noop' END,
       '{"customer_id": ' || (i % 1000) || ', "order": {"id": "o-' || i || '"}}', 0,
       CASE WHEN i % 20 < 16 THEN 'completed' WHEN i % 20 < 18 THEN 'failed' WHEN i % 20 = 18 THEN 'pending'
            ELSE 'cancelled' END,
       0, 3, 0, '', i,
       CASE WHEN i % 20 IN (16, 17) OR (i % 200 = 18) THEN e.error END,
       CASE WHEN i % 20 IN (16, 17) OR (i % 200 = 18) THEN e.grp END,
       strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (i % 10080) || ' minutes'),
       strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (i % 10080) || ' minutes'),
       strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (i % 10080) || ' minutes')
  FROM s JOIN bench_errors e ON e.n = (i / 20) % 60""",
    "postgresql": """
INSERT INTO jobs (type, payload, priority, status, retry_count, max_retries, stall_count, concurrency_key, fair_tag,
                  error, error_group, run_at, created_at, updated_at)
SELECT (ARRAY['email', 'report', 'resize-image', 'noop'])[i % 4 + 1],
       '{"customer_id": ' || (i % 1000) || ', "order": {"id": "o-' || i || '"}}', 0,
       CASE WHEN i % 20 < 16 THEN 'completed' WHEN i % 20 < 18 THEN 'failed' WHEN i % 20 = 18 THEN 'pending'
            ELSE 'cancelled' END,
       0, 3, 0, '', i,
       CASE WHEN i % 20 IN (16, 17) OR (i % 200 = 18) THEN e.error END,
       CASE WHEN i % 20 IN (16, 17) OR (i % 200 = 18) THEN e.grp END,
       now() AT TIME ZONE 'UTC' - (i % 10080) * interval '1 minute',
       now() AT TIME ZONE 'UTC' - (i % 10080) * interval '1 minute',
       now() AT TIME ZONE 'UTC' - (i % 10080) * interval '1 minute'
  FROM generate_series(0, :jobs - 1) AS s(i) JOIN bench_errors e ON e.n = (i / 20) % 60""",
}


def fill(jobs: int) -> float:
    """Fill the jobs table; returns the seconds it took."""
    started = time.perf_counter()
    with write_transaction() as conn:
        conn.execute(text("CREATE TEMPORARY TABLE bench_errors (n INTEGER PRIMARY KEY, error TEXT, grp TEXT)"))
        conn.execute(text("INSERT INTO bench_errors VALUES (:n, :error, :grp)"),
                     [{"n": n, "error": error, "grp": grp} for n, (error, grp) in enumerate(_errors())])
        conn.execute(text(FILL[conn.dialect.name]), {"jobs": jobs})
    with write_transaction() as conn:
        conn.execute(text("ANALYZE"))
    return time.perf_counter() - started


def vacuum() -> None:
    """What autovacuum does to a table at rest (PostgreSQL): marks its pages all-visible, so that a read
    served by an index alone need not visit the table (an index-only scan)."""
    from queuelog.extensions import db

    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE jobs")


def timed(read, rounds: int) -> float:
    """The median milliseconds of ``rounds`` runs of ``read()`` (after one untimed warm-up)."""
    read()
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        read()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def reads() -> dict:
    """Each read the Top errors page and the jobs page's new filters make, by what an operator does."""
    biggest = top_errors()[0].group
    group = JobSearch(status="failed", group=biggest)
    return {
        "Top errors page (50 largest groups, types, first/last seen, waiting)": top_errors,
        "jobs of one group, first page (link from Top errors)": lambda: find_jobs(group, 50, None),
        "count for 'Retry all in this group' (capped at 10,001)": lambda: count_matching(group, ("failed",), 10_001),
        "error contains 'timeout after 14s', failed, first page":
            lambda: find_jobs(JobSearch(status="failed", error="timeout after 14s"), 50, None),
        "error contains a text no job has, failed (reads every failed job's error)":
            lambda: find_jobs(JobSearch(status="failed", error="no such text"), 50, None),
        "payload customer_id = 42, first page":
            lambda: find_jobs(JobSearch(payload=PayloadMatch.parse("customer_id", "42")), 50, None),
        "payload order.id = \"o-17\" (one job: scans every job)":
            lambda: find_jobs(JobSearch(payload=PayloadMatch.parse("order.id", '"o-17"')), 50, None),
    }


@contextlib.contextmanager
def database(kind: str, directory: str):
    if kind == "sqlite":
        yield f"sqlite:///{Path(directory) / 'error-pages.db'}"
        return
    from tests.support.pg_cluster import throwaway_cluster

    with throwaway_cluster() as cluster:  # its own directory, which the postgres user may enter
        yield cluster.url


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
            print(f"{args.database}: {args.jobs:,} jobs filled in {seconds:.0f} s; median of {args.rounds} runs:")
            if args.database == "postgresql":
                print(f"  {timed(top_errors, args.rounds):>9.1f} ms  Top errors page, right after the fill"
                      " (before autovacuum: every row read from the table)")
                vacuum()
            for name, read in reads().items():
                print(f"  {timed(read, args.rounds):>9.1f} ms  {name}")


if __name__ == "__main__":
    main()
