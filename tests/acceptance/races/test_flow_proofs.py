"""Proofs of flow control with real processes: a 4-process gunicorn server, worker processes over HTTP.

- a concurrency limit of 3 holds against 16 workers with random job lengths (sampled every few ms, and
  from the event log afterwards);
- a rate of 20 per 2 s holds over 10 s (from the event log);
- fair turns: one key with 5,000 pending jobs and 20 keys with 5 each: every key among the first 42 claims;
- pause and resume under load lose and double-claim nothing, and claim nothing while paused;
- a resume wakes a waiting long-poll at once.

Runs on the database QUEUELOG_TEST_DB selects (CI runs it on both). One server for the module; each test
uses a job type of its own, and the settings it sets are cleared after it.
"""

from __future__ import annotations

import queue as stdlib_queue
import random
import threading
import time
from collections import Counter
from datetime import datetime, timedelta
from typing import NamedTuple

import pytest
import requests
from sqlalchemy import create_engine, text

from queuelog.core.clock import utcnow
from tests.support.flow_workers import (
    claim_count,
    claim_until,
    enqueue_steadily,
    long_poll_workers,
    one_long_poll,
    work_until_done,
)
from tests.support.scale import (
    CTX,
    HTTP_TIMEOUT,
    Processes,
    create_keys,
    enqueue_batches,
    event_histories,
    fresh_database_url,
    jobs_by_id,
    read_rows,
    server_env,
)
from tests.support.server import running_server

# 16 worker processes against a 4-process server, and a sampler that must read the running count every few
# ms: beside the other pass on two xdist workers the sampler managed 45 reads in a whole drain (once, on
# PostgreSQL). scripts/test runs it alone (pyproject markers).
pytestmark = pytest.mark.serial

WORKERS = 16
#: The events that end a job's run: after one of them the job no longer counts as running.
STOPS_RUNNING = {"completed", "failed", "requeued", "released", "reaped"}


@pytest.fixture(scope="module")
def fleet(request, tmp_path_factory):
    """The server, its database URL, and keys: a producer, an admin and 16 workers."""
    database_url = fresh_database_url(request, tmp_path_factory.mktemp("flow"))
    producer, admin, *workers = create_keys(
        database_url,
        ("flow-producer", "producer", "critical"),
        ("flow-admin", "admin", None),
        *[(f"flow-worker-{n:02d}", "worker", None) for n in range(WORKERS)],
    )
    env = server_env(database_url, QUEUELOG_SQLITE_SYNCHRONOUS="NORMAL")
    # Threads, so that claims may wait (long-polls) while others are served.
    with running_server(env, workers=4, extra_args=("--threads", "8")) as server:
        yield {
            "url": server.url,
            "database_url": database_url,
            "producer": producer,
            "admin": admin,
            "workers": workers,
        }


def set_type(fleet, job_type: str, **fields) -> dict:
    response = requests.patch(
        f"{fleet['url']}/types/{job_type}",
        json=fields,
        timeout=HTTP_TIMEOUT,
        headers={"Authorization": f"Bearer {fleet['admin']}"},
    )
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture
def clear_settings(fleet):
    """Clears the settings a test set on its type, so the next test starts from none."""
    cleared = []
    yield cleared.append
    for job_type in cleared:
        set_type(fleet, job_type, paused=False, concurrency_limit=None, rate_limit=None, key_concurrency_limit=None)


class Claimed(NamedTuple):
    """A claimed event: its job, and when (naive UTC, as stored)."""

    job_id: int
    at: datetime


def claimed_events(database_url: str, job_type: str) -> list[Claimed]:
    """The claimed events of a type's jobs, in the order they were written (event id)."""
    rows = read_rows(
        database_url,
        "SELECT e.job_id, e.at FROM job_events e JOIN jobs j ON j.id = e.job_id"
        " WHERE j.type = :type AND e.event = 'claimed' ORDER BY e.id",
        type=job_type,
    )
    # SQLite hands back the stored text, PostgreSQL a datetime.
    return [Claimed(row.job_id, datetime.fromisoformat(row.at) if isinstance(row.at, str) else row.at) for row in rows]


def naive_utcnow() -> datetime:
    """Now, in the form the event log stores times."""
    return utcnow().replace(tzinfo=None)


# --- a concurrency limit of 3 against 16 workers ---------------------------------------------------------


