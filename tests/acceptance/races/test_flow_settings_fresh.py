"""A change of a type's settings binds every claim of every server process once its answer is out.

A real gunicorn with two worker processes, as the production command runs it. Each pair is a
``PATCH /types/email`` answered, then a claim on a new connection, which either process may serve: the claim
must never hand out a job its settings hold back (paused, or past a concurrency, rate or per-key limit), and
never answer 204 while a job it may take is due. Every process has claimed shortly before, so each holds a
copy of the settings that the change makes out of date.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from tests.support.database import JOB_TYPES
from tests.support.scale import flask_command
from tests.support.server import REPO_ROOT, running_server

#: One round of changes, each followed by claims of every kind; the limits are those the held email job meets
#: (it runs under concurrency key "k", like every pending email job), so "1" fills a limit and "2" leaves room.
CHANGES = [
    {"paused": True},
    {"paused": False},
    {"concurrency_limit": 1},
    {"concurrency_limit": None},
    {"concurrency_limit": 2},
    {"concurrency_limit": None},
    {"key_concurrency_limit": 1},
    {"key_concurrency_limit": None},
    {"key_concurrency_limit": 2},
    {"key_concurrency_limit": None},
    {"rate_limit": "room"},
    {"rate_limit": None},
    {"rate_limit": "full"},
    {"rate_limit": None},
]
#: What each claim asks for: email alone, email or report, and any type (the worker key may take all).
CLAIMS = [["email"], ["email", "report"], None]
ROUNDS = 5
STOCK = len(CHANGES) * len(CLAIMS) * ROUNDS + 10  # pending jobs of each type: never runs out
RATE_WINDOW_SECONDS = 86_400


def call(url: str, method: str = "GET", secret: str | None = None, body: dict | None = None):
    """One request on a new connection (gunicorn hands it to either process): (status, JSON body or None)."""
    request = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body is not None else None)
    request.add_header("Content-Type", "application/json")
    if secret:
        request.add_header("Authorization", f"Bearer {secret}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            data = response.read()
            return response.status, json.loads(data) if data else None
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@dataclass
class EmailSettings:
    """What the test has set on email, and the email claims a rate limit counted (the server keeps them)."""

    paused: bool = False
    concurrency_limit: int | None = None
    key_concurrency_limit: int | None = None
    rate_jobs: int | None = None
    rate_counted: int = 0

    def allows_another(self) -> bool:
        """May a claim take an email job now? One email job runs (key "k"), held by the test."""
        return (
            not self.paused
            and (self.concurrency_limit is None or self.concurrency_limit > 1)
            and (self.key_concurrency_limit is None or self.key_concurrency_limit > 1)
            and (self.rate_jobs is None or self.rate_counted < self.rate_jobs)
        )

    def body(self, change: dict) -> dict:
        """The PATCH body for ``change``, applied here too; a rate limit with room, or full, as asked."""
        body = dict(change)
        if "rate_limit" in change:
            if change["rate_limit"] is None:
                self.rate_jobs = None
            else:
                full = change["rate_limit"] == "full" and self.rate_counted >= 1
                self.rate_jobs = self.rate_counted if full else self.rate_counted + 2
                body["rate_limit"] = {"jobs": self.rate_jobs, "per_seconds": RATE_WINDOW_SECONDS}
        for field in ("paused", "concurrency_limit", "key_concurrency_limit"):
            if field in change:
                setattr(self, field, change[field])
        return body


@pytest.fixture
def server_env(app, database_url):
    """Environment for a gunicorn serving the test's database (its schema already made by ``app``)."""
    return {
        "QUEUELOG_DATABASE_URL": database_url,
        "QUEUELOG_JOB_TYPES": json.dumps(JOB_TYPES),
        "QUEUELOG_SECRET_KEY": "test-secret-key",
    }


@pytest.fixture
def server(server_env):
    with running_server(
        server_env, workers=2, extra_args=("--threads", "8", "-c", str(REPO_ROOT / "gunicorn.conf.py"))
    ) as running:
        yield running


def enqueue_stock(url: str, producer: str, job_type: str, count: int, **fields) -> None:
    for start in range(0, count, 100):
        status, body = call(
            url + "/jobs/batch", "POST", producer, {"jobs": [{"type": job_type, **fields}] * min(100, count - start)}
        )
        assert status == 201, body


def hold_one_email_job(url: str, worker: str) -> dict:
    """Claim one email job and keep it running for the whole test (every limit counts it)."""
    status, job = call(url + "/jobs/claim", "POST", worker, {"types": ["email"], "lease_seconds": 86_400})
    assert status == 200, job
    return job


def processes_that_answered_claims(server) -> set[str]:
    """The server processes whose request log names an answered claim."""
    return {
        line.rsplit("pid=", 1)[1]
        for line in server.log().splitlines()
        if "path=/jobs/claim status=" in line and "pid=" in line
    }


