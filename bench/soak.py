"""PostgreSQL over years: the queue under a held snapshot (``--shape held``, the default), and the live work
beside a large history of finished jobs (``--shape history``, bench/soak_history.py says how).

    .venv/bin/python -m bench.soak [--vs DIR] [--rate 60] [--history 20000] [--baseline 120] [--hold 300]
                                   [--after 90] [--markdown FILE] [--quick]
    .venv/bin/python -m bench.soak --shape history [--vs DIR] [--history 1000000] [--samples 500] [--quick]

The held shape: a steady load while another session keeps a REPEATABLE READ transaction open, before, during
and after.

It starts a durable throwaway PostgreSQL cluster and, on a database of its own, the README's production server
(``gunicorn --workers 4 --threads 8 app:app``) with ``queuelog-worker --concurrency 8`` running a no-op, as
users run them. It fills ``--history`` finished jobs, then a producer offers ``--rate`` jobs a second, one
``POST /jobs`` each, for the whole run. Five times a second a probe claims a job of that type beside the
workers (``POST /jobs/claim``, no wait) and completes what it got: the claim's time is the figure a worker waits
on. After ``--baseline`` seconds a second session opens a REPEATABLE READ transaction, reads one row and stays
idle in it for ``--hold`` seconds, which keeps vacuum from removing any row version that died since; then
``--after`` seconds more.

Every 10 s it prints: claim p50/p99 (ms), jobs completed per second, the backlog (pending jobs), the dead rows
of the table the claim reads (the statistics' estimate; ``jobs_live`` where history is kept apart, else ``jobs``)
and its size with its indexes. Then the verdicts of the
issue's contract, each a ratio to the baseline (its first 20 s left out as warm-up): claim p99 over the last
third of the hold (≤ 2×), jobs completed per second over the hold (≥ 0.9×), and the seconds after the hold
until a window is back at the baseline.

``--vs DIR`` runs the same shape first against another checkout (e.g. a worktree of an older commit), on its
own database of the same cluster, so the two are measured in one run. ``--quick`` (tests/benchmarks/
test_bench_soak.py) runs either shape small, a smoke test of the figures; speed never fails the run, a job of
the held shape that was not completed, or was claimed twice, does.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from sqlalchemy import create_engine, text

from bench import fill, history_pages, soak_history, tasks
from bench.run import create_database, make_pg_durable
from bench.servers import PRODUCTION_THREADS, REPO_ROOT, GunicornServer, postgres_cluster
from bench.soak_report import Shape, Window, markdown_timeline, print_verdicts, print_window, verdicts
from bench.targets import create_key
from bench.worker_pool import WorkerPool
from bench.worker_systems import command

PROBE_EVERY_S = 0.2
#: The table the claim reads: ``jobs_live`` where history is kept apart (docs/storage.md), else ``jobs``.
_LIVE = "coalesce(to_regclass('jobs_live'), 'jobs'::regclass)"
_HEALTH = text(
    f"SELECT (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = {_LIVE}),"
    f" pg_total_relation_size({_LIVE}),"
    " (SELECT count(*) FROM jobs WHERE status = 'pending' AND type = :type),"
    " (SELECT count(*) FROM jobs WHERE status = 'completed' AND type = :type)"
)


def measure(label: str, tree: Path, cluster_url: str, shape: Shape, log_dir: Path) -> list[Window]:
    """Run the shape against the checkout in ``tree`` on a new database; the timeline, window by window."""
    db_url = create_database(cluster_url, f"soak_{label}")
    env = {
        "QUEUELOG_DATABASE_URL": db_url,
        "QUEUELOG_JOB_TYPES": tasks.JOB_TYPE,
        "QUEUELOG_LOG_FORMAT": "text",
        "PYTHONPATH": str(tree),  # the checkout's queuelog, not this one's
    }
    server = GunicornServer("app:app", env, log_dir / f"gunicorn-{label}.log", PRODUCTION_THREADS, cwd=tree)
    with contextlib.ExitStack() as stack:
        server.start()
        stack.callback(server.stop)
        producer_key = create_key(tree, env, "soak-producer", "producer")
        worker_key = create_key(tree, env, "soak-worker", "worker")
        _fill_history(server.url, producer_key, worker_key, db_url, shape.history)
        pool = WorkerPool(
            f"worker-{label}",
            [[command("queuelog-worker"), "bench.queuelog_tasks:worker", "--concurrency", str(shape.workers)]],
            {"QUEUELOG_URL": server.url, "QUEUELOG_API_KEY": worker_key, "PYTHONPATH": str(tree)},
            log_dir,
            "worker started",
        )
        pool.launch()
        stack.callback(pool.stop)
        pool.wait_ready(120)
        windows = _timeline(server.url, producer_key, worker_key, db_url, shape)
        _check_every_job_ran_once(db_url, shape.history)
        return windows


#: After the load: every job enqueued during it completed, and was claimed once (no claim given twice, none
#: taken back). The history's copies have no events; the job they were copied from was claimed once too.
_OUTCOME = text(
    "SELECT (SELECT count(*) FROM jobs WHERE status <> 'completed'),"
    " (SELECT count(*) FROM jobs) - :history + 1,"
    " (SELECT count(*) FROM job_events WHERE event = 'claimed'),"
    " (SELECT count(DISTINCT job_id) FROM job_events WHERE event = 'claimed')"
)
DRAIN_S = 60


class JobsLost(RuntimeError):
    """A job of the run did not end completed, or was claimed more than once."""


def _check_every_job_ran_once(db_url: str, history: int) -> None:
    engine = create_engine(db_url)
    try:
        deadline = time.monotonic() + DRAIN_S
        while True:
            with engine.connect() as conn:
                unfinished, made, claims, claimed_jobs = conn.execute(_OUTCOME, {"history": history}).one()
            if not unfinished or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        engine.dispose()
    if unfinished or claims != made or claimed_jobs != made:
        raise JobsLost(f"{unfinished} jobs not completed; {made} jobs, {claims} claims of {claimed_jobs} jobs")
    print(f"  every one of the {made} jobs of the run completed, each claimed once")


def _fill_history(url: str, producer_key: str, worker_key: str, db_url: str, count: int) -> None:
    """``count`` completed jobs: one made through the API, the rest copied from it in one INSERT."""
    from queuelog.worker import Client

    producer, worker = Client(url, producer_key), Client(url, worker_key)
    template = producer.enqueue(tasks.JOB_TYPE)
    claimed = worker.claim([tasks.JOB_TYPE])
    worker.complete(claimed[0]["id"], claimed[0]["claim_token"], {"ran": True})
    fill.fill_pending(db_url, template["id"], max(count - 1, 0))
    engine = create_engine(db_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text("VACUUM ANALYZE jobs"))
        conn.execute(text("VACUUM ANALYZE job_events"))
    engine.dispose()


def _timeline(url: str, producer_key: str, worker_key: str, db_url: str, shape: Shape) -> list[Window]:
    stop = threading.Event()
    claims: list[tuple[float, float]] = []  # (seconds since start, claim ms)
    errors: list[str] = []
    started = time.monotonic()
    threads = [
        threading.Thread(target=_produce, args=(url, producer_key, shape.rate, started, stop, errors)),
        threading.Thread(target=_probe, args=(url, worker_key, started, stop, claims, errors)),
        threading.Thread(target=_hold_snapshot, args=(db_url, shape, started, stop)),
    ]
    for thread in threads:
        thread.start()
    windows = []
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            last_completed = conn.execute(_HEALTH, {"type": tasks.JOB_TYPE}).one()[3]
        total = shape.baseline + shape.hold + shape.after
        for n in range(1, int(total // shape.window) + 1):
            end = n * shape.window
            time.sleep(max(0.0, started + end - time.monotonic()))
            with engine.connect() as conn:
                dead, size, backlog, completed = conn.execute(_HEALTH, {"type": tasks.JOB_TYPE}).one()
            window = Window(end, _phase(end, shape), [ms for at, ms in claims if end - shape.window <= at < end])
            window.completed_per_s = (completed - last_completed) / shape.window
            window.backlog, window.dead_rows, window.table_bytes = backlog, dead or 0, size
            last_completed = completed
            windows.append(window)
            print_window(window)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=shape.hold + 30)
        engine.dispose()
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed, e.g. {errors[:3]}")
    return windows


def _phase(end: float, shape: Shape) -> str:
    if end <= shape.baseline:
        return "baseline"
    return "hold" if end <= shape.baseline + shape.hold else "after"


def _produce(url: str, key: str, rate: float, started: float, stop: threading.Event, errors: list[str]) -> None:
    """One ``POST /jobs`` every 1/rate seconds on a fixed schedule: the offered load does not wait on the server."""
    from queuelog.worker import Client

    client, n = Client(url, key), 0
    while not stop.is_set():
        n += 1
        stop.wait(max(0.0, started + n / rate - time.monotonic()))
        try:
            client.enqueue(tasks.JOB_TYPE)
        except Exception as exc:  # a failed enqueue is reported, not retried: the run fails
            errors.append(f"enqueue: {exc!r}")


def _probe(url, worker_key, started, stop, claims, errors) -> None:
    """A claim of the loaded type without waiting, five times a second, timed; what it gets it completes. Empty
    or not, a claim walks the same index past the same entries as the workers' claims."""
    from queuelog.worker import Client

    worker = Client(url, worker_key)
    while not stop.wait(PROBE_EVERY_S):
        try:
            began = time.monotonic()
            jobs = worker.claim([tasks.JOB_TYPE])
            claims.append((began - started, (time.monotonic() - began) * 1000))
            for job in jobs:
                worker.complete(job["id"], job["claim_token"])
        except Exception as exc:
            errors.append(f"probe: {exc!r}")


