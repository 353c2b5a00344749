"""Fixtures for the worker end-to-end tests: a real gunicorn server and real ``queuelog-worker`` processes.

A pytest plugin (``pytest_plugins`` in tests/conftest.py). A test module that uses it is marked
``pytestmark = pytest.mark.shared_server``: its tests then share one gunicorn (``server``) and its
database, which tests/conftest.py's ``database_url`` and ``config_overrides`` hand to the test's ``app``
(emptied before each test, with the server's settings), so keys and rows the test makes are the server's.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from queuelog.worker import Client
from tests.support.database import _wipe_postgres, test_db_kind
from tests.support.server import REPO_ROOT, running_server

JOB_TYPES = ["ok", "boom", "permanent", "sleep", "other"]
LEASE_SECONDS = 3
WORKER_BIN = str(Path(sys.executable).parent / "queuelog-worker")
#: gunicorn access-log lines in a form only gunicorn writes: "ACCESS POST /jobs/claim 204".
ACCESS_FORMAT = "ACCESS %(m)s %(U)s %(s)s"


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "shared_server: the module's tests share one gunicorn and its database (tests/worker_apps/harness.py)",
    )


@pytest.fixture
def shared_server_settings():
    """The test app (for keys, rows and reaping) sees the same settings as the server."""
    return {"JOB_TYPES": JOB_TYPES, "LEASE_SECONDS": LEASE_SECONDS}


def server_env(database_url: str) -> dict:
    return {
        "QUEUELOG_DATABASE_URL": database_url,
        "QUEUELOG_JOB_TYPES": ",".join(JOB_TYPES),
        "QUEUELOG_SECRET_KEY": "test-secret-key",
        "QUEUELOG_RETRY_BACKOFF_BASE": "0",
        "QUEUELOG_LEASE_SECONDS": str(LEASE_SECONDS),
    }


#: Long-polls need a threaded worker class; a short graceful timeout keeps restarts quick.
SERVER_ARGS = (
    "--threads",
    "8",
    "--graceful-timeout",
    "3",
    "--access-logfile",
    "-",
    "--access-logformat",
    ACCESS_FORMAT,
)


@pytest.fixture(scope="module")
def shared_database_url(request, tmp_path_factory):
    """One database for a module's tests, so they can share one server (starting one costs seconds)."""
    if test_db_kind() == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('worker-e2e') / 'queuelog.db'}"
    return request.getfixturevalue("postgres_server_url")


@pytest.fixture
def emptied_shared_database_url(shared_database_url):
    """The module's database, emptied before each test (conftest's ``database_url`` of a marked module)."""
    _empty(shared_database_url)
    return shared_database_url


@pytest.fixture(scope="module")
def shared_server(shared_database_url):
    """The module's gunicorn server: one process × 8 threads."""
    with running_server(server_env(shared_database_url), workers=1, extra_args=SERVER_ARGS) as srv:
        yield srv


@pytest.fixture
def server_workers():
    """gunicorn processes for ``server``; a test asks for more with @pytest.mark.parametrize("server_workers", [2])."""
    return 1


@pytest.fixture
def server(request, app, database_url, server_workers):
    """A real gunicorn server (``server_workers`` processes × 8 threads) on the test's database."""
    if server_workers == 1:
        yield request.getfixturevalue("shared_server")
        return
    with running_server(server_env(database_url), workers=server_workers, extra_args=SERVER_ARGS) as srv:
        yield srv


def _empty(url: str) -> None:
    """Delete every row (the schema stays: a server may be running on it)."""
    if test_db_kind() == "postgresql":
        _wipe_postgres(url)  # the suite's own wipe: TRUNCATE … CASCADE
        return
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            for table in inspect(conn).get_table_names():
                if table != "alembic_version":
                    conn.execute(text(f'DELETE FROM "{table}"'))
    finally:
        engine.dispose()


@pytest.fixture
def producer_client(server, make_key):
    """The package's own client, as a producer would use it."""
    return Client(server.url, make_key("producer", "e2e-producer", max_priority="critical"))


class WorkerProcess:
    """A ``queuelog-worker`` subprocess with its output in a file."""

    def __init__(self, process: subprocess.Popen, log_path: Path):
        self.process, self.log_path = process, log_path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, signum: int = signal.SIGTERM) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def start_worker(server, make_key, tmp_path):
    """start_worker(*args, concurrency=1, key=None) → a running WorkerProcess (stopped after the test)."""
    started: list[WorkerProcess] = []

    def _start(*args: str, concurrency: int = 1, key: str | None = None) -> WorkerProcess:
        key = key or make_key("worker", f"e2e-worker-{len(started) + 1}")
        env = {**os.environ, "QUEUELOG_API_KEY": key, "QUEUELOG_URL": server.url, "PYTHONUNBUFFERED": "1"}
        log_path = tmp_path / f"worker-{len(started) + 1}.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [WORKER_BIN, "tests.worker_apps.jobs:worker", "--concurrency", str(concurrency), *args],
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        worker = WorkerProcess(process, log_path)
        started.append(worker)
        wait_until(lambda: "worker started" in worker.log() or process.poll() is not None, 15)
        return worker

    yield _start
    for worker in started:
        worker.kill()


def wait_until(predicate, timeout: float, interval: float = 0.05):
    """Poll ``predicate`` until it returns something truthy (returned) or fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout} s: {predicate}")
        time.sleep(interval)


def logged(worker: WorkerProcess, pattern: str, timeout: float = 10) -> re.Match:
    """Wait until the worker's log matches ``pattern``. A job's outcome line is written after the server has
    answered the complete or fail, so a test that saw the job's new status may still be ahead of that line."""
    return wait_until(lambda: re.search(pattern, worker.log()), timeout)


def claim_requests(server_log: str) -> int:
    """How many POST /jobs/claim the server answered, from its access log."""
    return len(re.findall(r"^ACCESS POST /jobs/claim \d{3}$", server_log, flags=re.MULTILINE))
