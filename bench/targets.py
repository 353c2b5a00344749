"""The two HTTP targets: queuelog itself and the bare-Flask ceiling.

Both are served by :class:`bench.servers.GunicornServer` with identical
settings and driven by the worker functions in :mod:`bench.clients`.  Each
``run_*`` function returns ``(metrics, checks)``: a flat ``{metric: value}``
dict for the report and a list of correctness checks.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

import requests

from bench import clients, fill
from bench.config import Check, Config
from bench.procs import WorkerFailed, fmt_rate, run_processes, split
from bench.servers import REPO_ROOT, GunicornServer

COMPLETED = "completed"


def verify_once(target: str, what: str, enqueued: list, runs: list[dict],
                metric: str | None = None) -> Check:
    """Compare what was enqueued with what workers completed (client side)."""
    done = [i for r in runs for i in r["ids"]]
    dupes = [i for i, n in Counter(done).items() if n > 1]
    missing = set(enqueued) - set(done)
    errors = sum(r.get("errors", 0) for r in runs)
    samples = [s for r in runs for s in r.get("error_samples", [])][:3]
    ok = not dupes and not missing and len(done) == len(enqueued)
    detail = (f"{len(done)} completions for {len(enqueued)} jobs, {len(dupes)} duplicated, "
              f"{len(missing)} missing, {errors} retried/unexpected responses")
    if samples:
        detail += f"; e.g. {samples}"
    return Check(target, what, ok, detail, metric)


# --------------------------------------------------------------------------
# queuelog


class Queuelog:
    """One queuelog server on one database, plus its API keys."""

    def __init__(self, label: str, db_url: str, log_dir: Path):
        self.label = label
        self.db_url = db_url
        self.env = {"QUEUELOG_DATABASE_URL": db_url, "QUEUELOG_JOB_TYPES": "noop"}
        self.server = GunicornServer("app:app", self.env, log_dir / f"gunicorn-{label}.log")
        self.producer = self.worker = ""

    def __enter__(self) -> "Queuelog":
        self.server.start()
        # Keys after the server is up: the schema is created on start.
        self.producer = self._create_key(f"bench-producer-{os.getpid()}", "producer")
        self.worker = self._create_key(f"bench-worker-{os.getpid()}", "worker")
        return self

    def __exit__(self, *exc) -> None:
        self.server.stop()

    def _create_key(self, name: str, role: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "flask", "--app", "app", "keys", "create", name, "--role", role],
            cwd=REPO_ROOT, env={**os.environ, **self.env}, capture_output=True, text=True, timeout=120)
        if out.returncode != 0 or not out.stdout.strip():
            raise RuntimeError(f"flask keys create {role} failed: {out.stderr.strip()[-500:]}")
        return out.stdout.strip().splitlines()[-1].strip()

    # -- rounds -----------------------------------------------------------

    def enqueue(self, jobs: int, batch: int, clients_n: int, timeout: float) -> tuple[float, list]:
        """Enqueue ``jobs`` jobs from ``clients_n`` processes; (jobs/s, ids)."""
        parts = split(jobs, clients_n)
        args = [{"kind": "queuelog", "base_url": self.server.url, "token": self.producer,
                 "count": c, "batch": batch, "first": sum(parts[:i])}
                for i, c in enumerate(parts) if c]
        run = run_processes(clients.enqueue_worker, args, timeout)
        ids = [i for r in run.results for i in r["ids"]]
        if len(ids) != jobs:
            raise WorkerFailed(f"enqueue made {len(ids)} of {jobs} jobs: "
                               f"{[s for r in run.results for s in r['error_samples']][:3]}")
        return jobs / run.elapsed, ids

    def drain(self, path: str, workers: int, total: int, limit: int, timeout: float):
        """Drain the queue with ``workers`` processes; (jobs/s, worker results)."""
        fn = clients.drain_single_worker if path == "single" else clients.drain_batch_worker
        args = [{"base_url": self.server.url, "token": self.worker, "total_jobs": total,
                 "limit": limit}] * workers
        run = run_processes(fn, args, timeout)
        completed = sum(len(r["ids"]) for r in run.results)
        return (completed / run.elapsed if run.elapsed else None), run.results

    def template_job(self):
        """One job made by the app itself, to be copied by the bulk fill."""
        resp = requests.post(self.server.url + "/jobs", json=clients.job_body(-1), timeout=30,
                             headers={"Authorization": f"Bearer {self.producer}"})
        resp.raise_for_status()
        return resp.json()["id"]


def run_queuelog(label: str, db_url: str, cfg: Config, log_dir: Path) -> tuple[dict, list[Check]]:
    """All queuelog measurements on one database.

    A phase that aborts becomes a failed check; the figures gathered before
    it, and the other phase, are kept.
    """
    metrics: dict = {}
    checks: list[Check] = []
    with Queuelog(label, db_url, log_dir) as ql:
        for phase in (_throughput_phase, _latency_phase):
            try:
                phase(ql, cfg, metrics, checks)
            except Exception as exc:
                checks.append(Check(label, phase.__name__.strip("_"), False, f"aborted: {exc!r}"[:500]))
    return metrics, checks


def _throughput_phase(ql: Queuelog, cfg: Config, metrics: dict, checks: list[Check]) -> None:
    """Enqueue rates and end-to-end drains, each drain checked for exactly-once."""
    label = ql.label
    total_enqueued = 0
    drains = [(p, w) for p in ("single", "batch") for w in cfg.workers]
    enqueue_modes = list(cfg.enqueue_batches)
    # Each drain round needs a full queue; the enqueue rounds that fill it
    # are the enqueue measurements (single, then batches), after which
    # untimed enqueues in the largest batch size fill the rest.
    for idx in range(max(len(drains), len(enqueue_modes))):
        batch = enqueue_modes[idx] if idx < len(enqueue_modes) else max(enqueue_modes)
        rate, ids = ql.enqueue(cfg.jobs, batch, cfg.enqueue_clients, cfg.timeout)
        if idx < len(enqueue_modes):
            metrics[f"enqueue_{batch}"] = rate
            print(f"[bench] {label}: enqueue batch={batch}: {fmt_rate(rate)} jobs/s", flush=True)
        total_enqueued += len(ids)
        path, workers = drains[idx] if idx < len(drains) else ("batch", max(cfg.workers))
        rate, results = ql.drain(path, workers, cfg.jobs, cfg.claim_limit, cfg.timeout)
        what = f"{path} drain, {workers} workers"
        key = f"e2e_{path}_w{workers}" if idx < len(drains) else None
        if key:
            metrics[key] = rate
            print(f"[bench] {label}: {what}: {fmt_rate(rate)} jobs/s", flush=True)
        checks.append(verify_once(label, what, ids, results, key))
        # The database must agree: every job ever enqueued is completed.
        counts = fill.status_counts(ql.db_url)
        checks.append(Check(label, f"database after {what}",
                            counts == {COMPLETED: total_enqueued},
                            f"status counts {counts}, expected {total_enqueued} {COMPLETED}", key))


def _latency_phase(ql: Queuelog, cfg: Config, metrics: dict, checks: list[Check]) -> None:
    """Claim latency with growing numbers of pending jobs, RSS around the largest fill."""
    label = ql.label
    for target in sorted(cfg.fills):
        is_largest = target == max(cfg.fills)
        if is_largest:
            metrics["rss_before_mib"] = ql.server.rss_bytes() / 2**20
        # A fresh template each time: the previous one has been claimed by now.
        template = ql.template_job()
        pending = fill.status_counts(ql.db_url).get("pending", 0)
        seconds = fill.fill_pending(ql.db_url, template, target - pending)
        print(f"[bench] {label}: filled to {target} pending in {seconds:.1f}s", flush=True)
        lat = clients.claim_latencies(ql.server.url, ql.worker, cfg.latency_samples,
                                      cfg.latency_warmup)
        metrics[f"claim_p50_{target}"] = percentile(lat, 50)
        metrics[f"claim_p99_{target}"] = percentile(lat, 99)
        print(f"[bench] {label}: claim @{target}: p50 {metrics[f'claim_p50_{target}']:.1f} ms, "
              f"p99 {metrics[f'claim_p99_{target}']:.1f} ms", flush=True)
        if is_largest:
            metrics["rss_after_mib"] = ql.server.rss_bytes() / 2**20
            metrics["rss_fill"] = target


def percentile(values: list[float], pct: float) -> float:
    """Linearly interpolated percentile (statistics.quantiles, inclusive method)."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(pct) - 1]


