"""Processes the benchmark starts and stops: gunicorn, redis-server, PostgreSQL.

Every process started here is remembered by PID and stopped by that PID only;
nothing is ever killed by name.  All servers bind to 127.0.0.1 on a free port.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import requests

REPO_ROOT = Path(__file__).resolve().parent.parent

# The one gunicorn configuration used for both queuelog and the ceiling, so
# the ceiling is a fair upper bound (same worker model, same worker count).
GUNICORN_WORKERS = 4
# The README's production command adds gthread's threads (``--threads 8``):
# what users run, and what long-polling workers need. The worker rows use it.
PRODUCTION_THREADS = 8


def free_port() -> int:
    """Ask the kernel for a currently unused loopback port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop_pid(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
    """Stop one process we started: polite signal first, SIGKILL if it lingers."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def child_pids(pid: int) -> list[int]:
    """Direct children of ``pid`` (gunicorn workers of a master), via /proc."""
    kids: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read().decode(errors="replace")
        except OSError:
            continue  # process exited while we were scanning
        # Field 4 is the parent PID; split after the ")" since the command
        # name in field 2 may itself contain spaces or parentheses.
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            kids.append(int(entry))
    return kids


def rss_bytes(pid: int) -> int:
    """Resident set size of one process from /proc/PID/status (0 if gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class GunicornServer:
    """A gunicorn master serving ``app_spec`` with the shared settings.

    ``threads`` None runs gunicorn's default sync workers; a number runs the
    gthread workers of the README's production command.
    """

    def __init__(
        self,
        app_spec: str,
        env: dict[str, str] | None,
        log_path: Path,
        threads: int | None = None,
        cwd: Path = REPO_ROOT,
    ):
        self.app_spec = app_spec
        self.cwd = cwd  # the checkout whose app is served (bench.soak serves another one beside this one)
        self.threads = threads
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, **(env or {})}
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    # Generous: the runner boots every server at once, and 20 gunicorn workers importing the app on a
    # busy 2-core machine have taken over a minute.
    def start(self, ready_path: str = "/", timeout: float = 180.0) -> GunicornServer:
        cmd = [
            sys.executable,
            "-m",
            "gunicorn",
            "-w",
            str(GUNICORN_WORKERS),
            *(["--threads", str(self.threads)] if self.threads else []),
            "-b",
            f"127.0.0.1:{self.port}",
            self.app_spec,
        ]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:  # closed here: the child holds its own descriptor
            self.proc = subprocess.Popen(cmd, cwd=self.cwd, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self._wait_ready(ready_path, timeout)
        return self

    def _wait_ready(self, path: str, timeout: float) -> None:
        """Poll until every worker has booted and one of them answers HTTP."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gunicorn for {self.app_spec} exited early; see {self.log_path}")
            try:
                requests.get(self.url + path, timeout=2)
            except requests.RequestException:
                time.sleep(0.2)
                continue
            if len(child_pids(self.proc.pid)) >= GUNICORN_WORKERS:
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"gunicorn for {self.app_spec} not ready in {timeout}s; see {self.log_path}")

    def rss_bytes(self) -> int:
        """RSS summed over the master and all its workers."""
        if self.proc is None:
            return 0
        pids = [self.proc.pid, *child_pids(self.proc.pid)]
        return sum(rss_bytes(p) for p in pids)

    def stop(self) -> None:
        if self.proc is None:
            return
        workers = child_pids(self.proc.pid)
        _stop_pid(self.proc)  # SIGTERM: gunicorn stops its workers itself
        # If the master had to be SIGKILLed its workers may be orphaned: stop
        # exactly the PIDs we saw as its children, nothing else.
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class RedisServer:
    """A throwaway redis-server for the RQ peer.

    By default it persists nothing, as RQ's own docs run it. ``durable`` turns
    on the append-only file with an fsync before every reply
    (``appendonly yes``, ``appendfsync always``): the durability queuelog
    promises, for the durable comparison.
    """

    def __init__(self, workdir: Path, log_path: Path, durable: bool = False):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.workdir = workdir
        self.log_path = log_path
        self.durable = durable
        self.proc: subprocess.Popen | None = None

    def url_for(self, db: int) -> str:
        """The URL of logical database ``db`` on this server."""
        return f"redis://127.0.0.1:{self.port}/{db}"

    def _persistence_args(self) -> list[str]:
        if not self.durable:
            # No RDB snapshots, no AOF: RQ's default deployment keeps data in
            # memory and this benchmark must not write dump files anywhere.
            return ["--save", "", "--appendonly", "no", "--dir", str(self.workdir)]
        # Its own directory: the AOF files live there and go with the work dir.
        aof_dir = self.workdir / f"redis-aof-{self.port}"
        aof_dir.mkdir(parents=True, exist_ok=True)
        return ["--save", "", "--appendonly", "yes", "--appendfsync", "always", "--dir", str(aof_dir)]

    def start(self, timeout: float = 20.0) -> RedisServer:
        import redis  # imported here: only the RQ peer needs it

        cmd = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            *self._persistence_args(),
            "--daemonize",
            "no",
        ]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:  # closed here: the child holds its own descriptor
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        client = redis.Redis.from_url(self.url)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited early; see {self.log_path}")
            try:
                if client.ping():
                    return self
            except redis.RedisError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("redis-server did not answer PING in time")

    def stop(self) -> None:
        if self.proc is not None:
            _stop_pid(self.proc)
            self.proc = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


@contextlib.contextmanager
def postgres_cluster():
    """Yield a PostgreSQL URL from the project's throwaway-cluster helper.

    Yields ``None`` when the helper is not available, so the PostgreSQL
    column is reported as missing instead of aborting the whole run.
    """
    try:
        from tests.support.pg_cluster import throwaway_cluster
    except ImportError as exc:
        print(f"[bench] PostgreSQL skipped: tests.support.pg_cluster unavailable ({exc})", file=sys.stderr)
        yield None
        return
    with throwaway_cluster() as cluster:
        yield cluster.url


def databases(directory: Path, postgresql: bool = True) -> Iterator[tuple[str, str]]:
    """("SQLite", a file's URL in ``directory``), then ("PostgreSQL", a throwaway cluster's URL) if asked for and
    one can be started; the cluster runs while the caller works on its item, and stops before the loop ends."""
    yield "SQLite", f"sqlite:///{directory / 'queuelog.db'}"
    if postgresql:
        with postgres_cluster() as url:
            if url is not None:
                yield "PostgreSQL", url
