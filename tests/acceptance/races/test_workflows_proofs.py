"""Proofs of workflows with real processes (issue 17): a 4-process gunicorn, ``queuelog-worker`` processes and
raw HTTP workers.

- a diamond (a → b, a → c, {b, c} → d) runs in order, and d's handler sees both results;
- a 1,000-job fan-out/fan-in in one batch completes, with the callback last;
- a failing parent cancels its subtree, and an admin's retry revives it (it then completes);
- 16 workers racing on a wide graph never start a child before its parents are done (event log: ids and
  times);
- a handler's progress reports show on the job while it runs.

How soon ``GET /jobs/{id}?wait=S`` answers is tests/acceptance/waiting/test_result_wait_processes.py's.

Runs on the database QUEUELOG_TEST_DB selects. Every wait is bounded.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
import requests

from queuelog.worker import Client
from tests.support.database import test_db_kind
from tests.support.flow_workers import work_until_done
from tests.support.scale import CTX, HTTP_TIMEOUT, Processes, create_keys, fresh_database_url, read_rows, server_env
from tests.support.server import REPO_ROOT, running_server

WORKER_BIN = str(Path(sys.executable).parent / "queuelog-worker")
RAW_WORKERS = 16


@pytest.fixture(scope="module")
def fleet(request, tmp_path_factory):
    """The server (4 processes × 8 threads), its database URL, and keys: a producer, an admin, 16 workers."""
    database_url = fresh_database_url(request, tmp_path_factory.mktemp("workflows"))
    producer, admin, *workers = create_keys(
        database_url,
        ("wf-producer", "producer", "critical"),
        ("wf-admin", "admin", None),
        *[(f"wf-worker-{n:02d}", "worker", None) for n in range(RAW_WORKERS)],
    )
    env = server_env(database_url, QUEUELOG_SQLITE_SYNCHRONOUS="NORMAL", QUEUELOG_LEASE_SECONDS="30")
    with running_server(env, workers=4, extra_args=("--threads", "8")) as server:
        yield {
            "url": server.url,
            "database_url": database_url,
            "env": env,
            "producer": producer,
            "admin": admin,
            "workers": workers,
        }


@pytest.fixture
def start_workers(fleet, tmp_path):
    """start_workers(count, concurrency) → ``queuelog-worker`` processes on tests/worker_apps/workflow.py."""
    started: list[subprocess.Popen] = []

    def _start(count: int = 1, concurrency: int = 4) -> None:
        for n in range(count):
            env = {
                **os.environ,
                "QUEUELOG_API_KEY": fleet["workers"][len(started)],
                "QUEUELOG_URL": fleet["url"],
                "PYTHONUNBUFFERED": "1",
            }
            with open(tmp_path / f"worker-{n}.log", "wb") as log:
                started.append(
                    subprocess.Popen(
                        [
                            WORKER_BIN,
                            "tests.worker_apps.workflow:worker",
                            "--concurrency",
                            str(concurrency),
                            "--wait",
                            "5",
                        ],
                        cwd=REPO_ROOT,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )

    yield _start
    for process in started:
        process.terminate()
    for process in started:
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def producer(fleet) -> Client:
    return Client(fleet["url"], fleet["producer"])


def events(database_url: str, ids: list[int]) -> dict[int, list]:
    """The jobs' events in the order written: {job_id: [(event id, event, at), ...]}."""
    found: dict[int, list] = {job_id: [] for job_id in ids}
    rows = read_rows(
        database_url,
        "SELECT id, job_id, event, at FROM job_events WHERE job_id >= :low AND job_id <= :high ORDER BY id",
        low=min(ids),
        high=max(ids),
    )
    for row in rows:
        if row.job_id in found:
            at = datetime.fromisoformat(row.at) if isinstance(row.at, str) else row.at
            found[row.job_id].append((row.id, row.event, at))
    return found


def first(history: list, event: str):
    return next(entry for entry in history if entry[1] == event)


def last(history: list, event: str):
    return [entry for entry in history if entry[1] == event][-1]


