"""gunicorn as the README starts it (reading gunicorn.conf.py) builds the app once, in its master, and forks
its workers from it: the master keeps no database connection a worker could inherit, and a bad setting stops
the server before it listens, said once."""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from tests.support.database import test_db_kind
from tests.support.live_site import server_env
from tests.support.server import REPO_ROOT, free_port, gunicorn_path, running_server


def test_the_master_keeps_no_database_connection_for_its_workers_to_inherit(database_url):
    with running_server(server_env(database_url), workers=4) as server:
        workers = all_workers(server, 4)
        for _ in range(8):  # fresh connections: the readiness check reads the database in whichever worker
            with urllib.request.urlopen(server.url + "/readyz", timeout=30) as response:
                assert response.status == 200
        assert database_connections(server.pid, database_url) == []
        assert any(database_connections(worker, database_url) for worker in workers)


def test_a_bad_setting_stops_the_server_before_it_listens_and_says_so_once(tmp_path):
    port = free_port()
    env = {
        **os.environ,
        **server_env(f"sqlite:///{tmp_path / 'queuelog.db'}"),
        "QUEUELOG_LEASE_SECONDS": "soon",
        "PYTHONUNBUFFERED": "1",
    }
    started = subprocess.run(
        [gunicorn_path(), "-w", "4", "-b", f"127.0.0.1:{port}", "app:app"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    log = started.stdout + started.stderr
    assert started.returncode != 0
    assert "Listening at" not in log
    assert log.count("QUEUELOG_LEASE_SECONDS must be a whole number of at least 1, not 'soon'") == 1, log


def all_workers(server, count: int) -> list[int]:
    """The server's worker pids, once it has forked ``count`` (the first may answer before the last is born)."""
    deadline = time.monotonic() + 30
    while len(workers := server.worker_pids()) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(workers) == count, workers
    return workers


def database_connections(pid: int, database_url: str) -> list[str]:
    """What process ``pid`` holds open to the database: the SQLite file (and its -wal, -shm), or TCP sockets to
    PostgreSQL's port."""
    descriptors = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            descriptors.append(os.readlink(fd))
        except FileNotFoundError:  # closed while listed
            continue
    if test_db_kind() == "sqlite":
        database = database_url.removeprefix("sqlite:///")
        return [target for target in descriptors if target.startswith(database)]
    sockets = {target[len("socket:[") : -1] for target in descriptors if target.startswith("socket:[")}
    port = urlsplit(database_url).port or 5432
    return [inode for inode in sockets if inode in _tcp_sockets_to_port(port)]


def _tcp_sockets_to_port(port: int) -> set[str]:
    """Inodes of this machine's TCP sockets whose remote end is ``port``."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port:
                inodes.add(fields[9])
    return inodes
