"""Measure group commit: the single path at synchronous=FULL with group commit off and on, beside NORMAL.

    .venv/bin/python -m bench.group_commit [--rounds 5] [--jobs 300] [--threads 8]
        [--postgresql [--pg-commit-delay 100]] [--no-sqlite] [--quick]

Every server is the production command, ``gunicorn -w 4 --threads 8 app:app`` (gthread; ``--threads 1``
gives the sync workers ``bench.run`` starts), each on its own SQLite file; with ``--postgresql`` also on
a throwaway PostgreSQL cluster with fsync on, a database each (``--pg-commit-delay`` adds a column on a
second cluster with PostgreSQL's own group commit, ``commit_delay``); and the bare Flask ceiling under
the same command. One end-to-end round is the benchmark's single path (``bench.targets``): N client
processes enqueue the round's jobs one per request, then N workers claim and complete them one at a
time; jobs ÷ (enqueue + drain seconds). Rounds are interleaved across the servers, so each line's
figures were taken minutes apart; the tables show medians (min–max), and the median of per-round
ratios to the first server.

A speed figure, not a test: it checks only that every job completed exactly once (exit status 1 if not).
``--quick`` (a smoke test, tests/benchmarks/test_bench_group_commit.py): one round of 12 jobs at 4 workers on
two servers, SQLite FULL with group commit off and on (each server is a production command to start: the rest
is left out).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.config import Config
from bench.servers import GunicornServer
from bench.targets import Ceiling, Queuelog

THREADS = 8
CEILING = "Flask ceiling ÷ 3"


def _config(jobs: int) -> Config:
    return Config(
        jobs=jobs,
        workers=[4, 16],
        enqueue_clients=4,
        enqueue_batches=[1],
        claim_limit=100,
        fills=[],
        latency_samples=0,
        latency_warmup=0,
        latency_budget_s=0,
        timeout=120,
    )


def _queuelog(column: str, db_url: str, log_dir: Path, settings: dict[str, str], threads: int) -> Queuelog:
    system = Queuelog(column, db_url, log_dir, settings, probe_latency=False)
    system.server = GunicornServer("app:app", system.env, log_dir / f"gunicorn-{column}.log", threads=threads)
    return system


def _ceiling(log_dir: Path, threads: int) -> Ceiling:
    system = Ceiling(log_dir)
    system.server = GunicornServer("bench.ceiling_app:app", None, log_dir / "gunicorn-ceiling.log", threads=threads)
    return system


def _sqlite_columns() -> dict[str, dict[str, str]]:
    return {
        "SQLite FULL, group commit off": {"QUEUELOG_SQLITE_SYNCHRONOUS": "FULL", "QUEUELOG_GROUP_COMMIT": "off"},
        "SQLite FULL, group commit on": {"QUEUELOG_SQLITE_SYNCHRONOUS": "FULL", "QUEUELOG_GROUP_COMMIT": "on"},
        "SQLite NORMAL, group commit off": {"QUEUELOG_SQLITE_SYNCHRONOUS": "NORMAL", "QUEUELOG_GROUP_COMMIT": "off"},
    }


def _postgres_databases(server_url: str, names: list[str]) -> list[str]:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    engine = create_engine(server_url, isolation_level="AUTOCOMMIT")
    urls = []
    try:
        with engine.connect() as conn:
            for name in names:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
                conn.execute(text(f'CREATE DATABASE "{name}"'))
                urls.append(make_url(server_url).set(database=name).render_as_string(hide_password=False))
    finally:
        engine.dispose()
    return urls


def _postgres_columns(
    stack: contextlib.ExitStack, log_dir: Path, commit_delay: int | None, threads: int
) -> dict[str, Queuelog]:
    from bench.run import make_pg_durable
    from bench.servers import postgres_cluster

    server_url = stack.enter_context(postgres_cluster())
    make_pg_durable(server_url)  # the test cluster runs without fsync; production does not
    off, on = _postgres_databases(server_url, ["group_off", "group_on"])
    columns = {
        "PostgreSQL, group commit off": stack.enter_context(
            _queuelog("pg-off", off, log_dir, {"QUEUELOG_GROUP_COMMIT": "off"}, threads)
        ),
        "PostgreSQL, group commit on": stack.enter_context(
            _queuelog("pg-on", on, log_dir, {"QUEUELOG_GROUP_COMMIT": "on"}, threads)
        ),
    }
    if commit_delay is not None:
        delayed_url = stack.enter_context(postgres_cluster())
        make_pg_durable(delayed_url)
        _set_commit_delay(delayed_url, commit_delay)
        [delayed] = _postgres_databases(delayed_url, ["commit_delay"])
        columns[f"PostgreSQL, group commit off, commit_delay={commit_delay} µs"] = stack.enter_context(
            _queuelog("pg-delay", delayed, log_dir, {"QUEUELOG_GROUP_COMMIT": "off"}, threads)
        )
    return columns


def _set_commit_delay(server_url: str, microseconds: int) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f"ALTER SYSTEM SET commit_delay = {int(microseconds)}"))
            conn.execute(text("ALTER SYSTEM SET commit_siblings = 2"))
            conn.execute(text("SELECT pg_reload_conf()"))
    finally:
        engine.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved passes over every server")
    parser.add_argument("--jobs", type=int, default=300, help="jobs per end-to-end round")
    parser.add_argument("--workers", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--postgresql", action="store_true", help="add PostgreSQL with group commit off and on")
    parser.add_argument("--no-sqlite", action="store_true", help="PostgreSQL columns only")
    parser.add_argument(
        "--pg-commit-delay",
        type=int,
        metavar="MICROSECONDS",
        help="with --postgresql: a column on a cluster with this commit_delay (commit_siblings 2)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=THREADS,
        help="gunicorn threads per worker process (1: sync workers, as bench.run starts them)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke test: one round of 12 jobs at 4 workers, SQLite FULL, group commit off and on",
    )
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.jobs, args.workers = 1, 12, [4]
        args.postgresql = args.no_sqlite = False
    cfg = _config(args.jobs)
    # Stopped from outside (timeout, kill): leave through the ExitStack, which stops every server started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))

    with tempfile.TemporaryDirectory(prefix="queuelog-group-commit-") as tmp, contextlib.ExitStack() as stack:
        workdir = Path(tmp)
        log_dir = workdir / "logs"
        systems = {}
        if not args.no_sqlite:
            sqlite_columns = list(_sqlite_columns().items())[: 2 if args.quick else None]
            for index, (column, settings) in enumerate(sqlite_columns):
                url = f"sqlite:///{workdir / f'column-{index}.db'}"
                systems[column] = stack.enter_context(_queuelog(column, url, log_dir, settings, args.threads))
        if args.postgresql:
            systems.update(_postgres_columns(stack, log_dir, args.pg_commit_delay, args.threads))
        if not args.quick:
            systems[CEILING] = stack.enter_context(_ceiling(log_dir, args.threads))

        rates: dict[tuple[str, int], list[float]] = {}
        failed = []
        for round_number in range(1, args.rounds + 1):
            for workers in args.workers:
                for column, system in systems.items():
                    result = system.end_to_end("single", workers, cfg.jobs, cfg, f"w{workers}")
                    failed += [check for check in result.checks if not check.ok]
                    rate = result.jobs / result.seconds if result.seconds else 0.0
                    rates.setdefault((column, workers), []).append(rate)
                    print(f"round {round_number}, {workers:>2} workers, {column}: {rate:,.0f} jobs/s", flush=True)
                    time.sleep(0.5)
        _print_table(rates, list(systems), args.workers, args.rounds, args.jobs, args.threads)
        if FULL_ON in systems and NORMAL in systems:
            _print_what_full_costs(rates, [n for n in args.workers if n == cfg.enqueue_clients], workdir)
        for check in failed:
            print(f"FAILED CHECK {check.target}: {check.what}: {check.detail}")
        return 1 if failed else 0


def _print_table(rates, columns: list[str], workers: list[int], rounds: int, jobs: int, threads: int) -> None:
    print(
        f"\nEnd-to-end single path (enqueue, claim, complete: one job per request), gunicorn -w 4 "
        f"--threads {threads}; jobs/s, median of {rounds} interleaved rounds of {jobs} jobs (min–max)\n"
    )
    print("| Server | " + " | ".join(f"{n} workers" for n in workers) + " |")
    print("|---|" + "---:|" * len(workers))
    for column in columns:
        cells = []
        for n in workers:
            values = rates[(column, n)]
            cells.append(f"{statistics.median(values):,.0f} ({min(values):,.0f}–{max(values):,.0f})")
        print(f"| {column} | " + " | ".join(cells) + " |")
    if CEILING in columns:
        _print_ceiling_ratios(rates, columns, workers)
    _print_ratios_to_first(rates, columns, workers)


def _print_ceiling_ratios(rates, columns: list[str], workers: list[int]) -> None:
    print("\n| Ratio | " + " | ".join(f"{n} workers" for n in workers) + " |")
    print("|---|" + "---:|" * len(workers))
    for column in columns:
        if column == CEILING:
            continue
        cells = [
            f"{statistics.median(rates[(column, n)]) / statistics.median(rates[(CEILING, n)]):.2f}×" for n in workers
        ]
        print(f"| {column} ÷ (ceiling ÷ 3) | " + " | ".join(cells) + " |")


def _print_ratios_to_first(rates, columns: list[str], workers: list[int]) -> None:
    # On a shared machine the rounds' speeds swing with its load; the ratio of two servers within one
    # round (taken seconds apart) swings much less, so the median of those ratios is the steadier figure.
    baseline = columns[0]
    print(f"\n| Median of per-round ratios to {baseline} | " + " | ".join(f"{n} workers" for n in workers) + " |")
    print("|---|" + "---:|" * len(workers))
    for column in columns[1:]:
        cells = [f"{statistics.median(_ratios(rates[(column, n)], rates[(baseline, n)])):.2f}×" for n in workers]
        print(f"| {column} | " + " | ".join(cells) + " |")


#: One job of the single path is three writes (enqueue, claim, complete), each answered after its commit.
WRITES_PER_JOB = 3
FULL_ON, NORMAL = "SQLite FULL, group commit on", "SQLite NORMAL, group commit off"


def _print_what_full_costs(rates, workers: list[int], workdir: Path) -> None:
    """What FULL adds to each write, beside what one fdatasync of a WAL-sized append takes on this disk.

    N clients that each wait for their answer before the next request make N / rate seconds per job each; at
    FULL every answer also waits for an fdatasync that began after its commit. (Read only where the workers are as
    many as the enqueue's clients, so that a round has N clients throughout.) Where the server has idle
    CPU (few clients), nothing else runs in that wait, so FULL's extra time per write is about one fdatasync,
    and FULL can only match NORMAL where the clients queue for the CPU anyway.
    """
    fsync_ms = _fdatasync_ms(workdir / "fdatasync-probe")
    print(
        f"\nOne fdatasync after a 4 KiB append on this disk, {len(fsync_ms)} of them 2-8 ms apart: "
        f"mean {statistics.fmean(fsync_ms):.2f} ms, "
        f"p50 {statistics.median(fsync_ms):.2f} ms, p90 {fsync_ms[int(0.9 * (len(fsync_ms) - 1))]:.2f} ms"
    )
    for n in workers:
        # Per round (the two servers ran seconds apart), then the median: the rounds' speeds swing too much.
        pairs = list(zip(rates[(FULL_ON, n)], rates[(NORMAL, n)], strict=True))
        extra_ms = statistics.median((n / full - n / normal) * 1000 / WRITES_PER_JOB for full, normal in pairs)
        ratio = statistics.median(full / normal for full, normal in pairs)
        print(
            f"{n:>2} workers: FULL (group commit on) is {ratio:.2f}× NORMAL and adds {extra_ms:.2f} ms to each "
            "write a client waits for (medians of per-round figures)"
        )


def _fdatasync_ms(path: Path, count: int = 200) -> list[float]:
    taken = []
    with open(path, "ab") as file:
        for _ in range(count):
            time.sleep(random.uniform(0.002, 0.008))
            file.write(os.urandom(4096))
            file.flush()
            start = time.perf_counter()
            os.fdatasync(file.fileno())
            taken.append((time.perf_counter() - start) * 1000)
    return sorted(taken)


def _ratios(values: list[float], baselines: list[float]) -> list[float]:
    return [value / baseline for value, baseline in zip(values, baselines, strict=True) if baseline]


if __name__ == "__main__":
    sys.exit(main())
