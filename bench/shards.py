"""Entry point: ``python -m bench.shards [--quick]``: job types spread over two PostgreSQL databases behind one
HTTP API (bench/shard_router.py), measured beside one database in the same run.

On one throwaway cluster it makes three databases: ``single`` (every type) and ``shard_a``, ``shard_b`` (two
types each). Each gets a queuelog gunicorn as the README starts it; the router fronts the two shards. For each
target, in turn: producers enqueue jobs of the four types one ``POST /jobs`` at a time; then shipped
``queuelog-worker`` processes, pointed at the target's URL and knowing nothing of shards, drain them, and
probe jobs time an idle worker's pickup. It prints enqueue rate and latency, drain rate, pickup, whether every
job completed exactly once (by the databases' own event logs), and the router's answers to what a shard cannot
do alone. docs/scaling.md reads these figures.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import requests

from bench.servers import REPO_ROOT, GunicornServer, postgres_cluster
from bench.shard_router import ID_SPAN
from bench.targets import create_key, percentile
from queuelog.worker import Worker

SHARD_TYPES = {"shard_a": ["alpha", "beta"], "shard_b": ["gamma", "delta"]}
ALL_TYPES = [t for types in SHARD_TYPES.values() for t in types]
ROLES = ("producer", "worker", "admin")

#: The shipped worker's application: a no-op handler for every type (``queuelog-worker bench.shards:worker``).
worker = Worker()
for _job_type in ALL_TYPES:
    worker.handler(_job_type)(lambda payload=None: {"ok": True})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.shards", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke test")
    args = parser.parse_args(argv)
    jobs, clients, workers = (200, 4, 2) if args.quick else (3000, 8, 4)
    with tempfile.TemporaryDirectory(prefix="queuelog-shards-") as scratch, postgres_cluster() as cluster_url:
        if cluster_url is None:
            print("[shards] no PostgreSQL on this machine: nothing measured")
            return 1
        logs = Path(scratch)
        urls = {name: make_database(cluster_url, name) for name in ("single", *SHARD_TYPES)}
        servers, keys = {}, {}
        try:
            for name, types in (("single", ALL_TYPES), *SHARD_TYPES.items()):
                env = server_env(urls[name], types)
                servers[name] = GunicornServer("app:app", env, logs / f"{name}.log", threads=8).start("/healthz")
                keys[name] = {role: create_key(REPO_ROOT, env, f"bench-{role}", role) for role in ROLES}
            move_ids(urls["shard_b"], ID_SPAN)
            shards = [{"name": name, "url": servers[name].url, "types": types} for name, types in SHARD_TYPES.items()]
            router_env = {
                "QUEUELOG_SHARDS": json.dumps(shards),
                "QUEUELOG_SHARD_KEYS": json.dumps(
                    {keys["shard_a"][role]: [keys[name][role] for name in SHARD_TYPES] for role in ROLES}
                ),
            }
            servers["router"] = GunicornServer("bench.shard_router:app", router_env, logs / "router.log", threads=8)
            servers["router"].start("/")
            results = {
                "one database": measure(
                    servers["single"].url, keys["single"], [urls["single"]], jobs, clients, workers
                ),
                "two shards, routed": measure(
                    servers["router"].url, keys["shard_a"], [urls[n] for n in SHARD_TYPES], jobs, clients, workers
                ),
            }
            refusals = cross_shard_answers(servers["router"].url, keys["shard_a"])
        finally:
            for server in servers.values():
                server.stop()
    report(results, refusals, jobs, clients, workers)
    return 0 if all(r["exactly_once"] for r in results.values()) and all(refusals.values()) else 1


def server_env(url: str, types: list[str]) -> dict[str, str]:
    return {
        "QUEUELOG_DATABASE_URL": url,
        "QUEUELOG_JOB_TYPES": ",".join(types),
        "QUEUELOG_SECRET_KEY": "bench-shards",
        "QUEUELOG_PUSH": "false",
    }


def connect(url: str, autocommit: bool = False) -> psycopg.Connection:
    """A plain psycopg connection to a database the servers know by its SQLAlchemy URL."""
    return psycopg.connect(url.replace("+psycopg", ""), autocommit=autocommit)


def make_database(cluster_url: str, name: str) -> str:
    with connect(cluster_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    base, _, _ = cluster_url.rpartition("/")
    return f"{base}/{name}"


def move_ids(url: str, last_id: int) -> None:
    """Shard b's jobs take ids above ``last_id``: the router reads a job's shard from its id."""
    with connect(url, autocommit=True) as conn:
        conn.execute("SELECT setval(pg_get_serial_sequence('jobs', 'id'), %s)", (last_id,))


def measure(url: str, keys: dict[str, str], databases: list[str], jobs: int, clients: int, workers: int) -> dict:
    """Enqueue ``jobs`` from ``clients`` threads, then drain them with ``workers`` shipped worker processes."""

    def produce(client: int) -> list[tuple[float, int]]:
        session, done = requests.Session(), []
        for n in range(client, jobs, clients):
            started = time.perf_counter()
            answer = session.post(
                url + "/jobs",
                json={"type": ALL_TYPES[n % len(ALL_TYPES)], "payload": {"n": n}},
                headers={"Authorization": f"Bearer {keys['producer']}"},
                timeout=60,
            )
            answer.raise_for_status()
            done.append((time.perf_counter() - started, answer.json()["id"]))
        return done

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        answers = [a for done in pool.map(produce, range(clients)) for a in done]
    enqueue_seconds = time.perf_counter() - started
    latencies = [seconds for seconds, _ in answers]
    env = {**os.environ, "QUEUELOG_API_KEY": keys["worker"], "QUEUELOG_URL": url, "PYTHONPATH": str(REPO_ROOT)}
    started = time.perf_counter()
    processes = [
        subprocess.Popen(
            [str(Path(sys.executable).parent / "queuelog-worker"), "bench.shards:worker", "--concurrency", "4"],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(workers)
    ]
    try:
        deadline = time.monotonic() + 300
        while completed(databases) < jobs and time.monotonic() < deadline:
            time.sleep(0.05)
        drain_seconds = time.perf_counter() - started
        pickups, probe_ids = idle_pickups(url, keys, databases, probes=max(10, jobs // 75))
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(timeout=60)
    ids = sorted(job_id for _, job_id in answers)
    return {
        "enqueue_rate": jobs / enqueue_seconds,
        "enqueue_p50_ms": percentile(latencies, 50) * 1000,
        "enqueue_p99_ms": percentile(latencies, 99) * 1000,
        "drain_rate": jobs / drain_seconds,
        "exactly_once": completions_per_job(databases) == dict.fromkeys([*ids, *probe_ids], 1),
        "pickup_p50_ms": percentile(pickups, 50) * 1000,
        "pickup_p99_ms": percentile(pickups, 99) * 1000,
        "id_ranges": (ids[0], ids[-1]),
    }


def idle_pickups(url: str, keys: dict[str, str], databases: list[str], probes: int) -> tuple[list[float], list[int]]:
    """Seconds from each probe job's enqueue to its claim, one at a time, while the workers wait idle: the types
    take turns, so through the router half the probes land on the shard a worker was not waiting on. Also the
    probes' ids."""
    session, ids = requests.Session(), []
    headers = {"Authorization": f"Bearer {keys['producer']}"}
    for n in range(probes):
        time.sleep(0.25)  # the workers finished the last one and wait again
        job = session.post(url + "/jobs", json={"type": ALL_TYPES[n % len(ALL_TYPES)]}, headers=headers, timeout=30)
        ids.append(job.json()["id"])
        session.get(url + f"/jobs/{ids[-1]}?wait=10", headers=headers, timeout=30)  # answers once it is done
    pickups = []
    for database in databases:
        with connect(database) as conn:
            rows = conn.execute(
                "SELECT extract(epoch FROM max(at) FILTER (WHERE event = 'claimed')"
                " - min(at) FILTER (WHERE event = 'enqueued')) FROM job_events WHERE job_id = ANY(%s) GROUP BY job_id",
                (ids,),
            )
            pickups += [float(seconds) for (seconds,) in rows]
    return pickups, ids


