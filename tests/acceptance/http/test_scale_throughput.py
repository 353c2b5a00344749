"""Proof: 16 worker processes drain 5,000 jobs through a 4-worker gunicorn server, each exactly once,
in priority order as far as concurrency allows.

Runs on the database QUEUELOG_TEST_DB selects (CI runs it on both). The drain runs once per module;
each test below checks one promise against what it left behind.
"""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest

from tests.support.database import test_db_kind
from tests.support.scale import (
    SERVER_SESSIONS,
    ConnectionSampler,
    Processes,
    claim_and_complete_until_empty,
    create_keys,
    enqueue_batches,
    event_histories,
    fresh_database_url,
    jobs_by_id,
    read_rows,
    server_env,
)
from tests.support.server import running_server

JOBS = 5000
WORKERS = 16
# A claim skips rows that concurrent claims hold locked, and event ids are handed out before
# commit: with 16 workers in flight, a lower job may overtake a higher one by at most 16 places.
IN_FLIGHT_WINDOW = WORKERS
PRIORITIES = ["low", "medium", "high", "critical"]


@pytest.fixture(scope="module")
def drained(request, tmp_path_factory):
    """Enqueue 5,000 mixed-priority jobs, let 16 worker processes drain them; return what happened."""
    database_url = fresh_database_url(request, tmp_path_factory.mktemp("throughput"))
    producer, *workers = create_keys(
        database_url,
        ("bulk-producer", "producer", "critical"),
        *[(f"worker-{n:02d}", "worker", None) for n in range(WORKERS)],
    )
    rng = random.Random(4)
    bodies = [{"type": "noop", "payload": {"n": n}, "priority": rng.choice(PRIORITIES)} for n in range(JOBS)]
    # The SQLite file syncs to disk at checkpoints rather than every commit: still safe when a process
    # dies (test_scale_crashes keeps the default FULL), and it keeps this run inside its time budget.
    env = server_env(database_url, QUEUELOG_SQLITE_SYNCHRONOUS="NORMAL", **SERVER_SESSIONS)
    with running_server(env, workers=4) as server:
        started = time.monotonic()
        ids = enqueue_batches(server.url, producer, bodies)
        enqueued = time.monotonic()
        deadline = enqueued + 240
        fleet = Processes(claim_and_complete_until_empty, [(server.url, secret, deadline) for secret in workers])
        connections = ConnectionSampler(database_url)
        try:
            results = fleet.results(timeout=300, while_waiting=connections.sample)
        finally:
            fleet.kill_all()
            connections.close()
        finished = time.monotonic()
    print(
        f"\n[throughput] {JOBS} jobs enqueued in {enqueued - started:.1f} s; "
        f"claimed and completed by {WORKERS} processes in {finished - enqueued:.1f} s; "
        f"most database connections seen at once: {connections.most}"
    )
    claim_order = [
        row.job_id
        for row in read_rows(database_url, "SELECT job_id FROM job_events WHERE event = 'claimed' ORDER BY id")
    ]
    return {
        "ids": ids,
        "results": results,
        "jobs": jobs_by_id(database_url),
        "events": event_histories(database_url),
        "claim_order": claim_order,
        "most_connections": connections.most,
    }


def test_every_job_is_completed_exactly_once_and_none_is_lost(drained):
    acknowledged = [job_id for result in drained["results"] for job_id in result["completed"]]
    assert [r["unexpected"] for r in drained["results"] if r["unexpected"]] == []
    assert len(acknowledged) == JOBS
    assert Counter(acknowledged).most_common(1)[0][1] == 1, "a job was completed twice"
    assert sorted(acknowledged) == sorted(drained["ids"])
    assert Counter(job.status for job in drained["jobs"].values()) == {"completed": JOBS}


def test_event_log_shows_one_claim_per_attempt_and_one_completion_per_job(drained):
    wrong = {
        job_id: history
        for job_id, history in drained["events"].items()
        if [event for event, _, _ in history] != ["enqueued", "claimed", "completed"]
    }
    assert wrong == {}
    assert len(drained["events"]) == JOBS
    # The claim and the completion name the same worker key: the one that held the job.
    assert all(history[1][2] == history[2][2] for history in drained["events"].values())


def test_every_worker_process_got_a_share(drained):
    assert all(len(result["completed"]) > 0 for result in drained["results"])


def test_priority_order_is_respected_within_the_in_flight_window(drained):
    priority = {job_id: job.priority for job_id, job in drained["jobs"].items()}
    claim_order = drained["claim_order"]  # as the server recorded them
    overtakes = {}
    for higher in {10, 20, 30}:
        last_higher = max(i for i, job_id in enumerate(claim_order) if priority[job_id] == higher)
        overtakes[higher] = sum(1 for job_id in claim_order[:last_higher] if priority[job_id] < higher)
    assert all(count <= IN_FLIGHT_WINDOW for count in overtakes.values()), overtakes


@pytest.mark.skipif(
    test_db_kind() != "postgresql",
    reason="counts sessions in PostgreSQL's pg_stat_activity; SQLite has no server to ask",
)
def test_each_sync_server_process_holds_at_most_one_database_connection(drained):
    # A request holds one connection at a time: 4 gunicorn workers, at most 4 sessions.
    assert drained["most_connections"] is not None
    assert 1 <= drained["most_connections"] <= 4
