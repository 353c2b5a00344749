"""The two HTTP systems: queuelog itself and the bare-Flask ceiling.

Both are served by :class:`bench.servers.GunicornServer` with identical
settings and driven by the worker functions in :mod:`bench.clients`.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

import requests

from bench import clients, fill
from bench.config import Check, Config
from bench.procs import WorkerFailed, fmt_rate, run_processes, split
from bench.servers import REPO_ROOT, GunicornServer
from bench.system import EndToEnd, System, verify_once

COMPLETED = "completed"


def _enqueue_args(base_url: str, token: str | None, kind: str, jobs: int, batch: int, clients_n: int) -> list[dict]:
    parts = split(jobs, clients_n)
    return [
        {"kind": kind, "base_url": base_url, "token": token, "count": c, "batch": batch, "first": sum(parts[:i])}
        for i, c in enumerate(parts)
        if c
    ]


# --------------------------------------------------------------------------
# queuelog


def create_key(checkout: Path, env: dict[str, str], name: str, role: str) -> str:
    """``flask keys create`` in ``checkout`` with ``env`` (the server's settings): the new key's secret."""
    out = subprocess.run(
        [sys.executable, "-m", "flask", "--app", "app", "keys", "create", name, "--role", role],
        cwd=checkout,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    if out.returncode != 0 or not out.stdout.strip():
        raise RuntimeError(f"flask keys create {role} failed: {out.stderr.strip()[-500:]}")
    return out.stdout.strip().splitlines()[-1].strip()


class Queuelog(System):
    """One queuelog server on one database, plus a producer and a worker key."""

    enqueue_batches = frozenset({1, 50, 100, 500})
    drain_paths = frozenset({"single", "batch"})

    def __init__(
        self,
        column: str,
        db_url: str,
        log_dir: Path,
        settings: dict[str, str] | None = None,
        probe_latency: bool = True,
        threads: int | None = None,
    ):
        self.column = column
        self.db_url = db_url
        # Text log lines, whatever the caller's environment says: the pickup probe reads them.
        self.env = {
            "QUEUELOG_DATABASE_URL": db_url,
            "QUEUELOG_JOB_TYPES": "noop",
            "QUEUELOG_LOG_FORMAT": "text",
            **(settings or {}),
        }
        self.probe_latency = probe_latency
        # threads: gunicorn's gthread workers, as the README's production command runs them.
        self.server = GunicornServer("app:app", self.env, log_dir / f"gunicorn-{column}.log", threads)
        self.producer = self.worker = ""
        self.total_enqueued = 0

    def __enter__(self) -> Queuelog:
        self.server.start()
        try:
            # Keys after the server is up: the schema is created on start.
            self.producer = self._create_key(f"bench-producer-{os.getpid()}", "producer")
            self.worker = self._create_key(f"bench-worker-{os.getpid()}", "worker")
        except BaseException:
            self.server.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.server.stop()

    def _create_key(self, name: str, role: str) -> str:
        return create_key(REPO_ROOT, self.env, name, role)

    def enqueue(self, jobs: int, batch: int, clients_n: int, cfg: Config) -> tuple[float, list]:
        args = _enqueue_args(self.server.url, self.producer, "queuelog", jobs, batch, clients_n)
        run = run_processes(clients.enqueue_worker, args, cfg.timeout)
        ids = [i for r in run.results for i in r["ids"]]
        self.total_enqueued += len(ids)
        if len(ids) != jobs:
            raise WorkerFailed(
                f"enqueue made {len(ids)} of {jobs} jobs: {[s for r in run.results for s in r['error_samples']][:3]}"
            )
        return run.elapsed, ids

    def drain(
        self, path: str, workers: int, ids: list, cfg: Config, metric: str | None
    ) -> tuple[float | None, list[Check]]:
        fn = clients.drain_single_worker if path == "single" else clients.drain_batch_worker
        args = [
            {"base_url": self.server.url, "token": self.worker, "total_jobs": len(ids), "limit": cfg.claim_limit}
        ] * workers
        run = run_processes(fn, args, cfg.timeout)
        what = f"{path} drain, {workers} workers"
        # Two views of exactly-once: what the workers saw, and what the
        # database says about every job ever enqueued in this run.
        counts = fill.status_counts(self.db_url)
        checks = [
            verify_once(self.column, what, ids, run.results, metric),
            Check(
                self.column,
                f"database after {what}",
                counts == {COMPLETED: self.total_enqueued},
                f"status counts {counts}, expected {self.total_enqueued} {COMPLETED}",
                metric,
            ),
        ]
        return run.elapsed or None, checks

    # -- claim latency -----------------------------------------------------

    def template_job(self):
        """One job made by the app itself, to be copied by the bulk fill."""
        resp = requests.post(
            self.server.url + "/jobs",
            json=clients.job_body(-1),
            timeout=30,
            headers={"Authorization": f"Bearer {self.producer}"},
        )
        resp.raise_for_status()
        return resp.json()["id"]

    def latency(self, cfg: Config, metrics: dict) -> None:
        """Claim latency at growing pending counts; server RSS around the largest fill."""
        for target in sorted(cfg.fills):
            is_largest = target == max(cfg.fills)
            if is_largest:
                metrics["rss_before_mib"] = self.server.rss_bytes() / 2**20
            # A fresh template each time: the previous one has been claimed by now.
            template = self.template_job()
            pending = fill.status_counts(self.db_url).get("pending", 0)
            seconds = fill.fill_pending(self.db_url, template, target - pending)
            print(f"[bench] {self.column}: filled to {target:,} pending in {seconds:.1f}s", flush=True)
            lat = clients.claim_latencies(
                self.server.url, self.worker, cfg.latency_samples, cfg.latency_warmup, cfg.latency_budget_s
            )
            metrics[f"claim_samples_{target}"] = len(lat)
            metrics[f"claim_p50_{target}"] = percentile(lat, 50)
            metrics[f"claim_p99_{target}"] = percentile(lat, 99)
            print(
                f"[bench] {self.column}: claim @{target:,}: p50 {percentile(lat, 50):.1f} ms, "
                f"p99 {percentile(lat, 99):.1f} ms ({len(lat)} samples)",
                flush=True,
            )
            if is_largest:
                metrics["rss_after_mib"] = self.server.rss_bytes() / 2**20


def percentile(values: list[float], pct: float) -> float:
    """Linearly interpolated percentile (statistics.quantiles, inclusive method)."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(pct) - 1]


# --------------------------------------------------------------------------
# The Flask ceiling


class Ceiling(System):
    """Bare Flask: one request per enqueued job, three per end-to-end job.

    Its end-to-end round is N processes each running 3-request cycles
    (enqueue, claim, complete stand-ins), timed as one phase: the same
    number of requests per job, from the same number of processes, as
    queuelog's single path spends over its enqueue and drain phases.
    """

    column = "ceiling"

    def __init__(self, log_dir: Path):
        self.server = GunicornServer("bench.ceiling_app:app", None, log_dir / "gunicorn-ceiling.log")

    def __enter__(self) -> Ceiling:
        self.server.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.stop()

    discard_untimed = True  # nothing is stored, so nothing to drain

    def enqueue(self, jobs: int, batch: int, clients_n: int, cfg: Config) -> tuple[float, list]:
        args = _enqueue_args(self.server.url, None, "ceiling", jobs, 1, clients_n)
        run = run_processes(clients.enqueue_worker, args, cfg.timeout)
        return run.elapsed, [i for r in run.results for i in r["ids"]]

    def end_to_end(self, path: str, workers: int, jobs: int, cfg: Config, metric: str) -> EndToEnd:
        parts = split(jobs, workers)
        args = [{"base_url": self.server.url, "count": c, "first": sum(parts[:i])} for i, c in enumerate(parts) if c]
        run = run_processes(clients.ceiling_cycle_worker, args, cfg.timeout)
        check = verify_once(self.column, f"3-request cycles, {workers} workers", list(range(jobs)), run.results, metric)
        return EndToEnd(jobs, run.elapsed or None, [check])


__all__ = ["Ceiling", "Queuelog", "fmt_rate", "percentile"]