def _hold_snapshot(db_url: str, shape: Shape, started: float, stop: threading.Event) -> None:
    """From the end of the baseline, a session idle in a REPEATABLE READ transaction for ``shape.hold`` seconds."""
    if stop.wait(max(0.0, started + shape.baseline - time.monotonic())):
        return
    engine = create_engine(db_url, connect_args={"application_name": "soak-snapshot-holder"})
    with engine.connect() as conn:
        conn.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
        conn.execute(text("SELECT id FROM jobs LIMIT 1")).all()  # the snapshot is taken here
        stop.wait(max(0.0, started + shape.baseline + shape.hold - time.monotonic()))
        conn.rollback()
    engine.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=("held", "history"), default="held", help="held snapshot (default), history")
    parser.add_argument("--vs", type=Path, help="another checkout to measure first, in the same run")
    parser.add_argument("--rate", type=float, default=60.0, help="held: jobs offered per second (default 60)")
    parser.add_argument("--history", type=int, help="finished jobs in history (held: 20000; history: 1000000)")
    parser.add_argument("--baseline", type=float, default=120.0, help="held: seconds before the hold (default 120)")
    parser.add_argument("--hold", type=float, default=300.0, help="held: seconds the snapshot is held (default 300)")
    parser.add_argument("--after", type=float, default=90.0, help="held: seconds after the hold (default 90)")
    parser.add_argument("--samples", type=int, default=500, help="history: enqueues and claims timed (default 500)")
    parser.add_argument("--quick", action="store_true", help="a small run of either shape: a smoke test")
    parser.add_argument("--markdown", type=Path, help="held: also write the timelines side by side in Markdown")
    args = parser.parse_args(argv)
    trees = ([("vs", args.vs.resolve())] if args.vs else []) + [("this", REPO_ROOT)]
    with tempfile.TemporaryDirectory(prefix="queuelog-soak-") as work, postgres_cluster() as cluster_url:
        if cluster_url is None:
            print("no PostgreSQL on this machine: nothing to measure")
            return 1
        make_pg_durable(cluster_url)
        if args.shape == "history":
            return _history_shape(args, trees, cluster_url, Path(work) / "logs")
        return _held_shape(args, trees, cluster_url, Path(work) / "logs")


