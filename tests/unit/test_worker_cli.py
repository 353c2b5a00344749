"""The ``queuelog-worker`` command line and the worker library's surface (no server needed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from queuelog.worker import ApiError, Client, PermanentError, ServerUnavailable, Worker
from queuelog.worker.cli import main
from tests.support.paths import REPO_ROOT
from tests.support.pg_cluster import free_port

TARGET = "tests.worker_apps.jobs:worker"


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("QUEUELOG_API_KEY", "ql_" + "k" * 43)
    monkeypatch.setenv("QUEUELOG_URL", f"http://127.0.0.1:{free_port()}")
    return monkeypatch


def refused(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        [TARGET, "--key", "ql_secret"],
        [TARGET, "--api-key=ql_secret"],
        [TARGET, "ql_secret"],
        ["--token", "abc", TARGET],
    ],
)
def test_cli_refuses_an_api_key_on_the_command_line(env, capsys, argv):
    message = refused(capsys, argv)
    assert "QUEUELOG_API_KEY" in message and "never on the command line" in message
    assert "ql_secret" not in message


def test_cli_needs_the_key_in_the_environment(env, capsys):
    env.delenv("QUEUELOG_API_KEY")
    assert "set QUEUELOG_API_KEY" in refused(capsys, [TARGET])


def test_cli_needs_a_server_url(env, capsys):
    env.delenv("QUEUELOG_URL")
    assert "--url or QUEUELOG_URL" in refused(capsys, [TARGET])


def test_cli_names_a_target_that_is_not_a_worker(env, capsys):
    assert "is not a queuelog.worker.Worker" in refused(capsys, ["tests.worker_apps.jobs:ok"])
    assert "cannot import 'no.such.module'" in refused(capsys, ["no.such.module:worker"])


@pytest.mark.parametrize(
    "option", [["--concurrency", "0"], ["--wait", "31"], ["--wait", "-1"], ["--concurrency", "two"]]
)
def test_cli_checks_its_numbers(env, capsys, option):
    refused(capsys, [TARGET, *option])


def test_handler_names_are_job_type_names():
    worker = Worker()
    with pytest.raises(ValueError):
        worker.handler("not a type")
    worker.handler("send-invoice")(lambda payload: None)
    with pytest.raises(ValueError, match="already registered"):
        worker.handler("send-invoice")


def test_a_worker_without_handlers_does_not_start():
    with pytest.raises(ValueError, match="no handlers"):
        Worker().run(url="http://127.0.0.1:1", api_key="ql_x")


def test_permanent_error_is_importable_from_the_package():
    assert PermanentError.__module__ == "queuelog.worker"
    assert issubclass(PermanentError, Exception)


def test_client_reports_an_unreachable_server_as_unavailable():
    client = Client(f"http://127.0.0.1:{free_port()}", "ql_x", timeout=2)
    with pytest.raises(ServerUnavailable):
        client.enqueue("ok")


def test_client_needs_a_url_and_a_key(monkeypatch):
    monkeypatch.delenv("QUEUELOG_URL", raising=False)
    monkeypatch.delenv("QUEUELOG_API_KEY", raising=False)
    with pytest.raises(ValueError, match="QUEUELOG_URL"):
        Client(api_key="ql_x")
    with pytest.raises(ValueError, match="QUEUELOG_API_KEY"):
        Client("http://127.0.0.1:8000")
    assert issubclass(ApiError, Exception)


def test_the_worker_command_loads_none_of_the_servers_packages():
    # A worker host runs jobs over HTTP: it should not pay for importing (or need) the server's web and SQL stack.
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, queuelog.worker.cli; print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'flask', 'werkzeug', 'jinja2', 'sqlalchemy', 'alembic', 'wtforms'}))",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT,
    )
    assert loaded.stdout.strip() == "[]"
