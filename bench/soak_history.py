"""The history shape of ``python -m bench.soak --shape history``: what a large history of finished jobs costs the
live work, and what removing one day of it costs.

Two databases of its own, each under its own README production server of the checkout measured: one keeps an
empty history; into the other ``--history`` finished jobs, each with the three events a job's life writes, are
copied straight by SQL from one job made through the API, their times spread evenly over the last ``DAYS``
days, vacuumed as autovacuum would and checkpointed (a history that grew over months is long on disk). Then one
client times ``--samples`` enqueues (``POST /jobs``) and claims (``POST /jobs/claim``, each then completed) one
at a time on each, taking turns sample by sample, so that the machine's swings fall on both alike. The full
one's server then stays up while the admin pages are timed on every checkout's in turns (bench/history_pages.py).
Last, one day of the full one's history (the oldest) is removed by queuelog's own retention (whole days where
the checkout keeps history in days, else ``queuelog.ops.purge``, what ``flask purge`` runs), timed in a process
of the checkout, and the rows it deleted from or updated in the live table are read from the statistics: its
dead rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, text

from bench import history_pages, tasks
from bench.run import create_database
from bench.servers import PRODUCTION_THREADS, GunicornServer
from bench.targets import create_key

DAYS = 10
WARM_UP = 40
_TIME_COLUMNS = ("run_at", "created_at", "updated_at", "claimed_at", "heartbeat_at", "completed_at")
#: The table the live work reads and writes: ``jobs_live`` where history is apart (docs/storage.md), else ``jobs``.
_LIVE_TABLE = "coalesce(to_regclass('jobs_live')::text, 'jobs')"
_TABLE_WRITES = text(f"SELECT n_tup_del + n_tup_upd FROM pg_stat_user_tables WHERE relname = {_LIVE_TABLE}")
#: Removing the oldest day, as the checkout's own retention does it: whole days where it keeps history in days
#: (ops/retention.py), else row by row (``queuelog.ops.purge``, what ``flask purge`` runs).
_REMOVE_A_DAY = """
import json, sys, time
from datetime import timedelta
from app import app
from queuelog.core.clock import utcnow
with app.app_context():
    started = time.perf_counter()
    try:
        from queuelog.ops import retention
    except ImportError:
        from queuelog.ops import purge
        report = purge.purge(timedelta(hours=int(sys.argv[1])))
    else:
        midnight = utcnow().replace(tzinfo=None, hour=0, minute=0, second=0, microsecond=0)
        report = retention.drop_days_before(midnight - timedelta(days=int(sys.argv[2]) - 1))
    print(json.dumps({"seconds": time.perf_counter() - started, "jobs": report.jobs, "events": report.events}))
"""
#: Where history is kept in days, the days the fill's times fall in are made first, as retention makes each day.
_MAKE_PAST_DAYS = """
import sys
from datetime import timedelta
from app import app
from queuelog.core.clock import utcnow
from queuelog.database.transactions import write_transaction
from queuelog.sql import partitions
with app.app_context():
    midnight = utcnow().replace(tzinfo=None, hour=0, minute=0, second=0, microsecond=0)
    for back in range(int(sys.argv[1]) + 1, 0, -1):
        for table in (partitions.JOBS, partitions.EVENTS):
            with write_transaction() as conn:
                partitions.make_day(conn, table, midnight - timedelta(days=back), midnight - timedelta(days=back - 1))
"""

#: Where the checkout sums each closed day for Top errors (sql/closed_days.py), the pages are timed once every day
#: of the fill is summed, as a server that has run a while has them: its retention step sums three a minute, and
#: leaves a day the fill's vacuum still holds to the next minute. This waits for that, and helps it along.
_SUM_CLOSED_DAYS = """
import time
from app import app
from queuelog.core.clock import utcnow
from queuelog.database.transactions import write_transaction
from queuelog.ops import retention
from queuelog.sql import closed_days
with app.app_context():
    started = time.perf_counter()
    while True:
        now = utcnow().replace(tzinfo=None)
        with write_transaction() as conn:
            if not closed_days.days_to_sum(conn, now):
                break
        if time.perf_counter() - started > 900:
            raise SystemExit("closed days were still not summed after 900 s")
        retention.sum_closed_days(now)
        time.sleep(1)
    print(f"{time.perf_counter() - started:.1f}")
