"""Run the app as a real gunicorn process for end-to-end tests.

``running_server(env)`` starts ``gunicorn -w N -b 127.0.0.1:PORT app:app``
from the repository root, waits until ``GET /openapi.json`` answers 200 and
stops it again on exit.  Tests use ``.kill()`` to crash the whole server
(master and workers, as a power cut would) and ``.restart()`` to bring it back
on the same port, e.g. to check that queued jobs survive.

gunicorn runs in its own session (so its own process group); signals go to
that group by id, never to processes matched by name.

This module is also a pytest plugin (``tests/conftest.py`` loads it): when a
test fails, its report carries what each server it used wrote while it ran,
so a failure that happened inside the server (a 500's traceback) is on screen.
``running_server`` takes part by itself; another helper that starts a server
wraps it in ``log_shown_on_failure``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT
from tests.support.pg_cluster import free_port

#: The page polled to decide that the server is up.
READY_PATH = "/openapi.json"
#: A failed test's report shows at most this many of a server's last log lines.
REPORTED_LOG_LINES = 1000


class ServerError(RuntimeError):
    """The server did not start (the message includes its log)."""


class ServerProcess:
    """A gunicorn server started by ``running_server``.

    Attributes: ``url`` (``http://127.0.0.1:PORT``, no trailing slash),
    ``port``, ``process`` (the ``subprocess.Popen`` of the gunicorn master,
    replaced by ``restart()``), ``pid`` (the master's pid) and ``log_path``.
    """

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        port: int,
        log_path: Path,
        start_timeout: float,
        stop_timeout: float,
    ):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self.process: subprocess.Popen | None = None
        self._argv = argv
        self._env = env
        self._cwd = cwd
        self._start_timeout = start_timeout
        self._stop_timeout = stop_timeout

    @property
    def pid(self) -> int:
        """Pid of the gunicorn master (also its process group id)."""
        assert self.process is not None, "server not started"
        return self.process.pid

    # -- public API -------------------------------------------------------

    def start(self) -> None:
        """Start gunicorn and wait until READY_PATH answers 200."""
        if self.process is not None and self.process.poll() is None:
            raise ServerError("server already running")
        with open(self.log_path, "ab") as log:
            log.write(f"--- starting: {' '.join(self._argv)}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self._argv,
                cwd=self._cwd,
                env=self._env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Own process group: kill() can reach the workers too, and a
                # Ctrl-C meant for pytest does not hit the server directly.
                start_new_session=True,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.kill()
            raise

    def stop(self) -> None:
        """Stop gracefully (SIGTERM); SIGKILL the group if it takes too long."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self._signal_group(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=self._stop_timeout)
        # Workers normally exit with the master; make sure none lingers.
        self.kill()

    def kill(self) -> None:
        """SIGKILL the master and all its workers at once (a crash)."""
        if self.process is None:
            return
        self._signal_group(signal.SIGKILL)
        self.process.wait()
        self._wait_group_gone(timeout=10)

    def restart(self) -> None:
        """Stop (or kill, if the caller already did) and start on the same port."""
        self.stop()
        self.start()

    def worker_pids(self) -> list[int]:
        """Pids of the live gunicorn workers (the master's process group, less the master)."""
        return [pid for pid in _live_members(self.pid) if pid != self.pid]

    def log(self) -> str:
        """The server's output so far (all starts)."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    # -- internals --------------------------------------------------------

    def _signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # the whole group may be gone already
            os.killpg(self.pid, signum)

    def _wait_group_gone(self, timeout: float) -> None:
        """Wait until no live process is left in the server's process group.

        After SIGKILL the workers are reaped by init, not by us; the port is
        only free for a restart once they are really gone.  Zombies count as
        gone: they hold no sockets.
        """
        deadline = time.monotonic() + timeout
        while _live_members(self.pid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self._start_timeout
        last_problem = "no answer yet"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerError(
                    f"gunicorn exited with code {self.process.returncode} "
                    f"before answering\n--- server log ---\n{self.log()}"
                )
            try:
                with urllib.request.urlopen(self.url + READY_PATH, timeout=2) as resp:
                    if resp.status == 200:
                        return
                    last_problem = f"HTTP {resp.status}"
            except urllib.error.HTTPError as exc:
                last_problem = f"HTTP {exc.code}"
            except (urllib.error.URLError, OSError) as exc:
                last_problem = str(exc)
            time.sleep(0.1)
        raise ServerError(
            f"server at {self.url} not ready after {self._start_timeout:.0f} s "
            f"(GET {READY_PATH}: {last_problem})\n--- server log ---\n{self.log()}"
        )


def _live_members(pgid: int) -> list[int]:
    """Pids of non-zombie processes in process group ``pgid`` (Linux /proc)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:
            continue
        # Fields after the ")" that ends the command name: state ppid pgrp ...
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry))
    return members


