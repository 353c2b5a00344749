"""Claim (or enqueue) latency of two checkouts of queuelog on the same data, measured in turns.

    .venv/bin/python -m bench.claim_compare --before /path/to/main --after . [--dialect postgresql --pg-url URL]
        [--measure enqueue] [--after-names-process] [--clock cpu]

Each checkout runs in its own child process (its own ``PYTHONPATH``), on its own database migrated by its
own code and filled with the same pending jobs (``--pending``, one type, one priority, like the
benchmark's fill). The parent then asks the two children for ``--claims`` single claims at a time, in
turns (who goes first alternates), ``--rounds`` times; each claimed job is completed outside the timing.
Timed is ``queue.claim`` in the child: the claim's own cost, without HTTP around it. With ``--measure
enqueue``, single ``queue.enqueue`` calls of one job are timed instead. With ``--after-names-process`` the
"after" checkout registers a worker process and its claims name it (``process_id``, as queuelog-worker's do).
Prints p50 / p90 per checkout and the ratio of their medians.

``--clock cpu`` times each call by the child thread's CPU time (``time.thread_time``) instead of the wall
clock: on a shared, loaded machine the wall clock also counts the time other processes held the CPU, and
the fsync a commit waits for, which swamp a difference of tens of microseconds; the CPU clock leaves both
out (so it also leaves out what an extra page to sync costs: compare with the wall clock too).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import create_engine, make_url, text

_FILL = {
    "postgresql": """
        INSERT INTO jobs (type, payload, priority, status, retry_count, max_retries, stall_count,
                          run_at, created_at, updated_at)
        SELECT 'email', '{}', 0, 'pending', 0, 3, 0, now() AT TIME ZONE 'utc' - interval '1 minute',
               now() AT TIME ZONE 'utc', now() AT TIME ZONE 'utc'
        FROM generate_series(1, :total)""",
    "sqlite": """
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :total)
        INSERT INTO jobs (type, payload, priority, status, retry_count, max_retries, stall_count,
                          run_at, created_at, updated_at)
        SELECT 'email', '{}', 0, 'pending', 0, 3, 0, datetime('now', '-1 minute'), datetime('now'),
               datetime('now')
        FROM n""",
}


def child(database_url: str, pending: int, clock_name: str = "wall") -> None:
    """Serve "claim N" / "enqueue N" lines on stdin with a JSON list of N latencies (ms) on stdout.

    ``pending`` 0: the database is already filled (``--reuse``). ``clock_name``: "wall" or "cpu" (this thread's).
    """
    clock = time.thread_time if clock_name == "cpu" else time.perf_counter
    import queuelog
    from queuelog import create_app, queue
    from queuelog.auth.keys import authenticate, create_key

    print(
        f"[claim_compare] measuring {queuelog.__file__} on {make_url(database_url).get_backend_name()}",
        file=sys.stderr,
        flush=True,
    )
    app = create_app(
        {"DATABASE_URL": database_url, "JOB_TYPES": ["email"], "SECRET_KEY": "compare", "LOG_FORMAT": "text"}
    )
    import logging

    logging.disable(logging.INFO)
    with app.app_context():
        from queuelog.extensions import db

        if pending:
            with db.engine.begin() as conn:
                conn.execute(text(_FILL[db.engine.dialect.name]), {"total": pending})
            with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.exec_driver_sql("ANALYZE")
        caller = authenticate(create_key(f"compare-worker-{time.time_ns()}", "worker"))
        claim_options = {}
        if os.environ.get("CLAIM_COMPARE_PROCESS"):
            from queuelog.queue import worker_processes

            claim_options["process"] = worker_processes.register(
                caller,
                worker_processes.NewProcess(
                    host="compare", pid=os.getpid(), version="compare", concurrency=1, types=()
                ),
            ).id
        producer = authenticate(create_key(f"compare-producer-{time.time_ns()}", "producer"))
        print("ready", flush=True)
        for line in sys.stdin:
            what, count = line.split()
            latencies = []
            for _ in range(int(count)):
                started = clock()
                if what == "enqueue":
                    queue.enqueue(producer, [queue.NewJob(type="email", payload={})])
                    latencies.append((clock() - started) * 1000)
                else:
                    [job] = queue.claim(caller, **claim_options)
                    latencies.append((clock() - started) * 1000)
                    queue.complete(caller, job.id, job.claim_token)
            print(json.dumps(latencies), flush=True)


def _database(dialect: str, pg_url: str | None, name: str, directory: Path, reuse: bool) -> str:
    if dialect == "sqlite":
        return f"sqlite:///{directory / (name + '.db')}"
    if not reuse:
        admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        admin.dispose()
    return make_url(pg_url).set(database=name).render_as_string(hide_password=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="checkout measured as the baseline")
    parser.add_argument("--after", required=True, help="checkout measured against it")
    parser.add_argument("--dialect", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--pg-url", help="a PostgreSQL server URL (databases are created on it)")
    parser.add_argument("--pending", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--claims", type=int, default=50, help="calls per turn")
    parser.add_argument("--measure", choices=("claim", "enqueue"), default="claim")
    parser.add_argument(
        "--after-names-process",
        action="store_true",
        help="the after checkout's claims name a registered worker process (process_id)",
    )
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="time calls by the wall clock or by the child thread's CPU time",
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="PostgreSQL: measure on the databases a previous run filled (each has fewer pending)",
    )
    args = parser.parse_args()
    if args.dialect == "postgresql" and not args.pg_url:
        parser.error("--pg-url is needed for postgresql")
    if args.reuse and args.dialect != "postgresql":
        parser.error("--reuse works with postgresql only (SQLite files are temporary)")

    with tempfile.TemporaryDirectory() as directory:
        children = {}
        for label, checkout in (("before", args.before), ("after", args.after)):
            url = _database(args.dialect, args.pg_url, f"claim_compare_{label}", Path(directory), args.reuse)
            env = {**os.environ, "PYTHONPATH": str(Path(checkout).resolve())}
            if label == "after" and args.after_names_process:
                env["CLAIM_COMPARE_PROCESS"] = "1"
            # This file runs as a script in the child, so that ``queuelog`` is the checkout's (PYTHONPATH).
            children[label] = subprocess.Popen(
                [sys.executable, __file__, "--child", url, str(0 if args.reuse else args.pending), args.clock],
                cwd=str(Path(checkout).resolve()),
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        for label, process in children.items():
            line = process.stdout.readline().strip()
            if line != "ready":
                raise SystemExit(f"{label} did not start: {line!r}")
        samples: dict[str, list[float]] = {"before": [], "after": []}
        order = ["before", "after"]
        for _ in range(args.rounds):
            for label in order:
                process = children[label]
                process.stdin.write(f"{args.measure} {args.claims}\n")
                process.stdin.flush()
                samples[label].extend(json.loads(process.stdout.readline()))
            order.reverse()
        for process in children.values():
            process.stdin.close()
            process.wait(timeout=60)

    print(
        f"{args.measure}, {args.dialect}, {args.pending:,} pending, {args.rounds} rounds of {args.claims} "
        f"calls each, in turns, {args.clock} clock"
    )
    for label in ("before", "after"):
        values = sorted(samples[label])
        p50 = statistics.median(values)
        p90 = values[int(len(values) * 0.9)]
        print(f"  {label:6} p50 {p50:.3f} ms  p90 {p90:.3f} ms  ({len(values)} calls)")
    ratio = statistics.median(samples["after"]) / statistics.median(samples["before"])
    print(f"  after / before (p50): {ratio:.3f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], int(sys.argv[3]), *sys.argv[4:5])
    else:
        main()
