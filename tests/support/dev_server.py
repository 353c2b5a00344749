"""Run the app under ``flask run`` (Werkzeug's development server), as the README's quick start does.

``running_dev_server(env)`` starts ``flask --app app run --port PORT`` from the repository root,
waits until ``GET /openapi.json`` answers 200, and stops it (SIGTERM, then SIGKILL, by its pid)
on exit. It has the attributes of ``running_server``'s object the tests use: ``url``, ``port``,
``log()``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

from tests.support.pg_cluster import free_port
from tests.support.server import READY_PATH, REPO_ROOT, ServerError, log_shown_on_failure


class DevServer:
    """A running ``flask run``."""

    def __init__(self, process: subprocess.Popen, port: int, log_path: Path):
        self.process, self.port, self.log_path = process, port, log_path
        self.url = f"http://127.0.0.1:{port}"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        problem = "no answer yet"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerError(f"flask run exited with code {self.process.returncode}\n{self.log()}")
            try:
                with urllib.request.urlopen(self.url + READY_PATH, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                problem = str(exc)
            time.sleep(0.1)
        raise ServerError(f"flask run at {self.url} not ready after {timeout:.0f} s ({problem})\n{self.log()}")

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextlib.contextmanager
def running_dev_server(env: Mapping[str, str] | None = None, start_timeout: float = 30.0) -> Iterator[DevServer]:
    """``flask --app app run`` on 127.0.0.1 and a free port, with ``env`` added to the environment."""
    port = free_port()
    full_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    flask = str(Path(sys.executable).parent / "flask")
    with tempfile.TemporaryDirectory(prefix="queuelog-dev-server-") as tmp:
        log_path = Path(tmp) / "flask-run.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [flask, "--app", "app", "run", "--port", str(port)],
                cwd=REPO_ROOT,
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        server = DevServer(process, port, log_path)
        with log_shown_on_failure(f"flask run log, {server.url}", server.log):
            try:
                server.wait_ready(start_timeout)
                yield server
            finally:
                server.stop()
