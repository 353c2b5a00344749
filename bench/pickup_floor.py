"""The floor under a pickup on this machine: the same hops as queuelog's, with nothing but sockets and fsyncs.

    .venv/bin/python -m bench.pickup_floor [--samples 90] [--with-queuelog] [--idle S S] [--quick]

A pickup (enqueue request → the idle worker's handler starts) has to cross, whatever the queue is made of:
the producer's request to a server process, a durable write there, a wake-up of the server process that holds
the worker's long-poll, a durable claim there, and the answer to the worker. This script builds that chain
out of three plain Python processes — no web framework, no database engine, no queue — and times it the way
the benchmark's pickup probe does: idle 0.3-0.9 s, then one request, from the producer's clock reading to
the handler's.

Three chains, measured in turns in one run so the machine's noise hits them alike:

- ``bare``: each process does its step on one thread (recv → write + fdatasync → send).
- ``threads``: the thread hand-overs queuelog's stack makes: in each server process a listener thread hands
  the request to a serving thread (gunicorn's gthread: poller → pool), the wake-up goes to a listener thread
  and on to the waiting claim's thread, and the worker's claim thread hands the job to a slot thread.
- ``sqlite``: ``threads`` with each durable write a real SQLite commit (WAL, synchronous=FULL) instead of a
  bare fdatasync.

What it shows is the part of a pickup that no code of ours can remove on this machine: what an idle
CPU costs each wake-up (a round trip that does no work at all is slower after idle than back to back).
With ``--with-queuelog`` the same rounds also take samples of queuelog itself, as ``bench.run``'s pickup probe
does (the production command on SQLite, one ``queuelog-worker --concurrency 1``, the producer reconnecting
between samples so its enqueues reach every server process), so the floor and the product are measured side
by side. A figure to read, not a test: it fails on nothing. ``--quick`` (a smoke test,
tests/benchmarks/test_bench_pickup_floor.py) takes a few samples per chain, one round, with short idles.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import queue
import random
import socket
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

from bench.targets import percentile

IDLE_S = (0.3, 0.9)
CHAINS = ("bare", "threads", "sqlite")
QUEUELOG = "queuelog (SQLite, the production command)"
REQUEST = b'POST /jobs HTTP/1.1\r\nContent-Length: 16\r\n\r\n{"type":"noop"}\n'
ANSWER = b'HTTP/1.1 201 Created\r\nContent-Length: 12\r\n\r\n{"id": 1234}'
CLAIM = b"POST /jobs/claim?wait=30 HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"


class DurableWrite:
    """One durable write: a record appended and fdatasync'd, or (``sqlite``) a row committed at FULL."""

    def __init__(self, directory: Path, name: str, sqlite: bool):
        self._db = None
        if sqlite:
            self._db = sqlite3.connect(directory / f"{name}.db", isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("CREATE TABLE IF NOT EXISTS jobs (id INTEGER PRIMARY KEY, body TEXT)")
        else:
            self._fd = os.open(directory / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def __call__(self) -> None:
        if self._db is not None:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute('INSERT INTO jobs (body) VALUES (\'{"type":"noop"}\')')
            self._db.execute("COMMIT")
        else:
            os.write(self._fd, b"x" * 200)
            os.fdatasync(self._fd)


def _handed_over(handle, threaded: bool):
    """Run ``handle(item)`` here, or on a second thread that the caller's thread hands each item to."""
    if not threaded:
        return handle
    items: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [handle(items.get()) for _ in iter(int, 1)], daemon=True).start()
    return items.put


def enqueue_server(listener: socket.socket, wake_path: str, directory: Path, chain: str) -> None:
    """Server process A: takes the producer's request, writes it durably, wakes B, answers."""
    write = DurableWrite(directory, "enqueue", chain == "sqlite")
    waker = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    producer, _ = listener.accept()
    producer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def serve(_request: bytes) -> None:
        write()
        waker.sendto(b"\x01", wake_path)
        producer.sendall(ANSWER)

    serve_request = _handed_over(serve, chain != "bare")
    while request := producer.recv(4096):
        serve_request(request)


def claim_server(listener: socket.socket, wake_path: str, directory: Path, chain: str) -> None:
    """Server process B: holds the worker's long-poll; on a wake-up, claims durably and answers it."""
    write = DurableWrite(directory, "claim", chain == "sqlite")
    wake = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    wake.bind(wake_path)
    worker, _ = listener.accept()
    worker.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    woken = threading.Condition()
    generation = [0]

    def wait_and_claim() -> None:
        while worker.recv(4096):  # the long-poll arrives
            with woken:
                seen = generation[0]
                woken.wait_for(lambda seen=seen: generation[0] != seen)
            write()
            worker.sendall(ANSWER)

    if chain == "bare":
        while worker.recv(4096):
            wake.recv(16)
            write()
            worker.sendall(ANSWER)
        return
    threading.Thread(target=wait_and_claim, daemon=True).start()
    while wake.recv(16):  # the wake-up listener thread
        with woken:
            generation[0] += 1
            woken.notify_all()


def worker(address: tuple[str, int], report_to: tuple[str, int], chain: str) -> None:
    """The worker: long-polls B; the handler reports the moment it starts."""
    conn = socket.create_connection(address)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reporter = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    def handler(_job: bytes) -> None:
        reporter.sendto(repr(time.monotonic()).encode(), report_to)

    run_job = _handed_over(handler, chain != "bare")
    while True:
        conn.sendall(CLAIM)
        job = conn.recv(4096)
        if not job:
            return
        run_job(job)


def _listening() -> socket.socket:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    return listener


def pickups(chain: str, samples: int, directory: Path, idle: tuple[float, float]) -> list[float]:
    """Milliseconds from the producer's clock reading before its request to the handler's, one per sample."""
    wake_path = tempfile.mktemp(suffix=".sock", dir=directory)
    enqueue_listener, claim_listener = _listening(), _listening()
    inbox = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    inbox.bind(("127.0.0.1", 0))
    inbox.settimeout(10)
    context = mp.get_context("fork")
    processes = [
        context.Process(target=claim_server, args=(claim_listener, wake_path, directory, chain), daemon=True),
        context.Process(target=enqueue_server, args=(enqueue_listener, wake_path, directory, chain), daemon=True),
        context.Process(target=worker, args=(claim_listener.getsockname(), inbox.getsockname(), chain), daemon=True),
    ]
    for process in processes:
        process.start()
    producer = socket.create_connection(enqueue_listener.getsockname())
    producer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    taken = []
    try:
        while not os.path.exists(wake_path):
            time.sleep(0.01)
        for n in range(samples + 5):  # the first five warm up
            time.sleep(random.uniform(*idle))
            before = time.monotonic()  # system-wide on Linux, like the worker's reading
            producer.sendall(REQUEST)
            producer.recv(4096)
            started = float(inbox.recv(64))
            if n >= 5:
                taken.append((started - before) * 1000)
    finally:
        producer.close()
        for process in processes:
            process.kill()
            process.join()
    return taken


@contextlib.contextmanager
def queuelog_probe(directory: Path, idle: tuple[float, float]):
    """A function taking n pickup samples of queuelog (after five to warm up), while the block lasts."""
    from bench.pickup import Inbox
    from bench.targets import Queuelog
    from bench.worker_systems import QueuelogWorkers

    server = Queuelog("SQLite", f"sqlite:///{directory / 'queuelog.db'}", directory, threads=8)
    with QueuelogWorkers(server) as system, Inbox() as inbox:
        pool = system.pool(1, directory)
        pool.launch()
        sample = iter(range(1_000_000))

        def take(samples: int) -> list[float]:
            taken = []
            for _ in range(samples):
                time.sleep(random.uniform(*idle))
                n = next(sample)
                before = time.monotonic()
                job_id = system.enqueue_one({"report_to": inbox.port, "sample": [0, n]})
                taken.append((inbox.wait_for((0, n), 10) - before) * 1000)
                system.between_samples(job_id)  # the next enqueue may land on any server process
            return taken

        try:
            pool.wait_ready(120)
            take(5)
            yield take
        finally:
            pool.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=90, help="per chain, over all rounds")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--with-queuelog", action="store_true")
    parser.add_argument(
        "--idle",
        type=float,
        nargs=2,
        default=IDLE_S,
        metavar=("MIN_S", "MAX_S"),
        help="seconds of idle before each sample, drawn from this range (0.02 0.04: back to back, "
        "leaving the last job time to be acknowledged)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a smoke test: 3 samples per chain in one round, 0.02-0.05 s idle"
    )
    args = parser.parse_args()
    if args.quick:
        args.samples, args.rounds, args.idle = 3, 1, (0.02, 0.05)
    idle = tuple(args.idle)
    names = CHAINS + ((QUEUELOG,) if args.with_queuelog else ())
    results: dict[str, list[float]] = {name: [] for name in names}
    per_round = args.samples // args.rounds
    with tempfile.TemporaryDirectory(prefix="pickup-floor-") as directory, contextlib.ExitStack() as stack:
        queuelog = stack.enter_context(queuelog_probe(Path(directory), idle)) if args.with_queuelog else None
        for _ in range(args.rounds):  # in turns: the machine's noise spreads over every chain alike
            for chain in CHAINS:
                results[chain] += pickups(chain, per_round, Path(directory), idle)
            if queuelog is not None:
                results[QUEUELOG] += queuelog(per_round)
    print(
        f"pickup: ms from the producer's clock reading to the handler's, after {idle[0]}-{idle[1]} s idle, "
        f"{args.rounds} rounds in turns"
    )
    print(f"  {'chain':<42} {'samples':>7} {'p50':>7} {'p90':>7} {'p99':>7}")
    for name, values in results.items():
        p50, p90, p99 = (percentile(values, pct) for pct in (50, 90, 99))
        print(f"  {name:<42} {len(values):7d} {p50:7.2f} {p90:7.2f} {p99:7.2f}")


if __name__ == "__main__":
    main()
