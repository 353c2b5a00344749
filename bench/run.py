"""Entry point: ``python -m bench.run [--quick] [--out bench/results]``.

Starts the Flask ceiling, queuelog on SQLite and on PostgreSQL, huey and RQ
side by side, runs their throughput rounds interleaved (see bench.schedule),
then queuelog's claim-latency probes, writes ``bench.md`` and ``bench.json``
to the output directory and prints the table.

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
import datetime as dt
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench import report, schedule
from bench.config import FULL, QUICK, Check, Config
from bench.peers import Huey, Rq
from bench.servers import GUNICORN_WORKERS, REPO_ROOT, postgres_cluster
from bench.targets import Ceiling, Queuelog

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


class Runner:
    """Starts every system, runs the schedule, collects figures, checks, notes."""

    def __init__(self, cfg: Config, work_dir: Path, log_dir: Path):
        self.cfg = cfg
        self.work_dir = work_dir
        self.log_dir = log_dir
        self.metrics: dict[str, dict] = {}
        self.checks: list[Check] = []
        self.notes: list[str] = []

    def run_all(self) -> None:
        # All systems stay up for the whole run so their rounds can be
        # interleaved (see bench.schedule); idle servers cost no CPU.
        with contextlib.ExitStack() as stack:
            systems = [s for s in self._start_all(stack) if s is not None]
            t0 = time.monotonic()
            schedule.throughput(systems, self.cfg, self.metrics, self.checks)
            print(f"[bench] throughput rounds took {time.monotonic() - t0:.0f}s", flush=True)
            queuelogs = [s for s in systems if isinstance(s, Queuelog) and s.probe_latency]
            schedule.latency(queuelogs, self.cfg, self.metrics, self.checks)

    def _start_all(self, stack: contextlib.ExitStack) -> list:
        yield self._start(stack, "ceiling", lambda: Ceiling(self.log_dir))
        if not (REPO_ROOT / "app.py").exists():
            self.notes.append("queuelog skipped: app.py does not exist yet.")
        else:
            db = self.work_dir / "bench.db"
            yield self._start(stack, "sqlite", lambda: Queuelog("sqlite", f"sqlite:///{db}", self.log_dir))
            # The documented faster option, side by side, so the price of FULL's fsync per commit is
            # measured rather than guessed. Throughput only: the claim's index walk is the same.
            relaxed = self.work_dir / "bench-normal.db"
            yield self._start(stack, "sqlite_normal", lambda: Queuelog(
                "sqlite_normal", f"sqlite:///{relaxed}", self.log_dir,
                settings={"QUEUELOG_SQLITE_SYNCHRONOUS": "NORMAL"}, probe_latency=False))
            yield self._start_postgresql(stack)
        yield self._start(stack, "huey", lambda: Huey(self.work_dir))
        if shutil.which("redis-server") is None:
            self.notes.append("RQ skipped: redis-server is not installed.")
        else:
            yield self._start(stack, "rq", lambda: Rq(self.work_dir, self.log_dir))

    def _start(self, stack: contextlib.ExitStack, column: str, make):
        """Enter one system; a queuelog that cannot start is a failed check."""
        try:
            return stack.enter_context(make())
        except Exception as exc:
            traceback.print_exc()
            if column in report.QUEUELOG_KEYS:
                self.checks.append(Check(column, "start", False, f"could not start: {exc!r}"[:500]))
            else:
                self.notes.append(f"{column} skipped: could not start: {exc!r}"[:300])
            return None

    def _start_postgresql(self, stack: contextlib.ExitStack):
        # A missing or broken throwaway cluster is the environment's fault,
        # not queuelog's: note it and go on without the PostgreSQL column.
        try:
            url = stack.enter_context(postgres_cluster())
        except Exception as exc:
            traceback.print_exc()
            self.notes.append(f"PostgreSQL skipped: cluster failed: {exc!r}"[:300])
            return None
        if url is None:
            self.notes.append("PostgreSQL skipped: tests.support.pg_cluster unavailable.")
            return None
        make_pg_durable(url)
        return self._start(stack, "postgresql", lambda: Queuelog("postgresql", url, self.log_dir))


def git_commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                         capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="small counts (about a minute): for CI and smoke tests")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results",
                        help="directory for bench.md, bench.json and server logs")
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    out_dir = args.out.resolve()
    started = dt.datetime.now(dt.UTC)
    t0 = time.monotonic()
    work_dir = Path(tempfile.mkdtemp(prefix="queuelog-bench-"))
    runner = Runner(cfg, work_dir, out_dir / "logs")
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
        "figure is its request rate ÷ 3. \"Claim + complete only\" rows time the drain alone "
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
    ]
    meta = {"mode": "quick" if args.quick else "full", "started": started.isoformat(timespec="seconds"),
            "cpus": os.cpu_count(), "commit": git_commit(), "python": sys.version.split()[0],
            "gunicorn_workers": GUNICORN_WORKERS, "seconds": time.monotonic() - t0}
    checks = [c.as_dict() for c in runner.checks]
    text = report.write(out_dir, cfg, meta, runner.metrics, checks, runner.notes)
    print()
    print(text)
    print(f"[bench] wrote {out_dir / 'bench.md'} and {out_dir / 'bench.json'}")
    # Only queuelog's own checks decide the exit status: a peer that loses a
    # job under load is a finding to report, not a reason to fail CI.
    return 0 if all(c["ok"] for c in checks if c["target"] in report.QUEUELOG_KEYS) else 1


if __name__ == "__main__":
    sys.exit(main())