"""


@dataclass(frozen=True)
class Measured:
    """A checkout's live work timed beside its empty and full histories; its full history's server still serves,
    so that the pages are timed beside another checkout's (history_pages.measure), then ``finish``."""

    figures: dict[str, dict[str, list[float]]]
    site: history_pages.Site
    server: GunicornServer


def measure(label: str, tree: Path, cluster_url: str, size: int, samples: int, log_dir: Path) -> Measured:
    """The live work of the history shape for the checkout in ``tree``."""
    from queuelog.worker import Client

    servers, clients, env_full = [], {}, {}
    try:
        for side in ("empty", "full"):
            db_url = create_database(cluster_url, f"history_{label}_{side}")
            env = {
                "QUEUELOG_DATABASE_URL": db_url,
                "QUEUELOG_JOB_TYPES": tasks.JOB_TYPE,
                "QUEUELOG_LOG_FORMAT": "text",
                # The server's own retention (where it has one) keeps every day filled: the day removed is this
                # shape's to time, and the history stays the size asked for.
                "QUEUELOG_RETENTION": f"{DAYS + 5}d",
                "PYTHONPATH": str(tree),
            }
            log = log_dir / f"gunicorn-history-{label}-{side}.log"
            server = GunicornServer("app:app", env, log, PRODUCTION_THREADS, cwd=tree)
            servers.append(server)
            server.start()
            producer = Client(server.url, create_key(tree, env, "history-producer", "producer"))
            worker = Client(server.url, create_key(tree, env, "history-worker", "worker"))
            clients[side] = (producer, worker)
            if side == "full":
                env_full = env
                started = time.monotonic()
                if (tree / "queuelog" / "sql" / "partitions.py").exists():
                    _in_checkout(tree, env, _MAKE_PAST_DAYS, str(DAYS))
                _fill(db_url, producer, worker, size)
                print(f"  {size:,} finished jobs filled in {time.monotonic() - started:.0f} s", flush=True)
                if (tree / "queuelog" / "sql" / "closed_days.py").exists():
                    seconds = _in_checkout(tree, env, _SUM_CLOSED_DAYS)
                    print(f"  the closed days summed for Top errors within {seconds} s", flush=True)
        for side in clients:
            _live_work(*clients[side], WARM_UP)  # every server process has served a few, untimed
        figures = _side_by_side(clients, samples)
        for side, label_of in (("empty", "empty history"), ("full", f"{size:,} in history")):
            print(f"  {label_of}: {_summary(figures[side])}", flush=True)
        site = history_pages.Site(tree, env_full, servers[-1].url, _a_failed_job(env_full))
    except BaseException:
        for server in servers:
            server.stop()
        raise
    servers[0].stop()
    return Measured(figures, site, servers[-1])


def finish(measured: Measured) -> dict:
    """Stop the full history's server, then remove its oldest day: the figures, with the removal's."""
    # Stopped first: its sessions end and report their counts, so that the removal's are then all that move them.
    measured.server.stop()
    site = measured.site
    removed = _remove_a_day(site.tree, site.env, site.env["QUEUELOG_DATABASE_URL"])
    print(
        f"  a day removed: {removed['jobs']:,} jobs, {removed['events']:,} events in {removed['seconds']:.2f} s;"
        f" rows deleted or updated in jobs: {removed['jobs_rows_written']:,}",
        flush=True,
    )
    return {**measured.figures, "removed": removed}