def assert_no_child_started_early(database_url: str, parents_of: dict[int, list[int]]) -> int:
    """Every child's claim comes after each of its parents' last completion: by event id, the log's order.

    On SQLite by time too: writers take turns and a claim reads the clock inside its turn. On PostgreSQL
    writers run side by side and each reads the app's clock just before its statement, so a claim that read
    it a few milliseconds before a parent's completion committed can still see the child pending: its stamp
    may then be earlier than the completion's, while its event id is later."""
    histories = events(database_url, sorted(set(parents_of) | {p for ps in parents_of.values() for p in ps}))
    checked = 0
    for child, parents in parents_of.items():
        if not parents:
            continue
        claimed = first(histories[child], "claimed")
        for parent in parents:
            done = last(histories[parent], "completed")
            assert claimed[0] > done[0], (child, parent, histories[child], histories[parent])
            if test_db_kind() == "sqlite":
                assert claimed[2] >= done[2], (child, parent, claimed, done)
            checked += 1
    return checked


# --- a diamond --------------------------------------------------------------------------------------


def test_a_diamond_runs_in_order_and_its_fan_in_sees_both_results(fleet, start_workers):
    jobs = producer(fleet).enqueue_batch(
        [
            {"type": "email", "ref": "a", "payload": {"name": "a", "ms": 20}},
            {"type": "email", "ref": "b", "payload": {"name": "b", "ms": 30}, "depends_on": ["a"]},
            {"type": "email", "ref": "c", "payload": {"name": "c", "ms": 10}, "depends_on": ["a"]},
            {"type": "email", "ref": "d", "payload": {"name": "d"}, "depends_on": ["b", "c"]},
        ]
    )
    a, b, c, d = (job["id"] for job in jobs)
    assert [job["status"] for job in jobs] == ["pending", "waiting", "waiting", "waiting"]
    start_workers(1, concurrency=4)
    done = producer(fleet).wait(d, 60)
    assert done["status"] == "completed", done
    seen = {parent["result"]["name"]: parent for parent in done["result"]["parents"]}
    assert set(seen) == {"b", "c"} and {parent["id"] for parent in seen.values()} == {b, c}
    assert all(parent["status"] == "completed" for parent in seen.values())
    assert assert_no_child_started_early(fleet["database_url"], {b: [a], c: [a], d: [b, c]}) == 4


# --- a 1,000-job fan-out and fan-in in one batch ---------------------------------------------------------


def test_a_1000_job_fan_out_and_fan_in_completes_with_the_callback_last(fleet, start_workers):
    """One batch: a root, 988 leaves after it, 10 joins of up to 99 leaves each (a job names at most 100
    parents), and the callback after the joins: 1,000 jobs. The callback is claimed after every other job
    completed."""
    items = [{"type": "email", "ref": "root", "payload": {"name": "root"}}]
    items += [
        {"type": "email", "ref": f"leaf-{n}", "payload": {"name": f"leaf-{n}"}, "depends_on": ["root"]}
        for n in range(988)
    ]
    items += [
        {
            "type": "email",
            "ref": f"join-{j}",
            "payload": {"name": f"join-{j}"},
            "depends_on": [f"leaf-{n}" for n in range(j * 99, min(988, (j + 1) * 99))],
        }
        for j in range(10)
    ]
    items.append({"type": "email", "payload": {"name": "callback"}, "depends_on": [f"join-{j}" for j in range(10)]})
    jobs = producer(fleet).enqueue_batch(items)
    assert len(jobs) == 1000
    started = time.monotonic()
    start_workers(2, concurrency=8)
    done = producer(fleet).wait(jobs[-1]["id"], 240)
    print(
        f"\n1,000-job fan-out/fan-in: the callback completed {time.monotonic() - started:.1f} s after the "
        "workers started"
    )
    assert done["status"] == "completed", done
    assert sorted(parent["result"]["name"] for parent in done["result"]["parents"]) == [f"join-{j}" for j in range(10)]
    histories = events(fleet["database_url"], [job["id"] for job in jobs])
    callback_claimed = first(histories[jobs[-1]["id"]], "claimed")
    assert all(
        callback_claimed[0] > last(history, "completed")[0]
        for job_id, history in histories.items()
        if job_id != jobs[-1]["id"]
    )