def _held_shape(args, trees: list[tuple[str, Path]], cluster_url: str, log_dir: Path) -> int:
    if args.quick:
        shape = Shape(rate=20, history=500, baseline=10, hold=10, after=5, window=5, workers=4)
    else:
        shape = Shape(args.rate, args.history or 20_000, args.baseline, args.hold, args.after)
    results, timelines = {}, {}
    for label, tree in trees:
        print(f"\n== {label}: {tree} at {_commit_of(tree)}, {shape.rate:g} jobs/s, {shape.history} in history")
        try:
            windows = measure(label, tree, cluster_url, shape, log_dir)
        except JobsLost as lost:
            print(f"FAILED: {lost}")
            return 1
        results[label] = verdicts(windows, shape)
        timelines[label] = windows
    for label, tree in trees:
        print_verdicts(f"{label} ({_commit_of(tree)})", results[label])
    if args.markdown:
        args.markdown.write_text(markdown_timeline(timelines), encoding="utf-8")
    return 0


def _history_shape(args, trees: list[tuple[str, Path]], cluster_url: str, log_dir: Path) -> int:
    size, samples = (2_000, 30) if args.quick else (args.history or 1_000_000, args.samples)
    measured: dict[str, soak_history.Measured] = {}
    try:
        for label, tree in trees:
            print(f"\n== {label}: {tree} at {_commit_of(tree)}, {size:,} finished jobs, {samples} samples")
            measured[label] = soak_history.measure(label, tree, cluster_url, size, samples, log_dir)
        print("\n== the admin pages, the checkouts taking turns visit by visit", flush=True)
        visits = {"warm_visits": 1, "rounds": 3} if args.quick else {}
        pages = history_pages.measure({label: m.site for label, m in measured.items()}, **visits)
    finally:
        for each in measured.values():
            each.server.stop()
    figures = {}
    for label in measured:
        print(f"\n== {label}: removing the oldest day", flush=True)
        figures[label] = {**soak_history.finish(measured[label]), "pages": pages[label]}
    for label, tree in trees:
        soak_history.print_verdicts(f"{label} ({_commit_of(tree)})", figures[label], size)
    history_pages.print_comparison(figures)
    return 0


def _commit_of(tree: Path) -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


if __name__ == "__main__":
    sys.exit(main())