def completed(databases: list[str]) -> int:
    total = 0
    for url in databases:
        with connect(url) as conn:
            total += conn.execute("SELECT count(*) FROM jobs WHERE status = 'completed'").fetchone()[0]
    return total


def completions_per_job(databases: list[str]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for url in databases:
        with connect(url) as conn:
            rows = conn.execute("SELECT job_id, count(*) FROM job_events WHERE event = 'completed' GROUP BY job_id")
            counts.update({job_id: count for job_id, count in rows})
    return counts


def cross_shard_answers(url: str, keys: dict[str, str]) -> dict[str, bool]:
    """What the router refuses, and what it still does, each True when it answered as designed."""

    def post(path: str, body: dict, role: str = "producer") -> requests.Response:
        headers = {"Authorization": f"Bearer {keys[role]}"}
        return requests.post(url + path, json=body, headers=headers, timeout=30)

    on_a = post("/jobs", {"type": "alpha", "run_at": "2099-01-01T00:00:00Z"}).json()["id"]
    on_b = post("/jobs", {"type": "gamma", "run_at": "2099-01-01T00:00:00Z"}).json()["id"]
    spanning = post("/jobs/batch", {"jobs": [{"type": "alpha"}, {"type": "gamma"}]})
    parent_elsewhere = post("/jobs", {"type": "gamma", "depends_on": [on_a]})
    parent_here = post("/jobs", {"type": "delta", "depends_on": [on_b]})
    seen = requests.get(url + f"/jobs/{on_b}", headers={"Authorization": f"Bearer {keys['producer']}"}, timeout=30)
    metrics = requests.get(url + "/metrics", headers={"Authorization": f"Bearer {keys['admin']}"}, timeout=30).text
    return {
        "a batch over two shards: 422": spanning.status_code == 422,
        "depends_on a job of another shard: 422": parent_elsewhere.status_code == 422,
        "depends_on a job of the same shard: 201": parent_here.status_code == 201,
        "a job of shard b read by its id: 200": seen.status_code == 200 and seen.json()["id"] == on_b > ID_SPAN,
        "/metrics labelled by shard": 'shard="shard_a"' in metrics and 'shard="shard_b"' in metrics,
    }


def report(results: dict, refusals: dict, jobs: int, clients: int, workers: int) -> None:
    print(f"\n{jobs} jobs of 4 types; {clients} producer threads, one POST /jobs each; then {workers} queuelog-worker")
    print("processes (--concurrency 4) drain them. PostgreSQL, one throwaway cluster, gunicorn -w 4 --threads 8.\n")
    print(
        "| target | enqueue jobs/s | enqueue p50 / p99 ms | drain jobs/s | idle pickup p50 / p99 ms "
        "| every job completed once |"
    )
    print("|---|---:|---:|---:|---:|---|")
    for name, r in results.items():
        once = "yes" if r["exactly_once"] else "NO"
        enqueue = f"{r['enqueue_p50_ms']:.1f} / {r['enqueue_p99_ms']:.1f}"
        pickup = f"{r['pickup_p50_ms']:.1f} / {r['pickup_p99_ms']:.1f}"
        print(f"| {name} | {r['enqueue_rate']:,.0f} | {enqueue} | {r['drain_rate']:,.0f} | {pickup} | {once} |")
    single, routed = results["one database"], results["two shards, routed"]
    print(
        f"\nrouted ÷ one database: enqueue {routed['enqueue_rate'] / single['enqueue_rate']:.2f}×, "
        f"drain {routed['drain_rate'] / single['drain_rate']:.2f}×, "
        f"enqueue p50 +{routed['enqueue_p50_ms'] - single['enqueue_p50_ms']:.1f} ms"
    )
    print("\nacross shards:")
    for what, ok in refusals.items():
        print(f"- {what}: {'as designed' if ok else 'NOT as designed'}")


if __name__ == "__main__":
    sys.exit(main())