def claim_and_complete(url: str, worker: str, types: list[str]) -> str | None:
    """One claim on a new connection: the type of the job it got (completed at once), or None for 204."""
    status, job = call(url + "/jobs/claim", "POST", worker, {"types": types})
    assert status in (200, 204), job
    if status == 204:
        return None
    done, answer = call(url + f"/jobs/{job['id']}/complete", "POST", worker, {"claim_token": job["claim_token"]})
    assert done == 200, answer
    return job["type"]


def test_every_claim_obeys_a_change_once_it_has_answered_in_any_process(server, make_key):
    admin, producer, worker = make_key("admin"), make_key("producer"), make_key("worker")
    enqueue_stock(server.url, producer, "email", STOCK, concurrency_key="k")
    enqueue_stock(server.url, producer, "report", STOCK)
    hold_one_email_job(server.url, worker)
    settings = EmailSettings()
    violations, pairs = [], 0
    for _ in range(ROUNDS):
        for change in CHANGES:
            for types in CLAIMS:
                status, answer = call(server.url + "/types/email", "PATCH", admin, settings.body(change))
                assert status == 200, answer
                body = {} if types is None else {"types": types}
                status, job = call(server.url + "/jobs/claim", "POST", worker, body)
                pairs += 1
                email_allowed = settings.allows_another()
                may_take = {"report"} if types is None or "report" in types else set()
                if email_allowed and (types is None or "email" in types):
                    may_take.add("email")
                if status == 204 and may_take:
                    violations.append((change, types, "204 while a job it may take was due", may_take))
                elif status == 200 and job["type"] not in may_take:
                    violations.append((change, types, f"handed out {job['type']} job {job['id']}", may_take))
                elif status not in (200, 204):
                    violations.append((change, types, f"answered {status}", job))
                if status == 200:
                    if job["type"] == "email" and settings.rate_jobs is not None:
                        settings.rate_counted += 1
                    done, answer = call(
                        server.url + f"/jobs/{job['id']}/complete", "POST", worker, {"claim_token": job["claim_token"]}
                    )
                    assert done == 200, answer
    assert pairs >= 200
    assert len(processes_that_answered_claims(server)) == 2, "one process served every claim: nothing was proved"
    assert violations == []


@pytest.mark.parametrize(
    "hold, lift",
    [({"paused": True}, {"paused": False}), ({"concurrency_limit": 1}, {"concurrency_limit": None})],
    ids=["pause lifted", "full concurrency limit lifted"],
)
def test_claims_waiting_in_every_process_take_the_jobs_a_change_frees(server, make_key, hold, lift):
    admin, producer, worker = make_key("admin"), make_key("producer"), make_key("worker")
    hold_email = "concurrency_limit" in hold
    enqueue_stock(server.url, producer, "email", 8 + hold_email)
    if hold_email:
        hold_one_email_job(server.url, worker)
    status, answer = call(server.url + "/types/email", "PATCH", admin, hold)
    assert status == 200, answer
    with ThreadPoolExecutor(max_workers=6) as pool:
        waiting = [
            pool.submit(call, server.url + "/jobs/claim", "POST", worker, {"types": ["email"], "wait": 20})
            for _ in range(6)
        ]
        # Time for the claims to start waiting (what they wait in gives no sign from outside). One that is
        # slower takes its job at once when it comes: as right, only less of a test.
        time.sleep(1.0)
        status, answer = call(server.url + "/types/email", "PATCH", admin, lift)
        assert status == 200, answer
        answers = [claim.result() for claim in waiting]
    assert [(status, job["type"]) for status, job in answers] == [(200, "email")] * 6


def test_a_pause_and_a_resume_from_flask_types_bind_the_servers_claims_at_once(server, server_env, make_key):
    producer, worker = make_key("producer"), make_key("worker")
    enqueue_stock(server.url, producer, "email", 20)
    enqueue_stock(server.url, producer, "report", 20)
    got, stop = [], threading.Event()

    def keep_claiming():
        """Claims all the while (of a type with no jobs): each process keeps a copy of the settings in use."""
        while not stop.is_set():
            call(server.url + "/jobs/claim", "POST", worker, {"types": ["noop"]})

    claimer = threading.Thread(target=keep_claiming)
    claimer.start()
    try:
        for command, types in (("pause", ["email", "report"]), ("resume", ["email"])):
            done = flask_command(server_env, "types", command, "email")
            assert done.returncode == 0, done.stderr
            got.append((command, [claim_and_complete(server.url, worker, types) for _ in range(6)]))
    finally:
        stop.set()
        claimer.join()
    assert got == [("pause", ["report"] * 6), ("resume", ["email"] * 6)]
