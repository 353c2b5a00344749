"""The history shape of ``python -m bench.soak --shape history``: what a large history of finished jobs costs the
live work, and what removing one day of it costs.

On a database of its own, under the README's production server of the checkout measured, one client times
``--samples`` enqueues (``POST /jobs``) and claims (``POST /jobs/claim``, each then completed) one at a time with
an empty history. Then ``--history`` finished jobs, each with the three events a job's life writes, are copied in
straight by SQL from one job made through the API, their times spread evenly over the last ``DAYS`` days, and
vacuumed as autovacuum would; the same enqueues and claims are timed again. Last, one day of it (the oldest) is
removed by queuelog's own retention (``queuelog.ops.purge``, what ``flask purge`` runs), timed in a process of
the checkout, and the rows it deleted from or updated in ``jobs`` are read from the statistics: the live table's
dead rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import create_engine, text

from bench import tasks
from bench.run import create_database
from bench.servers import PRODUCTION_THREADS, GunicornServer
from bench.targets import create_key

DAYS = 10
WARM_UP = 40
_TIME_COLUMNS = ("run_at", "created_at", "updated_at", "claimed_at", "heartbeat_at", "completed_at")
_TABLE_WRITES = text("SELECT n_tup_del + n_tup_upd FROM pg_stat_user_tables WHERE relname = 'jobs'")
_PURGE_A_DAY = """
import json, sys, time
from datetime import timedelta
from app import app
from queuelog.ops import purge
with app.app_context():
    started = time.perf_counter()
    report = purge.purge(timedelta(hours=int(sys.argv[1])))
    print(json.dumps({"seconds": time.perf_counter() - started, "jobs": report.jobs, "events": report.events}))
