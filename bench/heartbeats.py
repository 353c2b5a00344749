"""What heartbeats cost the jobs table on PostgreSQL: how many were HOT updates, and how much the table and its
indexes grew.

    .venv/bin/python -m bench.heartbeats [--jobs 200] [--rounds 20] [--quick]

It starts a throwaway PostgreSQL cluster and builds the app in this process on it: the figures are the
database's, the same whichever way the requests arrive. It enqueues and claims ``--jobs`` jobs and vacuums
the table. Then it sends ``--rounds`` heartbeats for each running job through the API. It prints the
heartbeats sent, how many the statistics counted as HOT updates (a new row version on the same page, no index
entry written), and the size of the table and of its indexes before and after. A figure to read: it fails
only on an API error. ``--quick`` (tests/benchmarks/test_bench_heartbeats.py) runs 20 jobs × 3 rounds.
"""

from __future__ import annotations

import argparse
import logging
import sys

from sqlalchemy import text

from bench.servers import postgres_cluster
from tests.support.table_stats import updates_of

_SIZES = "SELECT pg_table_size('jobs'), pg_indexes_size('jobs')"


def measure(url: str, jobs: int, rounds: int) -> dict:
    from queuelog import create_app
    from queuelog.auth.keys import create_key
    from queuelog.extensions import db

    app = create_app({"DATABASE_URL": url, "JOB_TYPES": ["email"], "SECRET_KEY": "bench", "LOG_FORMAT": "text"})
    logging.getLogger("queuelog").setLevel(logging.WARNING)  # a line per request would bury the figures
    with app.app_context():
        client = app.test_client()
        producer = {"Authorization": "Bearer " + create_key("bench-producer", "producer", None, None)}
        worker = {"Authorization": "Bearer " + create_key("bench-worker", "worker", None, None)}
        _ok(client.post("/jobs/batch", json={"jobs": [{"type": "email"}] * jobs}, headers=producer))
        running = []
        while len(running) < jobs:
            running += _ok(client.post("/jobs/claim", json={"limit": 100}, headers=worker))["jobs"]
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE jobs")
        updated, hot = updates_of(db.engine)
        before = _sizes(db.engine)
        for _ in range(rounds):
            for job in running:
                body = {"claim_token": job["claim_token"]}
                _ok(client.post(f"/jobs/{job['id']}/heartbeat", json=body, headers=worker))
        updated_after, hot_after = updates_of(db.engine)
        after = _sizes(db.engine)
        db.engine.dispose()
    return {
        "heartbeats": jobs * rounds,
        "updates": updated_after - updated,
        "hot": hot_after - hot,
        "table_kb": (before[0] // 1024, after[0] // 1024),
        "indexes_kb": (before[1] // 1024, after[1] // 1024),
    }


def _ok(response) -> dict:
    if response.status_code not in (200, 201):
        raise SystemExit(f"{response.request.path}: {response.status_code} {response.get_data(as_text=True)}")
    return response.get_json()


def _sizes(engine) -> tuple[int, int]:
    with engine.connect() as conn:
        return tuple(conn.execute(text(_SIZES)).one())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.heartbeats", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200, help="running jobs that heartbeat (default 200)")
    parser.add_argument("--rounds", type=int, default=20, help="heartbeats per job (default 20)")
    parser.add_argument("--quick", action="store_true", help="20 jobs x 3 rounds: a smoke test")
    args = parser.parse_args(argv)
    jobs, rounds = (20, 3) if args.quick else (args.jobs, args.rounds)
    with postgres_cluster() as url:
        if url is None:
            print("no PostgreSQL on this machine: nothing to measure")
            return 1
        figures = measure(url, jobs, rounds)
    print(f"{figures['heartbeats']} heartbeats on {jobs} running jobs, {rounds} each")
    print(f"  updates of jobs       {figures['updates']:>8}")
    print(f"  of them HOT           {figures['hot']:>8}")
    print(f"  table, KiB            {figures['table_kb'][0]:>8} -> {figures['table_kb'][1]}")
    print(f"  indexes, KiB          {figures['indexes_kb'][0]:>8} -> {figures['indexes_kb'][1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