class RunningSampler(threading.Thread):
    """Counts the running jobs of a type every few milliseconds, with its own connection; keeps the most."""

    def __init__(self, database_url: str, job_type: str):
        super().__init__(daemon=True)
        self.engine = create_engine(database_url)
        self.job_type = job_type
        self.most, self.samples = 0, 0
        self.stop = threading.Event()

    def run(self):
        query = text("SELECT count(*) FROM jobs WHERE type = :type AND status = 'running'")
        with self.engine.connect() as conn:
            while not self.stop.is_set():
                self.most = max(self.most, conn.execute(query, {"type": self.job_type}).scalar_one())
                conn.rollback()  # a fresh snapshot for the next sample
                self.samples += 1
                time.sleep(0.003)
        self.engine.dispose()


def most_running_by_the_event_log(database_url: str, job_type: str) -> int:
    """The most jobs of the type that were ever running at once, replaying its events in the order written.

    Event ids, not times: each event's time was read before its transaction committed, while a claim of a
    limited type counts the running jobs only after every claim before it committed, so two events' times
    can disagree with the order the claim saw them in. An event id is drawn inside the statement that
    makes the change; a job that stopped running before a claim counted has the lower id, and a claim
    counted by a later one too. So replaying by id counts at most what each claim counted.
    """
    rows = read_rows(
        database_url,
        "SELECT e.event FROM job_events e JOIN jobs j ON j.id = e.job_id WHERE j.type = :type ORDER BY e.id",
        type=job_type,
    )
    running = most = 0
    for row in rows:
        if row.event == "claimed":
            running += 1
            most = max(most, running)
        elif row.event in STOPS_RUNNING:
            running -= 1
    return most


def test_sixteen_workers_never_run_more_than_three_jobs_of_a_type_limited_to_three(fleet, clear_settings):
    clear_settings("report")
    set_type(fleet, "report", concurrency_limit=3)
    rng = random.Random(15)
    total = 240
    ids = enqueue_batches(
        fleet["url"],
        fleet["producer"],
        [{"type": "report", "payload": {"ms": rng.randint(0, 40)}} for _ in range(total)],
    )
    sampler = RunningSampler(fleet["database_url"], "report")
    done = CTX.Value("i", 0)
    deadline = time.monotonic() + 60
    sampler.start()
    workers = Processes(
        work_until_done,
        [(fleet["url"], secret, "report", done, total, deadline, n) for n, secret in enumerate(fleet["workers"])],
    )
    try:
        results = workers.results(timeout=90)
    finally:
        workers.kill_all()
        sampler.stop.set()
        sampler.join(10)
    assert [result["unexpected"] for result in results if result["unexpected"]] == []
    completed = [job_id for result in results for job_id in result["completed"]]
    assert sorted(completed) == sorted(ids), "every job completed exactly once"
    print(f"\n[flow] {sampler.samples} samples of the running count; most seen {sampler.most}")
    assert sampler.samples > 100
    assert sampler.most <= 3
    assert most_running_by_the_event_log(fleet["database_url"], "report") == 3


# --- a rate of 20 per 2 s ------------------------------------------------------------------------------


def test_no_two_second_window_holds_more_than_twenty_claims(fleet, clear_settings):
    clear_settings("noop")
    set_type(fleet, "noop", rate_limit={"jobs": 20, "per_seconds": 2})
    enqueue_batches(fleet["url"], fleet["producer"], [{"type": "noop"} for _ in range(300)])
    stop_at = time.monotonic() + 10
    workers = Processes(claim_until, [(fleet["url"], secret, "noop", stop_at) for secret in fleet["workers"][:8]])
    try:
        results = workers.results(timeout=60)
    finally:
        workers.kill_all()
    assert [result["unexpected"] for result in results if result["unexpected"]] == []
    times = [row.at for row in claimed_events(fleet["database_url"], "noop")]
    window = timedelta(seconds=2)
    busiest = max(sum(1 for other in times if start <= other < start + window) for start in times)
    print(f"\n[flow] {len(times)} claims in 10 s; the busiest 2 s window held {busiest}")
    assert busiest <= 20
    # The limit is a limit, not a stop: the claims went on at about its rate (20 per 2 s: 100-120 in 10 s).
    assert 80 <= len(times) <= 120


# --- fair turns ------------------------------------------------------------------------------------------


