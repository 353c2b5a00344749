"""Entry point: ``python -m bench.run [--quick] [--out bench/results] [--only PARTS]``.

Starts the Flask ceiling, queuelog on SQLite and on PostgreSQL, huey and RQ
side by side, runs their throughput rounds interleaved (see bench.schedule),
then queuelog's claim-latency probes, then the worker rows: the shipped
``queuelog-worker``, ``rq worker`` and ``huey_consumer`` draining pre-enqueued
jobs, and their pickup latency (see bench.worker_rounds); writes ``bench.md``
and ``bench.json`` to the output directory and prints the table.
``--only workers,pickup`` (any of throughput, latency, workers, pickup) runs
those parts alone, starting only the systems they need.

Exit status: 1 only when one of queuelog's correctness checks fails (some
job not completed exactly once, or a round aborted so that this could not be
shown); never because something was slow, and never because a peer failed
(that is reported in the table instead).  A part whose prerequisites are
missing (no ``app.py`` yet, no redis-server, no PostgreSQL helper) is
skipped with a note.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench import report, schedule, worker_report, worker_rounds
from bench.config import FULL, QUICK, Check, Config
from bench.peers import Huey, Rq
from bench.servers import GUNICORN_WORKERS, PRODUCTION_THREADS, REPO_ROOT, RedisServer, postgres_cluster
from bench.targets import Ceiling, Queuelog
from bench.worker_systems import HueyConsumer, QueuelogWorkers, RqWorkers, WorkerSystem

# The throwaway cluster helper turns durability off to speed up tests; the
# benchmark compares against SQLite at synchronous=FULL (queuelog's default)
# and should measure what a production PostgreSQL does, so it is turned back
# on.  All three settings take effect on reload.
PG_DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}


def make_pg_durable(url: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            for name, value in PG_DURABLE.items():
                conn.execute(text(f"ALTER SYSTEM SET {name} = '{value}'"))
            conn.execute(text("SELECT pg_reload_conf()"))
    finally:
        engine.dispose()


PARTS = ("throughput", "latency", "workers", "pickup")


class Runner:
    """Starts every system, runs the schedule, collects figures, checks, notes."""

    def __init__(self, cfg: Config, work_dir: Path, log_dir: Path, parts: tuple[str, ...] = PARTS):
        self.cfg = cfg
        self.work_dir = work_dir
        self.log_dir = log_dir
        self.parts = parts
        self.metrics: dict[str, dict] = {}
        self.checks: list[Check] = []
        self.notes: list[str] = []
        self.pg_url: str | None = None
        self.phase_seconds: dict[str, float] = {}

    def run_all(self) -> None:
        # All systems stay up for the whole run so their rounds can be
        # interleaved (see bench.schedule); idle servers cost no CPU.
        with contextlib.ExitStack() as stack:
            with self._phase("start"):
                started = self._start_together(stack, [*self._round_systems(stack), *self._worker_systems(stack)])
            systems = [s for s in started if not isinstance(s, WorkerSystem)]
            workers = [s for s in started if isinstance(s, WorkerSystem)]
            if "throughput" in self.parts:
                with self._phase("throughput"):
                    schedule.throughput(systems, self.cfg, self.metrics, self.checks)
            if "latency" in self.parts:
                with self._phase("latency"):
                    queuelogs = [s for s in systems if isinstance(s, Queuelog) and s.probe_latency]
                    schedule.latency(queuelogs, self.cfg, self.metrics, self.checks)
            if workers:
                with self._phase("workers"):
                    worker_rounds.run(
                        workers,
                        self.cfg,
                        self.metrics,
                        self.checks,
                        self.log_dir / "workers",
                        drain="workers" in self.parts,
                        probe="pickup" in self.parts,
                    )

    @contextlib.contextmanager
    def _phase(self, name: str):
        """Time one phase of the run (bench.json's meta.phase_seconds): what each part costs."""
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.phase_seconds[name] = time.monotonic() - t0
            print(f"[bench] {name} took {self.phase_seconds[name]:.0f}s", flush=True)

    def _round_systems(self, stack: contextlib.ExitStack):
        """(column, start) for the systems of the throughput rounds and the claim-latency probe."""
        rounds = "throughput" in self.parts
        if rounds:
            yield "ceiling", lambda: Ceiling(self.log_dir)
        if not (REPO_ROOT / "app.py").exists():
            self.notes.append("queuelog skipped: app.py does not exist yet.")
        elif rounds or "latency" in self.parts:
            db = self.work_dir / "bench.db"
            yield "sqlite", lambda: Queuelog("sqlite", f"sqlite:///{db}", self.log_dir)
            if rounds:
                # The documented faster option, side by side, so the price of FULL's fsync per commit is
                # measured rather than guessed. Throughput only: the claim's index walk is the same.
                relaxed = self.work_dir / "bench-normal.db"
                yield (
                    "sqlite_normal",
                    lambda: Queuelog(
                        "sqlite_normal",
                        f"sqlite:///{relaxed}",
                        self.log_dir,
                        settings={"QUEUELOG_SQLITE_SYNCHRONOUS": "NORMAL"},
                        probe_latency=False,
                    ),
                )
            url = self._postgresql_url(stack)
            if url is not None:
                yield "postgresql", lambda: Queuelog("postgresql", url, self.log_dir)
        if not rounds:
            return
        yield "huey", lambda: Huey(self.work_dir)
        if shutil.which("redis-server") is None:
            self.notes.append("RQ skipped: redis-server is not installed.")
        else:
            yield "rq", lambda: Rq(self.work_dir, self.log_dir)

    def _worker_systems(self, stack: contextlib.ExitStack):
        """(column, start) for the worker rows: each queue with its own worker command, as users run them."""
        if "workers" not in self.parts and "pickup" not in self.parts:
            return
        if (REPO_ROOT / "app.py").exists():
            # Under the README's production command (gthread), on databases of their own.
            sqlite_url = f"sqlite:///{self.work_dir / 'bench-workers.db'}"
            yield "ql_worker_sqlite", lambda: QueuelogWorkers(self._production("ql_worker_sqlite", sqlite_url))
            base = self._postgresql_url(stack)
            if base is not None:
                yield (
                    "ql_worker_postgresql",
                    lambda: QueuelogWorkers(
                        self._production("ql_worker_postgresql", create_database(base, "bench_workers"))
                    ),
                )
        yield "huey_consumer", lambda: HueyConsumer(self.work_dir)
        if shutil.which("redis-server") is None:
            self.notes.append("rq worker rows skipped: redis-server is not installed.")
            return
        try:
            plain = stack.enter_context(RedisServer(self.work_dir, self.log_dir / "redis-workers.log").start())
            durable = stack.enter_context(
                RedisServer(self.work_dir, self.log_dir / "redis-aof.log", durable=True).start()
            )
        except Exception as exc:
            traceback.print_exc()
            self.notes.append(f"rq worker rows skipped: redis-server failed: {exc!r}"[:300])
            return
        for column, redis, database, worker_class in RQ_WORKER_ROWS:
            server = plain if redis == "plain" else durable
            yield column, lambda c=column, r=server, d=database, w=worker_class: RqWorkers(c, r, d, w)

    def _production(self, column: str, url: str) -> Queuelog:
        return Queuelog(column, url, self.log_dir, threads=PRODUCTION_THREADS, probe_latency=False)

    def _start_together(self, stack: contextlib.ExitStack, starters: list) -> list:
        """Enter every system at once (their servers boot side by side), each closed with the stack.

        One that cannot start is a failed check when it is queuelog's own, otherwise a note.
        """
        with ThreadPoolExecutor(max_workers=max(len(starters), 1)) as pool:
            futures = [(column, pool.submit(lambda make=make: make().__enter__())) for column, make in starters]
        started = []
        for column, future in futures:
            try:
                system = future.result()
            except Exception as exc:
                traceback.print_exception(exc)
                if column in report.OWN_COLUMNS:
                    self.checks.append(Check(column, "start", False, f"could not start: {exc!r}"[:500]))
                else:
                    self.notes.append(f"{column} skipped: could not start: {exc!r}"[:300])
                continue
            stack.push(system.__exit__)
            started.append(system)
        return started

    def _postgresql_url(self, stack: contextlib.ExitStack) -> str | None:
        """The throwaway cluster's URL, durable; started on first use and kept for the run."""
        if self.pg_url is not None:
            return self.pg_url or None  # "" once it failed: noted already
        # A missing or broken throwaway cluster is the environment's fault,
        # not queuelog's: note it and go on without the PostgreSQL columns.
        try:
            url = stack.enter_context(postgres_cluster())
        except Exception as exc:
            traceback.print_exc()
            self.notes.append(f"PostgreSQL skipped: cluster failed: {exc!r}"[:300])
            self.pg_url = ""
            return None
        if url is None:
            self.notes.append("PostgreSQL skipped: tests.support.pg_cluster unavailable.")
            self.pg_url = ""
            return None
        make_pg_durable(url)
        self.pg_url = url
        return url


# (column, which redis-server, logical database, --worker-class): RQ's default forking worker and its
# SimpleWorker, each on Redis without persistence and on Redis with an fsync per write.
RQ_WORKER_ROWS = [
    ("rq_simple", "plain", 1, "rq.worker.SimpleWorker"),
    ("rq_simple_aof", "durable", 1, "rq.worker.SimpleWorker"),
    ("rq_worker", "plain", 0, None),
    ("rq_worker_aof", "durable", 0, None),
]


def create_database(url: str, name: str) -> str:
    """Create database ``name`` on the cluster of ``url``; returns its URL."""
    from sqlalchemy import create_engine, make_url, text

    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        engine.dispose()
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def git_commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts (about a minute): for CI and smoke tests")
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO_ROOT / "bench" / "results",
        help="directory for bench.md, bench.json and server logs",
    )
    parser.add_argument(
        "--only",
        type=_parts,
        default=PARTS,
        metavar="PART[,PART…]",
        help=f"run only these parts ({', '.join(PARTS)}; default: all); the table then leaves the others out",
    )
    parser.add_argument(
        "--worker-levels",
        type=_levels,
        default=None,
        metavar="N[,N…]",
        help="the worker rows' levels instead of the mode's (full: 1,4,16; quick: 2)",
    )
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    if args.worker_levels:
        cfg = dataclasses.replace(cfg, worker_levels=args.worker_levels)
    out_dir = args.out.resolve()
    started = dt.datetime.now(dt.UTC)
    t0 = time.monotonic()
    work_dir = Path(tempfile.mkdtemp(prefix="queuelog-bench-"))
    runner = Runner(cfg, work_dir, out_dir / "logs", args.only)
    try:
        runner.run_all()
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    runner.notes += [
        "End-to-end (N workers) = jobs ÷ (enqueue seconds + drain seconds): N processes enqueue "
        "the round's jobs (single path: one per call; batch path: batches of "
        f"{cfg.batch_path_enqueue}), then N workers claim and complete them. huey and RQ "
        "enqueue one job per call and have one figure per N, set against both queuelog paths. "
        "The ceiling's round is N processes each doing 3 no-op requests per job, so its "
        'figure is its request rate ÷ 3. "Claim + complete only" rows time the drain alone '
        "and are in no ratio.",
        "Durability: queuelog SQLite at its default synchronous=FULL (an acknowledged job survives "
        "power loss: one fsync per commit) and, in its own column, at the documented option "
        "synchronous=NORMAL (the last commits before a power cut may be lost), huey at its default "
        "(WAL, synchronous=FULL), PostgreSQL with fsync and synchronous_commit on, "
        "Redis without persistence (--save '' --appendonly no).",
        "Claim latency: one client, sequential claims, each job completed outside the timing; "
        "pending jobs bulk-inserted by SQL as copies of one job made by the API.",
        "Ratios of figures measured in the same repeats are medians of per-repeat ratios; "
        "others divide the medians. Per-round figures are in bench.json (*_repeats).",
        *worker_report.notes(cfg),
    ]
    meta = {
        "mode": "quick" if args.quick else "full",
        "started": started.isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "commit": git_commit(),
        "python": sys.version.split()[0],
        "gunicorn_workers": GUNICORN_WORKERS,
        "production_threads": PRODUCTION_THREADS,
        "parts": list(args.only),
        "phase_seconds": runner.phase_seconds,
        "seconds": time.monotonic() - t0,
    }
    checks = [c.as_dict() for c in runner.checks]
    text = report.write(out_dir, cfg, meta, runner.metrics, checks, runner.notes)
    print()
    print(text)
    print(f"[bench] wrote {out_dir / 'bench.md'} and {out_dir / 'bench.json'}")
    # Only queuelog's own checks decide the exit status: a peer that loses a
    # job under load is a finding to report, not a reason to fail CI.
    return 0 if all(c["ok"] for c in checks if c["target"] in report.OWN_COLUMNS) else 1


def _levels(value: str) -> tuple[int, ...]:
    try:
        levels = tuple(sorted({int(n) for n in value.split(",") if n.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"levels are numbers, e.g. 1,4; got {value!r}") from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"levels are numbers ≥ 1, e.g. 1,4; got {value!r}")
    return levels


def _parts(value: str) -> tuple[str, ...]:
    parts = tuple(p.strip() for p in value.split(",") if p.strip())
    unknown = [p for p in parts if p not in PARTS]
    if unknown or not parts:
        raise argparse.ArgumentTypeError(f"parts are {', '.join(PARTS)}; got {value!r}")
    return parts


if __name__ == "__main__":
    sys.exit(main())