# --------------------------------------------------------------------------
# The Flask ceiling


def run_ceiling(cfg: Config, log_dir: Path) -> tuple[dict, list[Check]]:
    """Single-request enqueue and 3-requests-per-job "end-to-end" on bare Flask."""
    metrics: dict = {}
    checks: list[Check] = []
    with GunicornServer("bench.ceiling_app:app", None, log_dir / "gunicorn-ceiling.log").start() as srv:
        parts = split(cfg.jobs, cfg.enqueue_clients)
        args = [{"kind": "ceiling", "base_url": srv.url, "count": c, "batch": 1,
                 "first": sum(parts[:i])} for i, c in enumerate(parts) if c]
        run = run_processes(clients.enqueue_worker, args, cfg.timeout)
        metrics["enqueue_1"] = cfg.jobs / run.elapsed
        checks.append(verify_once("ceiling", "enqueue requests", list(range(cfg.jobs)), run.results))
        for workers in cfg.workers:
            parts = split(cfg.jobs, workers)
            args = [{"base_url": srv.url, "count": c, "first": sum(parts[:i])}
                    for i, c in enumerate(parts)]
            run = run_processes(clients.ceiling_cycle_worker, args, cfg.timeout)
            metrics[f"e2e_single_w{workers}"] = cfg.jobs / run.elapsed
            print(f"[bench] ceiling: {workers} workers: {fmt_rate(metrics[f'e2e_single_w{workers}'])} jobs/s "
                  f"(3 requests each)", flush=True)
            checks.append(verify_once("ceiling", f"3-request cycles, {workers} workers",
                                      list(range(cfg.jobs)), run.results, f"e2e_single_w{workers}"))
    return metrics, checks