def gunicorn_path() -> str:
    """gunicorn of the running interpreter's environment (the venv)."""
    return str(Path(sys.executable).parent / "gunicorn")


@functools.cache
def _control_socket_args() -> tuple[str, ...]:
    """Arguments that turn off gunicorn's control socket, where it has one.

    Recent gunicorn opens a control socket at ~/.gunicorn/gunicorn.ctl, one
    path shared by every server of the user: two test servers at once (or a
    restart racing the old master) would fight over it.  Older versions have
    no such option, hence the check.
    """
    result = subprocess.run([gunicorn_path(), "--help"], capture_output=True, text=True)
    return ("--no-control-socket",) if "--no-control-socket" in result.stdout else ()


@contextlib.contextmanager
def running_server(
    env: Mapping[str, str] | None = None,
    workers: int = 4,
    port: int | None = None,
    *,
    app: str = "app:app",
    cwd: str | os.PathLike = REPO_ROOT,
    extra_args: tuple[str, ...] = (),
    start_timeout: float = 60.0,
    stop_timeout: float = 15.0,
) -> Iterator[ServerProcess]:
    """Start gunicorn serving ``app`` on 127.0.0.1; stop it on exit.

    ``env`` is added to (and overrides) ``os.environ``.  ``port`` defaults to
    a free one.  ``app`` and ``cwd`` let tests serve another WSGI module.
    Output goes to a log file (``.log_path``) that is shown if the server
    fails to come up.  ``start_timeout`` is generous: each server process
    spends about a second of CPU importing the app, and when the suite's
    four pytest workers and their servers share CI's 2 cores, four such
    processes have taken over 30 s to answer a first request.
    """
    port = port or free_port()
    full_env = {**os.environ, **(env or {})}
    # Unbuffered, so the log is complete when we show it after a failure.
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    argv = [gunicorn_path(), "-w", str(workers), "-b", f"127.0.0.1:{port}", *_control_socket_args(), *extra_args, app]
    with tempfile.TemporaryDirectory(prefix="queuelog-server-") as tmp:
        server = ServerProcess(argv, full_env, Path(cwd), port, Path(tmp) / "gunicorn.log", start_timeout, stop_timeout)
        with log_shown_on_failure(f"gunicorn log, {server.url}", server.log):
            try:
                server.start()
                yield server
            finally:
                server.stop()


# --- pytest plugin: a failed test's report shows its servers' logs ------------------------


class _WatchedLog:
    """A server's log, as a failed test's report shows it: read live, kept once the server is gone."""

    def __init__(self, title: str, read: Callable[[], str]):
        self.title = title
        self.finished = False
        self._read = read
        self._kept: str | None = None

    def text(self) -> str:
        return self._kept if self._kept is not None else self._read()

    def keep(self) -> None:
        """The server stopped and its log file is about to go: remember the text."""
        self._kept = self._read()
        self.finished = True


#: Logs of servers running now, or stopped during the current test.
_watched_logs: list[_WatchedLog] = []
_LOG_STARTS = pytest.StashKey[dict]()


@contextlib.contextmanager
def log_shown_on_failure(title: str, read_log: Callable[[], str]) -> Iterator[None]:
    """Inside the block and until the current test ends, a failure report shows ``read_log()`` under ``title``.

    Wrap the whole life of a server in it, inside the directory its log lives in.
    """
    watched = _WatchedLog(title, read_log)
    _watched_logs.append(watched)
    try:
        yield
    finally:
        watched.keep()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Note where each running server's log stands, before this test's fixtures start any."""
    item.stash[_LOG_STARTS] = {id(watched): len(watched.text()) for watched in _watched_logs}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Add to a failed report what each server wrote while the test ran; forget servers it stopped."""
    outcome = yield
    report = outcome.get_result()
    starts = item.stash.get(_LOG_STARTS, {})
    if report.failed:
        for watched in _watched_logs:
            written = watched.text()[starts.get(id(watched), 0) :]
            if written:
                report.sections.append((watched.title, _last_lines(written, REPORTED_LOG_LINES)))
    if report.when == "teardown":
        _watched_logs[:] = [watched for watched in _watched_logs if not watched.finished]


def _last_lines(text: str, limit: int) -> str:
    lines = text.splitlines()
    if len(lines) <= limit:
        return text
    return f"[{len(lines) - limit} earlier lines left out]\n" + "\n".join(lines[-limit:])
