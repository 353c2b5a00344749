"""Push delivery's throughput beside the shipped worker's, in one run, on the README's production server.

```
.venv/bin/python -m bench.push [--jobs 2000] [--rounds 3] [--concurrency 16] [--quick]
```

One gunicorn (``--workers 4 --threads 8``, SQLite at its defaults) serves two job types: ``noop``, pulled by
``queuelog-worker bench.queuelog_tasks:worker --concurrency N``, and ``pushed``, delivered by the server's own
dispatchers (sync mode) to a local target that answers 200 at once. Each round pauses both types, enqueues
``--jobs`` of each, then resumes one and times it until none is pending or running; the two kinds take turns, so
the machine's noise falls on both. Prints jobs/s per round and the ratio of each pair. It fails only when a job
of the run did not complete, or completed twice.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests
from sqlalchemy import create_engine, text

from bench import tasks
from bench.servers import PRODUCTION_THREADS, GunicornServer, free_port
from bench.targets import create_key
from bench.worker_pool import WorkerPool
from bench.worker_systems import command

PUSHED = "pushed"
BATCH = 500


class _Target(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # a burst of deliveries must not meet socketserver's backlog of 5


class _Answer(BaseHTTPRequestHandler):
    """A push target that does nothing: 200 and an empty JSON object, at once."""

    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


def serve_target(port: int) -> None:
    _Target(("127.0.0.1", port), _Answer).serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.push", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000, help="jobs per round and kind")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each kind, in turn")
    parser.add_argument("--concurrency", type=int, default=16, help="queuelog-worker --concurrency")
    parser.add_argument("--quick", action="store_true", help="100 jobs, 1 round: a smoke test")
    parser.add_argument("--serve-target", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_target:
        serve_target(args.serve_target)
        return 0
    if args.quick:
        args.jobs, args.rounds = 100, 1
    with tempfile.TemporaryDirectory(prefix="bench-push-") as tmp:
        rates = _measure(Path(tmp), args)
        lost = _lost(Path(tmp) / "queuelog.db", args.jobs * args.rounds * 2)
    _report(rates, args)
    if lost:
        print(f"FAILED: {lost}")
        return 1
    print(f"every one of the {args.jobs * args.rounds * 2} jobs of the run completed once")
    return 0


def _measure(tmp: Path, args) -> dict[str, list[float]]:
    env = {
        "QUEUELOG_DATABASE_URL": f"sqlite:///{tmp / 'queuelog.db'}",
        "QUEUELOG_JOB_TYPES": f"{tasks.JOB_TYPE},{PUSHED}",
        "QUEUELOG_PUSH_ALLOW_PRIVATE": "1",
        "QUEUELOG_LOG_FORMAT": "text",
    }
    target_port = free_port()
    with contextlib.ExitStack() as stack:
        target = WorkerPool(
            "target", [[sys.executable, "-m", "bench.push", "--serve-target", str(target_port)]], {}, tmp, ""
        )
        target.launch()
        stack.callback(target.stop)
        server = GunicornServer("app:app", env, tmp / "gunicorn.log", PRODUCTION_THREADS).start()
        stack.callback(server.stop)
        admin = _session(create_key(Path.cwd(), env, "bench-admin", "admin"))
        producer = _session(create_key(Path.cwd(), env, "bench-producer", "producer"))
        worker_key = create_key(Path.cwd(), env, "bench-worker", "worker")
        push = {"url": f"http://127.0.0.1:{target_port}/hook", "mode": "sync", "timeout_seconds": 30}
        _patch(admin, server.url, PUSHED, {"push": push, "paused": True})
        _patch(admin, server.url, tasks.JOB_TYPE, {"paused": True})
        workers = WorkerPool(
            "worker",
            [[command("queuelog-worker"), "bench.queuelog_tasks:worker", "--concurrency", str(args.concurrency)]],
            {"QUEUELOG_URL": server.url, "QUEUELOG_API_KEY": worker_key},
            tmp,
            "worker started",
        )
        workers.launch()
        stack.callback(workers.stop)
        workers.wait_ready(120)
        rates: dict[str, list[float]] = {"push": [], "queuelog-worker": []}
        for _round in range(args.rounds):
            for kind, job_type in (("push", PUSHED), ("queuelog-worker", tasks.JOB_TYPE)):
                _enqueue(producer, server.url, job_type, args.jobs)
                started = time.monotonic()
                _patch(admin, server.url, job_type, {"paused": False})
                _drained(admin, server.url, job_type)
                rates[kind].append(args.jobs / (time.monotonic() - started))
                _patch(admin, server.url, job_type, {"paused": True})
        return rates


def _session(key: str) -> requests.Session:
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {key}"
    return session


def _patch(admin: requests.Session, url: str, job_type: str, body: dict) -> None:
    answer = admin.patch(f"{url}/types/{job_type}", json=body, timeout=30)
    answer.raise_for_status()


def _enqueue(producer: requests.Session, url: str, job_type: str, count: int) -> None:
    for start in range(0, count, BATCH):
        jobs = [{"type": job_type, "payload": {"n": n}} for n in range(start, min(count, start + BATCH))]
        producer.post(f"{url}/jobs/batch", json={"jobs": jobs}, timeout=60).raise_for_status()


def _drained(admin: requests.Session, url: str, job_type: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = admin.get(f"{url}/types/{job_type}", timeout=30).json()
        if shown["pending"] == 0 and shown["running"] == 0:
            return
        time.sleep(0.02)
    raise TimeoutError(f"{job_type} did not drain in {timeout} s")


def _lost(database: Path, expected: int) -> str | None:
    """Why the run lost or doubled a job, or None: every job completed, with one completed event each."""
    engine = create_engine(f"sqlite:///{database}")
    with engine.connect() as conn:
        jobs, completed = conn.execute(
            text("SELECT count(*), sum(CASE WHEN status = 'completed' THEN 1 ELSE 0 END) FROM jobs")
        ).one()
        doubled = conn.execute(
            text(
                "SELECT count(*) FROM (SELECT job_id FROM job_events WHERE event = 'completed'"
                " GROUP BY job_id HAVING count(*) > 1) t"
            )
        ).scalar_one()
    engine.dispose()
    if jobs != expected or completed != expected or doubled:
        return f"{jobs} jobs (expected {expected}), {completed} completed, {doubled} completed twice"
    return None


def _report(rates: dict[str, list[float]], args) -> None:
    print(
        f"\n{args.jobs} jobs per round, sync push to a target that answers at once vs queuelog-worker "
        f"--concurrency {args.concurrency}, one gunicorn --workers 4 --threads {PRODUCTION_THREADS} on SQLite\n"
    )
    print(f"{'round':>5}  {'push jobs/s':>12}  {'worker jobs/s':>14}  {'push / worker':>14}")
    for n, (push, pulled) in enumerate(zip(rates["push"], rates["queuelog-worker"], strict=True), start=1):
        print(f"{n:>5}  {push:>12.0f}  {pulled:>14.0f}  {push / pulled:>13.2f}×")
    push, pulled = statistics.median(rates["push"]), statistics.median(rates["queuelog-worker"])
    print(f"{'median':>5}  {push:>12.0f}  {pulled:>14.0f}  {push / pulled:>13.2f}×")


if __name__ == "__main__":
    sys.exit(main())
