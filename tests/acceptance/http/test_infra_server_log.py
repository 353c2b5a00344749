"""A failed test that used a gunicorn shows what that server logged: a 500's traceback is only ever in there.

The inner tests below run in their own pytest session, on a stand-in app that logs one marker line per
request, and their report is read the way a person reads it.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.server import REPO_ROOT

STANDIN_APP = """
import sys
from flask import Flask, request

app = Flask(__name__)


@app.get("/openapi.json")
def ready():
    return {}


@app.get("/boom")
def boom():
    print(f"Traceback: marker from={request.args['source']}", file=sys.stderr, flush=True)
    return {}, 500
"""

INNER_TESTS = """
import urllib.error
import urllib.request

import pytest

from tests.support.dev_server import running_dev_server
from tests.support.server import running_server

HERE = {here!r}


def get(url):
    try:
        return urllib.request.urlopen(url, timeout=30).status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.fixture(scope="module")
def shared_server():
    with running_server(workers=1, app="standin:app", cwd=HERE) as server:
        yield server


def test_fails_while_its_server_runs():
    with running_server(workers=1, app="standin:app", cwd=HERE) as server:
        assert get(server.url + "/boom?source=inside") == 200


def test_fails_after_its_server_stopped():
    with running_server(workers=1, app="standin:app", cwd=HERE) as server:
        status = get(server.url + "/boom?source=after")
    assert status == 200


def test_passes_with_a_server():
    with running_server(workers=1, app="standin:app", cwd=HERE) as server:
        assert get(server.url + "/boom?source=passing") == 500


def test_fails_with_a_flask_run_server():
    env = {{"QUEUELOG_DATABASE_URL": "sqlite:///" + HERE + "/queuelog.db", "QUEUELOG_SECRET_KEY": "inner-test"}}
    with running_dev_server(env) as server:
        assert get(server.url + "/jobs-from-the-dev-server-test") == 200


def test_earlier_user_of_the_shared_server(shared_server):
    assert get(shared_server.url + "/boom?source=earlier") == 500


def test_later_user_of_the_shared_server_fails(shared_server):
    assert get(shared_server.url + "/boom?source=later") == 200
"""


@pytest.fixture(scope="module")
def inner_report(tmp_path_factory) -> str:
    """What pytest printed for the inner tests (four fail, two pass)."""
    here = tmp_path_factory.mktemp("inner")
    (here / "standin.py").write_text(STANDIN_APP)
    (here / "test_inner.py").write_text(INNER_TESTS.format(here=str(here)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    # The plugin as tests/conftest.py loads it; the inner session has no conftest of its own. It fails on
    # purpose (check=False): its report is what is tested.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.support.server",
            "-p",
            "no:cacheprovider",
            "-q",
            "--rootdir",
            str(here),
            str(here / "test_inner.py"),
        ],
        cwd=here,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert "4 failed, 2 passed" in result.stdout, result.stdout + result.stderr
    return result.stdout


def failure_of(report: str, test_name: str) -> str:
    """The part of pytest's failure summary about one test."""
    start = report.index(f"_ {test_name} _")
    end = report.find("\n_____", start + 1)
    return report[start:] if end == -1 else report[start:end]


def test_a_failed_test_shows_the_log_of_the_server_it_is_using(inner_report):
    failure = failure_of(inner_report, "test_fails_while_its_server_runs")
    assert "gunicorn log, http://127.0.0.1:" in failure
    assert "Traceback: marker from=inside" in failure


def test_a_test_that_fails_after_its_server_stopped_still_shows_its_log(inner_report):
    failure = failure_of(inner_report, "test_fails_after_its_server_stopped")
    assert "Traceback: marker from=after" in failure


def test_a_failed_test_shows_the_log_of_its_flask_run_server(inner_report):
    failure = failure_of(inner_report, "test_fails_with_a_flask_run_server")
    assert "flask run log, http://127.0.0.1:" in failure
    assert "path=/jobs-from-the-dev-server-test status=404" in failure


def test_a_shared_server_shows_only_what_it_logged_during_the_failed_test(inner_report):
    failure = failure_of(inner_report, "test_later_user_of_the_shared_server_fails")
    assert "Traceback: marker from=later" in failure
    assert "from=earlier" not in failure