"""


def measure(label: str, tree: Path, cluster_url: str, size: int, samples: int, log_dir: Path) -> dict:
    """The figures of the history shape for the checkout in ``tree``."""
    from queuelog.worker import Client

    db_url = create_database(cluster_url, f"history_{label}")
    env = {
        "QUEUELOG_DATABASE_URL": db_url,
        "QUEUELOG_JOB_TYPES": tasks.JOB_TYPE,
        "QUEUELOG_LOG_FORMAT": "text",
        "PYTHONPATH": str(tree),
    }
    server = GunicornServer("app:app", env, log_dir / f"gunicorn-history-{label}.log", PRODUCTION_THREADS, cwd=tree)
    server.start()
    try:
        producer = Client(server.url, create_key(tree, env, "history-producer", "producer"))
        worker = Client(server.url, create_key(tree, env, "history-worker", "worker"))
        _live_work(producer, worker, WARM_UP)  # every server process has served a few, untimed
        empty = _live_work(producer, worker, samples)
        print(f"  empty history: {_summary(empty)}", flush=True)
        started = time.monotonic()
        _fill(db_url, producer, worker, size)
        print(f"  {size:,} finished jobs filled in {time.monotonic() - started:.0f} s", flush=True)
        full = _live_work(producer, worker, samples)
        print(f"  {size:,} in history: {_summary(full)}", flush=True)
    finally:
        server.stop()  # its sessions end and report their counts: the purge's are then all that move them
    removed = _remove_a_day(tree, env, db_url)
    print(
        f"  a day removed: {removed['jobs']:,} jobs, {removed['events']:,} events in {removed['seconds']:.2f} s;"
        f" rows deleted or updated in jobs: {removed['jobs_rows_written']:,}",
        flush=True,
    )
    return {"empty": empty, "full": full, "removed": removed}


def _live_work(producer, worker, samples: int) -> dict[str, list[float]]:
    """Milliseconds of each enqueue and each claim, one at a time; every claimed job is completed."""
    enqueues, claims = [], []
    for _ in range(samples):
        began = time.perf_counter()
        producer.enqueue(tasks.JOB_TYPE)
        enqueues.append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        [job] = worker.claim([tasks.JOB_TYPE])
        claims.append((time.perf_counter() - began) * 1000)
        worker.complete(job["id"], job["claim_token"])
    return {"enqueue": enqueues, "claim": claims}


def _fill(db_url: str, producer, worker, size: int) -> None:
    """``size`` completed jobs copied from one made through the API, with its events, over the last DAYS days."""
    template = producer.enqueue(tasks.JOB_TYPE)
    [job] = worker.claim([tasks.JOB_TYPE])
    worker.complete(job["id"], job["claim_token"], {"ran": True})
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            columns = [
                name
                for (name,) in conn.execute(
                    text(
                        "SELECT column_name FROM information_schema.columns WHERE table_name = 'jobs'"
                        " AND column_name <> 'id' ORDER BY ordinal_position"
                    )
                )
            ]
            first = conn.execute(text("SELECT max(id) FROM jobs")).scalar_one()
            # Day k of DAYS back (k = 1 … DAYS), spread evenly; the oldest day is the one removed later.
            shift = f"(((s.i % {DAYS}) + 1) * interval '1 day')"
            values = [f"t.{c} - {shift}" if c in _TIME_COLUMNS else f"t.{c}" for c in columns]
            conn.execute(
                text(
                    f"INSERT INTO jobs ({', '.join(columns)}) SELECT {', '.join(values)}"
                    " FROM jobs t CROSS JOIN generate_series(1, :n) AS s(i) WHERE t.id = :id"
                ),
                {"n": size, "id": template["id"]},
            )
            conn.execute(
                text(
                    "INSERT INTO job_events (job_id, event, from_status, to_status, actor, attempt, error, at)"
                    " SELECT j.id, e.event, e.from_status, e.to_status, e.actor, e.attempt, e.error, j.updated_at"
                    " FROM jobs j CROSS JOIN (SELECT * FROM job_events WHERE job_id = :id) e WHERE j.id > :first"
                ),
                {"id": template["id"], "first": first},
            )
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE jobs"))
            conn.execute(text("VACUUM ANALYZE job_events"))
    finally:
        engine.dispose()


def _remove_a_day(tree: Path, env: dict[str, str], db_url: str) -> dict:
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            written_before = conn.execute(_TABLE_WRITES).scalar_one()
        done = subprocess.run(
            # The oldest day is DAYS days back; the next, DAYS - 1: half a day between them.
            [sys.executable, "-c", _PURGE_A_DAY, str(DAYS * 24 - 12)],
            cwd=tree,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=3600,
        )
        if done.returncode != 0:
            raise RuntimeError(f"purge failed: {done.stderr[-1000:]}")
        removed = json.loads(done.stdout.strip().splitlines()[-1])
        time.sleep(1.0)  # the purging process reported its counts as it ended; the statistics take them in
        with engine.connect() as conn:
            removed["jobs_rows_written"] = conn.execute(_TABLE_WRITES).scalar_one() - written_before
    finally:
        engine.dispose()
    return removed


def _summary(figures: dict[str, list[float]]) -> str:
    return "  ".join(f"{name} p50 {_q(v, 0.5):.2f} p99 {_q(v, 0.99):.2f} ms" for name, v in figures.items())


def _q(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ratios(figures: dict) -> dict[str, float]:
    """Each of enqueue and claim, p50 and p99, with the history over without it."""
    return {
        f"{name} {label}": _q(figures["full"][name], q) / _q(figures["empty"][name], q)
        for name in ("enqueue", "claim")
        for label, q in (("p50", 0.5), ("p99", 0.99))
    }


def print_verdicts(label: str, figures: dict, size: int) -> None:
    print(f"\n{label}, {size:,} finished jobs in history against none:")
    for name, ratio in ratios(figures).items():
        print(f"  {name:<12} {ratio:.2f}× (contract ≤ 1.1×)")
    removed = figures["removed"]
    print(
        f"  removing a day: {removed['seconds']:.2f} s (contract < 1 s), "
        f"{removed['jobs_rows_written']:,} rows of jobs deleted or updated (contract: none)"
    )
