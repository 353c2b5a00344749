"""Helpers for the scale proofs (tests/acceptance/races/test_scale_*.py and others): a real server, real client
processes.

Client functions here run in child processes (multiprocessing, fork): each opens its own
``requests.Session`` and talks HTTP to the gunicorn server, exactly as a worker on another host would.
Every loop is bounded by a deadline, so a misbehaving server fails the test instead of hanging it.
Results travel back as plain dicts; assertions stay in the tests.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import queue
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import requests
from sqlalchemy import create_engine, text

from queuelog import create_app
from queuelog.auth.keys import create_key
from queuelog.extensions import db
from tests.support.database import JOB_TYPES, _wipe_postgres, app_config, test_db_kind
from tests.support.server import REPO_ROOT, running_server

#: fork: the children need nothing from the parent but these functions and their arguments,
#: and fork starts 16 of them in a fraction of the time spawn needs on a small machine.
CTX = multiprocessing.get_context("fork")
#: Environment that names a server's PostgreSQL sessions (libpq's PGAPPNAME) for ``ConnectionSampler``.
SERVER_SESSIONS = {"PGAPPNAME": "queuelog-server-under-test"}
HTTP_TIMEOUT = 30


def server_env(database_url: str, **extra: str) -> dict[str, str]:
    """Environment for ``running_server``: the test database, the test job types, a fixed secret."""
    env = {
        "QUEUELOG_DATABASE_URL": database_url,
        "QUEUELOG_JOB_TYPES": json.dumps(JOB_TYPES),
        "QUEUELOG_SECRET_KEY": "scale-test-secret",
        "QUEUELOG_RETRY_BACKOFF_BASE": "0",
    }
    env.update(extra)
    return env


def fresh_database_url(request, directory: Path) -> str:
    """An empty database for a whole module (the ``database_url`` fixture is per test)."""
    if test_db_kind() == "sqlite":
        return f"sqlite:///{directory / 'queuelog.db'}"
    url = request.getfixturevalue("postgres_server_url")
    _wipe_postgres(url)
    return url


def migrated_database_url(request, directory: Path) -> str:
    """``fresh_database_url`` with its schema made, before any server process starts on it."""
    url = fresh_database_url(request, directory)
    with app_on(url):
        pass
    return url


@contextlib.contextmanager
def four_by_four_server(database_url: str):
    """gunicorn on ``database_url``: 4 processes × 4 threads, as the README's production command runs.

    Its callers connect every client first and hold them at a barrier, which on a busy machine has taken
    longer (2.5 s to fork 20 clients once) than gunicorn's 2 s keep-alive: a request sent just as the server
    closed its idle connection failed with "Remote end closed connection without response". So this server
    keeps idle connections 120 s.
    """
    extra_args = ("--threads", "4", "--keep-alive", "120")
    with running_server(server_env(database_url), workers=4, extra_args=extra_args) as server:
        yield server


@contextlib.contextmanager
def app_on(database_url: str, **overrides):
    """The app factory on ``database_url`` (migrating it), inside an app context."""
    application = create_app(app_config(database_url, **overrides))
    with application.app_context():
        yield application
        db.session.remove()
        db.engine.dispose()


def create_keys(database_url: str, *specs: tuple[str, str, str | None]) -> list[str]:
    """Create keys from (name, role, max_priority) specs through the app factory; returns the secrets."""
    with app_on(database_url):
        return [create_key(name, role, max_priority) for name, role, max_priority in specs]


def session_for(secret: str) -> requests.Session:
    """A keep-alive session carrying one API key."""
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {secret}"
    return session


def enqueue_batches(base_url: str, secret: str, bodies: list[dict], per_request: int = 500) -> list[int]:
    """POST /jobs/batch in chunks (the API takes at most 500); returns the new job ids in order."""
    session = session_for(secret)
    ids: list[int] = []
    for start in range(0, len(bodies), per_request):
        response = session.post(
            f"{base_url}/jobs/batch", json={"jobs": bodies[start : start + per_request]}, timeout=HTTP_TIMEOUT
        )
        assert response.status_code == 201, (response.status_code, response.text[:500])
        ids.extend(job["id"] for job in response.json()["jobs"])
    return ids


# --- worker processes -----------------------------------------------------------------------------


def claim_and_complete_until_empty(base_url: str, secret: str, deadline: float) -> dict:
    """Claim one job at a time and complete it at once, until a claim answers 204 (nothing due).

    Returns {"completed": [ids], "unexpected": [(what, status, body)]}.
    """
    session = session_for(secret)
    completed, unexpected = [], []
    while time.monotonic() < deadline:
        claimed = session.post(f"{base_url}/jobs/claim", json={}, timeout=HTTP_TIMEOUT)
        if claimed.status_code == 204:
            break
        if claimed.status_code != 200:
            unexpected.append(("claim", claimed.status_code, claimed.text[:300]))
            continue
        job = claimed.json()
        done = session.post(
            f"{base_url}/jobs/{job['id']}/complete",
            json={"claim_token": job["claim_token"], "result": {"by": secret[-6:]}},
            timeout=HTTP_TIMEOUT,
        )
        if done.status_code == 200:
            completed.append(job["id"])
        else:
            unexpected.append(("complete", done.status_code, done.text[:300]))
    return {"completed": completed, "unexpected": unexpected}


def work_with_short_leases(base_url: str, secret: str, lease_seconds: int, stop, deadline: float) -> dict:
    """Claim with a short lease; on its first attempt every third job takes about as long as the lease.

    That worker still completes afterwards, racing the reaper: either it wins (200) or the reaper
    took the job back first (409). Runs until ``stop`` is set.
    Returns {"completed": [...], "late_refused": [...], "unexpected": [...]}.
    """
    session = session_for(secret)
    completed, late_refused, unexpected = [], [], []
    while not stop.is_set() and time.monotonic() < deadline:
        claimed = session.post(f"{base_url}/jobs/claim", json={"lease_seconds": lease_seconds}, timeout=HTTP_TIMEOUT)
        if claimed.status_code == 204:
            time.sleep(0.05)
            continue
        if claimed.status_code != 200:
            unexpected.append(("claim", claimed.status_code, claimed.text[:300]))
            continue
        job = claimed.json()
        if job["retry_count"] == 0 and job["payload"]["n"] % 3 == 0:
            # 0.8–1.3 leases: some finish just before the lease ends, some just after.
            time.sleep(lease_seconds * (0.8 + (job["payload"]["n"] % 11) / 20))
        done = session.post(
            f"{base_url}/jobs/{job['id']}/complete", json={"claim_token": job["claim_token"]}, timeout=HTTP_TIMEOUT
        )
        if done.status_code == 200:
            completed.append(job["id"])
        elif done.status_code == 409:
            late_refused.append(job["id"])
        else:
            unexpected.append(("complete", done.status_code, done.text[:300]))
    return {"completed": completed, "late_refused": late_refused, "unexpected": unexpected}


def _report(results, index: int, function, args: tuple) -> None:
    try:
        results.put((index, function(*args)))
    except BaseException as error:  # the parent must hear about it, or it would wait in vain
        results.put((index, {"crashed": repr(error)}))
        raise


class Processes:
    """Child processes each running ``function(*args)``; ``results()`` gathers what they returned.

    Unlike a Pool, arguments may include multiprocessing Events (inherited through fork), and each
    child has a pid the test can send signals to.
    """

    def __init__(self, function, argument_tuples: list[tuple]):
        self._queue = CTX.Queue()
        self.children = [
            CTX.Process(target=_report, args=(self._queue, index, function, args), daemon=True)
            for index, args in enumerate(argument_tuples)
        ]
        for child in self.children:
            child.start()

    def results(self, timeout: float, while_waiting=None) -> list:
        """Each child's return value, in start order; fails if one does not report in time.

        ``while_waiting()`` is called about twice a second until then (e.g. to sample the database).
        """
        deadline = time.monotonic() + timeout
        gathered = {}
        while len(gathered) < len(self.children):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self.children) - len(gathered)} processes did not report in time")
            try:
                index, value = self._queue.get(timeout=0.5)
            except queue.Empty:
                if while_waiting is not None:
                    while_waiting()
                continue
            gathered[index] = value
        for child in self.children:
            child.join(timeout=10)
        crashed = {
            index: value["crashed"]
            for index, value in gathered.items()
            if isinstance(value, dict) and "crashed" in value
        }
        if crashed:
            raise RuntimeError(f"client processes crashed: {crashed}")
        return [gathered[index] for index in range(len(self.children))]

    def kill_all(self) -> None:
        """SIGKILL every child still running (cleanup after a failed test)."""
        for child in self.children:
            if child.is_alive():
                child.kill()
                child.join(timeout=10)


def claim_and_hang(base_url: str, secret: str, how_many: int, lease_seconds: int, report) -> None:
    """A worker that claims ``how_many`` jobs, reports them on ``report`` and then works "forever"."""
    session = session_for(secret)
    response = session.post(
        f"{base_url}/jobs/claim", json={"limit": how_many, "lease_seconds": lease_seconds}, timeout=HTTP_TIMEOUT
    )
    report.put(response.json()["jobs"] if response.status_code == 200 else response.status_code)
    time.sleep(120)  # until the test kills it


def flask_command(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """Run ``flask --app app ARGS`` from the repository root, as an operator or cron would."""
    flask = str(Path(sys.executable).parent / "flask")
    return subprocess.run(
        [flask, "--app", "app", *args],
        cwd=REPO_ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def enqueue_through_crashes(base_url: str, secret: str, client: int, count: int, acknowledged, deadline: float) -> dict:
    """POST /jobs ``count`` times, one job each, retrying a request (same idempotency key) until answered.

    Connection errors and 5xx are expected while the server is down. ``acknowledged`` (a shared
    counter) lets the test time its crash. Returns {"answers": [(status, job_json)], "dropped": n (tries
    that got no answer at all), "refusals": [(status, content_type, retry_after, body_text)] (5xx answers)}.
    """
    session = session_for(secret)
    answers, dropped, refusals = [], 0, []
    for n in range(count):
        body = {
            "type": "email",
            "priority": ["low", "medium"][n % 2],
            "idempotency_key": f"client-{client}-{n}",
            "payload": {"client": client, "n": n, "to": f"user{n}@example.com"},
        }
        while time.monotonic() < deadline:
            try:
                response = session.post(f"{base_url}/jobs", json=body, timeout=10)
            except requests.RequestException:
                dropped += 1
                session = session_for(secret)  # a fresh pool: the old connections died with the server
                time.sleep(0.1)
                continue
            if response.status_code >= 500:
                refusals.append(
                    (
                        response.status_code,
                        response.headers.get("Content-Type"),
                        response.headers.get("Retry-After"),
                        response.text,
                    )
                )
                time.sleep(0.1)
                continue
            answers.append((response.status_code, response.json()))
            with acknowledged.get_lock():
                acknowledged.value += 1
            break
    return {"answers": answers, "dropped": dropped, "refusals": refusals}


def reap_in_a_loop(database_url: str, interval: float, stop, deadline: float) -> dict:
    """The reaper as a separate process: ``queue.reap()`` every ``interval`` seconds until ``stop``.

    Returns {"passes": n, "requeued": [ids], "failed": [...], "quarantined": [...]}.
    """
    from queuelog import queue

    report = {"passes": 0, "requeued": [], "failed": [], "quarantined": []}
    with app_on(database_url):
        while not stop.is_set() and time.monotonic() < deadline:
            reaped = queue.reap()
            report["passes"] += 1
            for bucket in ("requeued", "failed", "quarantined"):
                report[bucket].extend(getattr(reaped, bucket))
            time.sleep(interval)
    return report


# --- reading what the server left behind -----------------------------------------------------------


def read_rows(database_url: str, sql: str, **params) -> list:
    """Rows of one query, read with a fresh engine (the test process's own view of the database)."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            return conn.execute(text(sql), params).all()
    finally:
        engine.dispose()


class ConnectionSampler:
    """Counts the sessions a server's pool holds on a PostgreSQL database; SQLite: None.

    The server is started with ``SERVER_SESSIONS`` (its sessions' application_name) in its environment, so
    only its own sessions count: not an earlier test's engine that the garbage collector has not closed
    yet, nor the suite's connection that empties the database between tests. Its LISTEN connections name
    themselves (``pg_listener.LISTENER_NAME``) and are not the pool's.
    """

    def __init__(self, database_url: str):
        self.most: int | None = None
        self._engine = create_engine(database_url) if database_url.startswith("postgresql") else None

    def sample(self) -> None:
        """Take one sample now."""
        if self._engine is None:
            return
        with self._engine.connect() as conn:
            count = conn.execute(
                text(
                    "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND backend_type = 'client backend' AND application_name = :server"
                ),
                {"server": SERVER_SESSIONS["PGAPPNAME"]},
            ).scalar_one()
        self.most = max(self.most or 0, count)

    def close(self) -> None:
        """Let go of the sampling connection."""
        if self._engine is not None:
            self._engine.dispose()


def event_histories(database_url: str) -> dict[int, list]:
    """Every job's events in the order they were written: {job_id: [(event, attempt, actor), ...]}."""
    histories: dict[int, list] = defaultdict(list)
    for row in read_rows(database_url, "SELECT job_id, event, attempt, actor FROM job_events ORDER BY id"):
        histories[row.job_id].append((row.event, row.attempt, row.actor))
    return dict(histories)


def jobs_by_id(database_url: str) -> dict[int, object]:
    """Every job row, by id."""
    return {row.id: row for row in read_rows(database_url, "SELECT * FROM jobs")}
