"""/metrics under a real gunicorn with several workers: counters add up over every worker process."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client.parser import text_string_to_metric_families

import tests.support.server as server_support
from tests.support.database import JOB_TYPES
from tests.support.server import REPO_ROOT, running_server

ROUND = 40
UNAUTHENTICATED = 12


def call(url: str, method: str = "GET", secret: str | None = None, body: dict | None = None) -> int:
    """One request on a fresh connection (so gunicorn may hand it to any worker); returns the status."""
    request = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body else None)
    request.add_header("Content-Type", "application/json")
    if secret:
        request.add_header("Authorization", f"Bearer {secret}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def get_metrics(url: str, secret: str) -> tuple[int, str, dict]:
    """GET /metrics: (status, headers, body), whatever the status."""
    request = urllib.request.Request(url + "/metrics", headers={"Authorization": f"Bearer {secret}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read().decode()


def scrape(url: str, secret: str) -> dict:
    status, _headers, text = get_metrics(url, secret)
    assert status == 200, text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.fixture
def server_env(app, database_url, tmp_path):
    """Environment for a gunicorn serving the test's database (its schema already made by ``app``)."""
    return {
        "QUEUELOG_DATABASE_URL": database_url,
        "QUEUELOG_JOB_TYPES": json.dumps(JOB_TYPES),
        "QUEUELOG_SECRET_KEY": "test-secret-key",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
    }


def pids_that_answered_enqueues(log: str) -> set[str]:
    """The worker pids the server's own request log names for answered POST /jobs."""
    return set(re.findall(r"path=/jobs status=201 .* pid=(\d+)$", log, re.MULTILINE))


def test_counters_summed_over_gunicorn_workers_equal_the_requests_made(server_env, make_key, tmp_path, monkeypatch):
    producer, admin = make_key("producer"), make_key("admin")
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    stale = metrics_dir / "counter_1.db"
    stale.write_bytes(b"left by an earlier server")
    # Wait for readiness on the probe this feature provides.
    monkeypatch.setattr(server_support, "READY_PATH", "/readyz")
    with running_server(server_env, workers=4, extra_args=("-c", str(REPO_ROOT / "gunicorn.conf.py"))) as server:
        assert not stale.exists(), "gunicorn.conf.py must empty the metrics directory before workers start"
        # /readyz answers once the first worker has loaded the app; on a busy machine the others may take
        # seconds more, and until then that one worker serves everything. The sum only means something once
        # several workers have counted, so enqueue in rounds until the log names at least two of them.
        enqueued = 0
        deadline = time.monotonic() + 60
        with ThreadPoolExecutor(max_workers=8) as pool:
            while True:
                created = list(
                    pool.map(
                        lambda i: call(server.url + "/jobs", "POST", producer, {"type": JOB_TYPES[i % 4]}),
                        range(enqueued, enqueued + ROUND),
                    )
                )
                assert created == [201] * ROUND
                enqueued += ROUND
                if len(pids_that_answered_enqueues(server.log())) >= 2:
                    break
                assert time.monotonic() < deadline, "after 60 s a single worker still answered every enqueue"
            refused = list(pool.map(lambda _: call(server.url + "/jobs"), range(UNAUTHENTICATED)))
        assert refused == [401] * UNAUTHENTICATED

        # Whichever worker answers the scrape, it reports every worker's counts.
        for _ in range(6):
            samples = scrape(server.url, admin)
            assert samples[("queuelog_jobs_enqueued_total", frozenset())] == enqueued
            assert (
                samples[
                    ("queuelog_request_duration_seconds_count", frozenset({"route": "/jobs", "method": "POST"}.items()))
                ]
                == enqueued
            )
            assert (
                samples[("queuelog_rejected_requests_total", frozenset({"reason": "unauthenticated"}.items()))]
                == UNAUTHENTICATED
            )
            gauge = sum(
                v
                for (name, labels), v in samples.items()
                if name == "queuelog_jobs" and dict(labels)["status"] == "pending"
            )
            assert gauge == enqueued