def test_every_one_of_21_keys_is_among_the_first_42_claims(fleet):
    big = [{"type": "email", "concurrency_key": "big"} for _ in range(5000)]
    small = [{"type": "email", "concurrency_key": f"tenant-{n:02d}"} for n in range(20) for _ in range(5)]
    enqueue_batches(fleet["url"], fleet["producer"], big + small)
    claimed = CTX.Value("i", 0)
    workers = Processes(
        claim_count,
        [(fleet["url"], secret, "email", claimed, 42, time.monotonic() + 60) for secret in fleet["workers"][:4]],
    )
    try:
        workers.results(timeout=90)
    finally:
        workers.kill_all()
    first = [row.job_id for row in claimed_events(fleet["database_url"], "email")][:42]
    jobs = jobs_by_id(fleet["database_url"])
    keys = Counter(jobs[job_id].concurrency_key for job_id in first)
    print(f"\n[flow] keys among the first 42 claims: {dict(keys)}")
    assert len(first) == 42
    assert set(keys) == {"big"} | {f"tenant-{n:02d}" for n in range(20)}


# --- pause and resume under load ---------------------------------------------------------------------------


def test_pausing_and_resuming_under_load_loses_nothing_claims_nothing_twice_and_nothing_while_paused(
    fleet, clear_settings
):
    clear_settings("resize-image")
    stop = CTX.Event()
    deadline = time.monotonic() + 60
    producer = Processes(enqueue_steadily, [(fleet["url"], fleet["producer"], "resize-image", 40, 10, 0.15)])
    workers = Processes(
        long_poll_workers, [(fleet["url"], secret, "resize-image", stop, deadline) for secret in fleet["workers"][:8]]
    )
    paused_spans = []
    try:
        for _ in range(3):
            time.sleep(0.8)
            set_type(fleet, "resize-image", paused=True)
            paused_from = naive_utcnow()
            time.sleep(1.0)
            paused_until = naive_utcnow()
            set_type(fleet, "resize-image", paused=False)
            paused_spans.append((paused_from, paused_until))
        [made] = producer.results(timeout=60)
        all_done = _wait_for(lambda: _statuses(fleet["database_url"], made["ids"]) == {"completed"}, timeout=30)
        stop.set()
        results = workers.results(timeout=30)
    finally:
        stop.set()
        producer.kill_all()
        workers.kill_all()
    assert all_done, _statuses(fleet["database_url"], made["ids"])
    assert [result["unexpected"] for result in results if result["unexpected"]] == []
    completed = [job_id for result in results for job_id in result["completed"]]
    assert sorted(completed) == sorted(made["ids"]), "every job completed, each exactly once"
    histories = event_histories(fleet["database_url"])
    assert {tuple(event for event, _, _ in histories[job_id]) for job_id in made["ids"]} == {
        ("enqueued", "claimed", "completed")
    }
    claimed_while_paused = [
        row
        for row in claimed_events(fleet["database_url"], "resize-image")
        if any(start < row.at < end for start, end in paused_spans)
    ]
    assert claimed_while_paused == []


def test_a_resume_wakes_a_waiting_long_poll_at_once(fleet, clear_settings):
    clear_settings("report")
    set_type(fleet, "report", paused=True)
    [job_id] = enqueue_batches(fleet["url"], fleet["producer"], [{"type": "report", "payload": {"ms": 0}}])
    report = CTX.Queue()
    waiter = CTX.Process(
        target=one_long_poll, args=(fleet["url"], fleet["workers"][0], "report", 20, report), daemon=True
    )
    waiter.start()
    try:
        time.sleep(1.5)
        with pytest.raises(stdlib_queue.Empty):
            report.get_nowait()  # still waiting: nothing is claimable while paused
        resumed_at = time.monotonic()
        set_type(fleet, "report", paused=False)
        status, claimed_id, answered_at = report.get(timeout=25)
    finally:
        waiter.kill()
        waiter.join(10)
    assert (status, claimed_id) == (200, job_id)
    print(f"\n[flow] the waiting claim answered {answered_at - resumed_at:.2f} s after the resume was sent")
    assert answered_at - resumed_at < 3


def _statuses(database_url: str, ids: list[int]) -> set[str]:
    jobs = jobs_by_id(database_url)
    return {jobs[job_id].status for job_id in ids}


def _wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()
