"""Where an API request's time goes when nothing else runs: enqueue, claim and complete, back to back, in-process.

    PYTHONPATH=$PWD .venv/bin/python scripts/measure_request_parts.py [--rounds 500] [--database-url URL]

The pickup's path is an enqueue request and a claim request (``measure_pickup_floor.py``,
``measure_pickup_breakdown.py``). This times both, and a complete, through Flask's test client on one thread
with no idle time between them, and times some of their parts by wrapping them: the key lookup, the queue
operation, the group commit's begin and end, the WAL's fdatasync, and each request hook. Medians in µs. The
wrapping adds about a microsecond a part; the test client adds its own work to each request (compare
``GET /healthz``, which does nothing but the hooks). A figure to read, not a test: it fails on nothing.
"""
from __future__ import annotations

import argparse
import collections
import functools
import statistics
import tempfile
import time

import queuelog.api.auth as api_auth
from queuelog import create_app
from queuelog import queue as queue_operations
from queuelog.database import group_commit, wal_sync
from queuelog.keys import create_key

WARM_UP = 100
times: dict[str, list[float]] = collections.defaultdict(list)


def _timed(name: str, function):
    @functools.wraps(function)
    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            times[name].append((time.perf_counter() - started) * 1e6)
    return timed


def _wrap_parts() -> None:
    api_auth.authenticate = _timed("the key lookup (authenticate)", api_auth.authenticate)
    for name in ("enqueue", "claim", "complete"):
        setattr(queue_operations, name, _timed(f"the queue operation ({name})", getattr(queue_operations, name)))
    committer = group_commit.GroupCommitter
    committer._group_to_join = _timed("group commit: connection, writers' turn, BEGIN", committer._group_to_join)
    committer._end = _timed("group commit: COMMIT, turn given back, WAL synced", committer._end)
    wal_sync.WalSync.wait_durable = _timed("the WAL's fdatasync (within the group commit's end)",
                                           wal_sync.WalSync.wait_durable)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--database-url", help="default: a new SQLite file")
    args = parser.parse_args()
    _wrap_parts()
    url = args.database_url or f"sqlite:///{tempfile.mkdtemp(prefix='request-parts-')}/queuelog.db"
    app = create_app({"DATABASE_URL": url, "JOB_TYPES": ["noop"], "LOG_FORMAT": "text"})
    for kind in ("before_request_funcs", "after_request_funcs"):
        hooks = getattr(app, kind)[None]
        hooks[:] = [_timed(f"{kind.removesuffix('_funcs')} hook {hook.__qualname__}", hook) for hook in hooks]
    with app.app_context():
        suffix = time.time_ns()
        producer = {"Authorization": f"Bearer {create_key(f'parts-producer-{suffix}', 'producer')}"}
        worker = {"Authorization": f"Bearer {create_key(f'parts-worker-{suffix}', 'worker')}"}
    client = app.test_client()

    def request(name: str, method: str, path: str, **kwargs):
        started = time.perf_counter()
        response = client.open(path, method=method, **kwargs)
        times[f"REQUEST {name}"].append((time.perf_counter() - started) * 1e6)
        return response

    def one_job() -> None:
        request("POST /jobs", "POST", "/jobs", json={"type": "noop"}, headers=producer)
        claimed = request("POST /jobs/claim", "POST", "/jobs/claim", json={"limit": 1}, headers=worker)
        job = claimed.get_json()["jobs"][0]
        request("POST /jobs/{id}/complete", "POST", f"/jobs/{job['id']}/complete",
                json={"claim_token": job["claim_token"]}, headers=worker)
        request("GET /healthz", "GET", "/healthz")

    for _ in range(WARM_UP):
        one_job()
    times.clear()
    for _ in range(args.rounds):
        one_job()
    print(f"{args.rounds} rounds, medians in µs ({url.split(':')[0]})")
    for name in sorted(times, key=lambda name: not name.startswith("REQUEST")):   # then in the order first timed
        print(f"  {name:<62} {statistics.median(times[name]):8.1f}   (n={len(times[name])})")


if __name__ == "__main__":
    main()