# What prometheus-client leaves on disk for an instant while a worker creates its file (it creates the file,
# then sizes it), and for good when the worker is killed in between: an empty file named after the pid.
NEVER_A_PID = 4194304  # one above Linux's largest pid


def test_an_empty_metrics_file_of_a_worker_still_starting_does_not_fail_the_scrape(server_env, make_key, tmp_path):
    producer, admin = make_key("producer"), make_key("admin")
    metrics_dir = tmp_path / "metrics"
    with running_server(server_env, workers=2, extra_args=("-c", str(REPO_ROOT / "gunicorn.conf.py"))) as server:
        assert [call(server.url + "/jobs", "POST", producer, {"type": "email"}) for _ in range(5)] == [201] * 5
        for kind in ("counter", "histogram"):
            (metrics_dir / f"{kind}_{NEVER_A_PID}.db").touch()
        for _ in range(4):
            samples = scrape(server.url, admin)
            assert samples[("queuelog_jobs_enqueued_total", frozenset())] == 5
            assert (
                samples[
                    ("queuelog_request_duration_seconds_count", frozenset({"route": "/jobs", "method": "POST"}.items()))
                ]
                == 5
            )


def test_an_unreadable_metrics_file_answers_503_problem_with_retry_after_not_500(server_env, make_key, tmp_path):
    admin = make_key("admin")
    metrics_dir = tmp_path / "metrics"
    # A header that says 64 bytes are used, then an entry that claims 1,000 bytes: prometheus-client refuses it.
    garbled = metrics_dir / f"counter_{NEVER_A_PID}.db"
    with running_server(server_env, workers=2, extra_args=("-c", str(REPO_ROOT / "gunicorn.conf.py"))) as server:
        garbled.write_bytes(struct.pack("ii", 64, 0) + struct.pack("i", 1000) + b"x" * 52)
        status, headers, body = get_metrics(server.url, admin)
        assert status == 503, body
        assert headers["Content-Type"] == "application/problem+json"
        assert json.loads(body)["status"] == 503
        assert headers["Retry-After"].isdigit()

        garbled.unlink()
        assert ("queuelog_stalled_jobs", frozenset()) in scrape(server.url, admin)


def test_gunicorn_conf_makes_a_fresh_directory_and_removes_those_of_crashed_servers(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    ).stdout.strip()
    abandoned = tmp_path / f"queuelog-metrics-{dead}-abc123"
    in_use = tmp_path / f"queuelog-metrics-{os.getpid()}-def456"
    for directory in (abandoned, in_use):
        directory.mkdir()
        (directory / "counter_1.db").write_bytes(b"")
    env = {key: value for key, value in os.environ.items() if key != "PROMETHEUS_MULTIPROC_DIR"}
    env["TMPDIR"] = str(tmp_path)
    # What the gunicorn master does first: read the config file, then start workers with its environment.
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, runpy; runpy.run_path('gunicorn.conf.py'); print(os.environ['PROMETHEUS_MULTIPROC_DIR'])",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert os.path.dirname(made) == str(tmp_path) and os.listdir(made) == []
    assert not abandoned.exists()
    assert in_use.exists()


def test_gunicorn_conf_empties_a_given_metrics_directory_of_metrics_files_only(tmp_path):
    """PROMETHEUS_MULTIPROC_DIR pointed at instance/: the master must not delete the SQLite database there."""
    instance = tmp_path / "instance"
    instance.mkdir()
    for name in (
        "counter_41.db",
        "histogram_41.db",
        "gauge_livesum_41.db",
        "summary_42.db",
        "queuelog.db",
        "secret_key",
    ):
        (instance / name).write_bytes(b"x" * 16)
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(instance)}
    env.pop("GUNICORN_QUEUELOG_METRICS_MASTER", None)
    subprocess.run(
        [sys.executable, "-c", "import runpy; runpy.run_path('gunicorn.conf.py')"], cwd=REPO_ROOT, env=env, check=True
    )
    assert sorted(os.listdir(instance)) == ["queuelog.db", "secret_key"]