def _side_by_side(clients: dict, samples: int) -> dict[str, dict[str, list[float]]]:
    """``samples`` of each side's live work, one sample of each side in turn."""
    figures: dict[str, dict[str, list[float]]] = {side: {"enqueue": [], "claim": []} for side in clients}
    for _ in range(samples):
        for side, (producer, worker) in clients.items():
            for name, values in _live_work(producer, worker, 1).items():
                figures[side][name].extend(values)
    return figures


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
            # Day k of DAYS back (k = 1 … DAYS), spread evenly; the oldest day is the one removed later. The ids
            # grow with time, as the id sequence gives them: the first n / DAYS rows are the oldest day's.
            shift = f"(({DAYS} - ((s.i - 1) * {DAYS}) / CAST(:n AS integer)) * interval '1 day')"
            # One job in ten failed, with one of a few causes; every payload names a customer (bench/history_pages.py).
            # Each drawn by a hash of the row's number: spread over every day and every page
            # alike, in one table or in days, as failures and customers come in a queue.
            failed = "abs(hashint4(s.i)) % 10 = 0"
            made = {
                "status": f"CASE WHEN {failed} THEN 'failed' ELSE t.status END",
                "error": f"CASE WHEN {failed} THEN {history_pages.error_of('s.i')} END",
                "error_group": f"CASE WHEN {failed} THEN {history_pages.error_of('s.i')} END",
                "result": f"CASE WHEN {failed} THEN NULL ELSE t.result END",
                "payload": "'{\"customer_id\": ' || (abs(hashint8(s.i)) % 1000) || '}'",
            }
            values = [made.get(c, f"t.{c} - {shift}" if c in _TIME_COLUMNS else f"t.{c}") for c in columns]
            conn.execute(
                text(
                    f"INSERT INTO jobs ({', '.join(columns)}) SELECT {', '.join(values)}"
                    " FROM jobs t CROSS JOIN generate_series(1, :n) AS s(i) WHERE t.id = :id"
                ),
                {"n": size, "id": template["id"]},
            )
            # Where events are kept in days (by ``bucket``), each goes in the day it happened on.
            bucket = conn.execute(
                text(
                    "SELECT count(*) FROM information_schema.columns"
                    " WHERE table_name = 'job_events' AND column_name = 'bucket'"
                )
            ).scalar_one()
            conn.execute(
                text(
                    "INSERT INTO job_events (job_id, event, from_status, to_status, actor, attempt, error, at"
                    + (", bucket" if bucket else "")
                    + ") SELECT j.id, e.event, e.from_status, e.to_status, e.actor, e.attempt, e.error, j.updated_at"
                    + (", j.updated_at" if bucket else "")
                    + " FROM jobs j CROSS JOIN (SELECT * FROM job_events WHERE job_id = :id) e WHERE j.id > :first"
                ),
                {"id": template["id"], "first": first},
            )
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE jobs"))
            conn.execute(text("VACUUM ANALYZE job_events"))
            conn.execute(text("CHECKPOINT"))
    finally:
        engine.dispose()


def _a_failed_job(env: dict[str, str]) -> int:
    engine = create_engine(env["QUEUELOG_DATABASE_URL"])
    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT max(id) FROM jobs WHERE status = 'failed'")).scalar_one()
    finally:
        engine.dispose()


def _remove_a_day(tree: Path, env: dict[str, str], db_url: str) -> dict:
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            written_before = conn.execute(_TABLE_WRITES).scalar_one()
        # The oldest day is DAYS days back; the next, DAYS - 1: half a day between them (row by row), or the
        # day before DAYS - 1 days back (in days).
        removed = json.loads(_in_checkout(tree, env, _REMOVE_A_DAY, str(DAYS * 24 - 12), str(DAYS)).splitlines()[-1])
        time.sleep(1.0)  # the purging process reported its counts as it ended; the statistics take them in
        with engine.connect() as conn:
            removed["jobs_rows_written"] = conn.execute(_TABLE_WRITES).scalar_one() - written_before
    finally:
        engine.dispose()
    return removed


def _in_checkout(tree: Path, env: dict[str, str], script: str, *args: str) -> str:
    """Run ``script`` with the checkout's own code; its standard output."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=tree,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"a step in {tree} failed: {done.stderr[-1000:]}")
    return done.stdout.strip()


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