# --- a failing parent, and an admin's retry ------------------------------------------------------------


def test_a_failing_parent_cancels_its_subtree_and_an_admin_retry_revives_it(fleet, start_workers, tmp_path):
    allowed = tmp_path / "allowed"
    jobs = producer(fleet).enqueue_batch(
        [
            {"type": "report", "ref": "parent", "payload": {"allowed_by": str(allowed)}},
            {"type": "email", "ref": "child", "payload": {"name": "child"}, "depends_on": ["parent"]},
            {"type": "email", "ref": "grandchild", "payload": {"name": "grandchild"}, "depends_on": ["child"]},
            {"type": "email", "payload": {"name": "cleanup"}, "depends_on": ["parent"], "run_when": "finished"},
        ]
    )
    parent, child, grandchild, cleanup = (job["id"] for job in jobs)
    start_workers(1, concurrency=2)
    client = producer(fleet)
    assert client.wait(parent, 30)["status"] == "failed"
    assert client.wait(cleanup, 30)["status"] == "completed"
    for job_id in (child, grandchild):
        assert client.get_job(job_id)["status"] == "cancelled"
    allowed.touch()
    admin = requests.post(
        f"{fleet['url']}/jobs/{parent}/retry",
        timeout=HTTP_TIMEOUT,
        headers={"Authorization": f"Bearer {fleet['admin']}"},
    )
    assert admin.status_code == 200, admin.text
    assert client.wait(grandchild, 30)["status"] == "completed"
    histories = events(fleet["database_url"], [parent, child, grandchild, cleanup])
    for job_id in (child, grandchild):
        assert [entry[1] for entry in histories[job_id]] == [
            "enqueued",
            "dependency_failed",
            "dependency_retried",
            "dependencies_met",
            "claimed",
            "completed",
        ]
    assert [entry[1] for entry in histories[cleanup]][-1] == "completed"  # ran once, after the failure


# --- 16 workers racing on a wide graph --------------------------------------------------------------


def test_sixteen_workers_racing_on_a_wide_graph_never_start_a_child_early(fleet):
    rng = random.Random(17)
    layers, width = 6, 40
    items, parents_of = [], {}
    for layer in range(layers):
        for n in range(width):
            item = {"type": "noop", "ref": f"{layer}-{n}", "payload": {"ms": rng.randint(0, 15)}}
            if layer:
                item["depends_on"] = [f"{layer - 1}-{p}" for p in rng.sample(range(width), rng.randint(1, 3))]
                if rng.random() < 0.2:
                    item["run_when"] = "finished"
            items.append(item)
    jobs = producer(fleet).enqueue_batch(items)
    ids = {item["ref"]: job["id"] for item, job in zip(items, jobs, strict=True)}
    for item in items:
        parents_of[ids[item["ref"]]] = [ids[ref] for ref in item.get("depends_on", [])]
    done = CTX.Value("i", 0)
    deadline = time.monotonic() + 120
    workers = Processes(
        work_until_done,
        [(fleet["url"], secret, "noop", done, len(items), deadline, n) for n, secret in enumerate(fleet["workers"])],
    )
    results = workers.results(timeout=150)
    assert not [u for r in results for u in r["unexpected"]]
    assert sum(len(r["completed"]) for r in results) == len(items)
    checked = assert_no_child_started_early(fleet["database_url"], parents_of)
    print(f"\n{len(items)} jobs, {checked} edges: no child claimed before its parents completed")


# --- progress ----------------------------------------------------------------------------------------------


def test_a_handlers_progress_shows_on_the_job_while_it_runs(fleet, start_workers, tmp_path):
    finish = tmp_path / "finish"
    job = producer(fleet).enqueue("resize-image", {"finish_when": str(finish)})
    start_workers(1, concurrency=1)
    deadline = time.monotonic() + 20
    while producer(fleet).get_job(job["id"])["progress"] != {"percent": 50, "stage": "resizing"}:
        assert time.monotonic() < deadline, producer(fleet).get_job(job["id"])
        time.sleep(0.05)
    finish.touch()
    done = producer(fleet).wait(job["id"], 20)
    assert done["status"] == "completed" and done["result"] == {"resized": True}
