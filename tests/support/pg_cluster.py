"""A throwaway PostgreSQL cluster for tests and benchmarks.

``throwaway_cluster()`` runs ``initdb`` into a fresh temporary directory,
starts a server that listens only on 127.0.0.1 (on a free port, with its
unix socket inside the temporary directory), and removes everything again on
exit.  Nothing outside the temporary directory is touched, so it never
interferes with a cluster that Debian's ``postgresql`` package may run on
port 5432.

PostgreSQL refuses to run as root.  When this process is root, every server
side command (``initdb``, ``pg_ctl``) is run as the ``postgres`` OS user via
``runuser`` and the temporary directory is handed to that user.  As any other
user the commands run directly.

Run ``python -m tests.support.pg_cluster`` to start a cluster by hand: it
prints the URL and keeps the cluster up until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import pwd
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

#: OS user that owns the server processes when we are root.
SERVER_OS_USER = "postgres"
#: Database superuser created by initdb (trust auth, no password).
SUPERUSER = "postgres"

# Settings appended to postgresql.conf.  Durability is pointless for a
# cluster that is deleted afterwards, and turning it off makes tests faster.
_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "max_connections": "200",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    # Keep the log readable when a test fails; the server writes it to the
    # file given to ``pg_ctl -l``.
    "logging_collector": "off",
    # A few two-phase transactions, so a test can leave one prepared (it holds back vacuum: db_health).
    "max_prepared_transactions": "4",
}


class ClusterError(RuntimeError):
    """The cluster could not be created, started or stopped."""


def find_bindir() -> Path:
    """Return the ``bin`` directory of the newest installed PostgreSQL.

    Debian installs each major version under /usr/lib/postgresql/N/bin; the
    highest N wins.
    """
    candidates = []
    for path in glob.glob("/usr/lib/postgresql/*/bin"):
        version = Path(path).parent.name
        if (Path(path) / "initdb").exists():
            # "15" -> (15,), "9.6" -> (9, 6): compare numerically, not as text.
            key = tuple(int(part) for part in re.findall(r"\d+", version))
            candidates.append((key, Path(path)))
    if not candidates:
        raise ClusterError(
            "no PostgreSQL server found under /usr/lib/postgresql/*/bin; install it with: apt-get install -y postgresql"
        )
    return max(candidates)[1]


#: Where the ports a test listens on come from: below the kernel's ephemeral range, so that no outgoing
#: connection (the suite makes thousands a minute) can take a port between free_port() and the server's bind,
#: and split in two halves by QUEUELOG_TEST_DB, so that the SQLite and PostgreSQL passes, which scripts/test
#: runs side by side, never hand the same port to two servers (a test could then reach the other pass's server).
_LISTEN_PORTS_FROM = 20_000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: Its own generator: hypothesis seeds the module-level one inside its tests.
_PICK = random.SystemRandom()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, from this pass's own share of the listen ports."""
    ports = _listen_ports()
    if ports is None:
        return _kernel_port()
    for port in _PICK.sample(ports, min(200, len(ports))):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:  # in use (or in TIME_WAIT): another
                continue
            return port
    return _kernel_port()


def _listen_ports() -> range | None:
    """This pass's half of [_LISTEN_PORTS_FROM, start of the ephemeral range) (this worker's slice of it), or
    None when there is no room."""
    try:
        ephemeral_start = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    middle = (_LISTEN_PORTS_FROM + ephemeral_start) // 2
    if middle - _LISTEN_PORTS_FROM < 4000:
        return None
    postgres_pass = os.environ.get("QUEUELOG_TEST_DB", "sqlite").lower() == "postgresql"
    share = range(middle, ephemeral_start) if postgres_pass else range(_LISTEN_PORTS_FROM, middle)
    # A pass run on several pytest-xdist workers splits its share once more, a slice per worker.
    worker = re.fullmatch(r"gw(\d+)", os.environ.get("PYTEST_XDIST_WORKER", ""))
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if worker and workers > 1:
        size = len(share) // workers
        start = share.start + size * (int(worker.group(1)) % workers)
        share = range(start, start + size)
    return share


def _kernel_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _quote_conf(value: str) -> str:
    """Quote a value for postgresql.conf (single quotes, doubled inside)."""
    return "'" + value.replace("'", "''") + "'"


class Cluster:
    """A running (or stopped) throwaway cluster; made by ``throwaway_cluster``.

    Attributes: ``url`` (SQLAlchemy URL of the ``postgres`` database),
    ``host``, ``port``, ``root`` (the temporary directory), ``datadir``,
    ``socket_dir``, ``log_path`` and ``bindir``.
    """

    host = "127.0.0.1"

    def __init__(self, bindir: Path, root: Path, run_as: str | None):
        self.bindir = bindir
        self.root = root
        self.datadir = root / "data"
        self.socket_dir = root / "sockets"
        self.log_path = root / "postgres.log"
        self.port: int | None = None
        self._run_as = run_as

    # -- public API -------------------------------------------------------

    @property
    def url(self) -> str:
        """URL of the default ``postgres`` database (psycopg 3 driver)."""
        return self.url_for("postgres")

    def url_for(self, database: str) -> str:
        """URL of ``database`` on this cluster (psycopg 3 driver)."""
        return f"postgresql+psycopg://{SUPERUSER}@{self.host}:{self.port}/{database}"

    @property
    def running(self) -> bool:
        """True while the server answers on its port."""
        if self.port is None:
            return False
        result = subprocess.run(
            [str(self.bindir / "pg_isready"), "-q", "-h", self.host, "-p", str(self.port), "-t", "1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return result.returncode == 0

    def start(self, timeout: float = 60.0) -> None:
        """Start the server on its port and wait until it accepts connections.

        The first start picks a free port; later starts reuse it, so a test
        can ``stop()`` the database and bring it back at the same URL with the
        same data.  Starting a running cluster does nothing.
        """
        if self._postmaster_running():
            return
        if self.port is not None:
            self._start_on(self.port, timeout)
            return
        # Another process may grab the free port between free_port() and the
        # server's bind(); try a few ports before giving up.
        last_error: ClusterError | None = None
        for _ in range(5):
            port = free_port()
            try:
                self._start_on(port, timeout)
            except ClusterError as exc:
                last_error = exc
                continue
            self.port = port
            return
        assert last_error is not None
        raise last_error

    def stop(self, mode: str = "fast") -> None:
        """Stop the server; the data directory and port are kept.

        ``mode`` is pg_ctl's shutdown mode: "fast" (disconnect clients and
        shut down cleanly) or "immediate" (like a crash: recovery runs on
        the next start).  Stopping a stopped cluster does nothing.
        """
        if not self._postmaster_running():
            return
        result = self._run_server_cmd("pg_ctl", "-D", str(self.datadir), "-m", mode, "-w", "-t", "60", "stop")
        if result.returncode != 0 and self._postmaster_running():
            raise ClusterError(self._describe("pg_ctl stop failed", result))

    def create_database(self, name: str) -> str:
        """Create database ``name`` and return its URL."""
        result = subprocess.run(
            [str(self.bindir / "createdb"), "-h", self.host, "-p", str(self.port), "-U", SUPERUSER, name],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise ClusterError(f"createdb {name!r} failed: {result.stderr.strip()}")
        return self.url_for(name)

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the server log (for error messages)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])

    # -- internals --------------------------------------------------------

    def initdb(self) -> None:
        """Create the data directory, trusting every local connection."""
        self.socket_dir.mkdir()
        self._give_to_server_user(self.socket_dir)
        result = self._run_server_cmd(
            "initdb",
            "-D",
            str(self.datadir),
            "-U",
            SUPERUSER,
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        )
        if result.returncode != 0:
            raise ClusterError(self._describe("initdb failed", result))
        settings = dict(_SETTINGS, unix_socket_directories=str(self.socket_dir))
        lines = [f"{key} = {_quote_conf(value)}" for key, value in settings.items()]
        # Appending keeps the file's owner (the server user) even as root.
        with open(self.datadir / "postgresql.conf", "a") as conf:
            conf.write("\n# queuelog throwaway cluster\n" + "\n".join(lines) + "\n")

    def _start_on(self, port: int, timeout: float) -> None:
        # The port is passed on the command line rather than written to
        # postgresql.conf so that a retry on another port needs no rewrite.
        result = self._run_server_cmd(
            "pg_ctl",
            "-D",
            str(self.datadir),
            "-l",
            str(self.log_path),
            "-o",
            f"-p {port}",
            "-w",
            "-t",
            str(int(timeout)),
            "start",
        )
        if result.returncode != 0:
            # pg_ctl may give up while a half-started postmaster lingers.
            self._run_server_cmd("pg_ctl", "-D", str(self.datadir), "-m", "immediate", "-w", "stop")
            raise ClusterError(self._describe(f"pg_ctl start on port {port} failed", result))
        # pg_ctl -w waits for the postmaster's "ready" status; confirm that
        # TCP on 127.0.0.1 works too, since that is what clients use.
        deadline = time.monotonic() + timeout
        while True:
            ready = subprocess.run(
                [str(self.bindir / "pg_isready"), "-q", "-h", self.host, "-p", str(port), "-t", "2"],
            )
            if ready.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"server on port {port} never accepted connections\n" + self.log_tail())
            time.sleep(0.1)

    def _postmaster_running(self) -> bool:
        # "pg_ctl status" looks at postmaster.pid and the process, so it also
        # sees a server that is starting or shutting down.
        if not (self.datadir / "postmaster.pid").exists():
            return False
        result = self._run_server_cmd("pg_ctl", "-D", str(self.datadir), "status")
        return result.returncode == 0

    def _run_server_cmd(self, program: str, *args: str) -> subprocess.CompletedProcess:
        """Run a server-side program, as the server OS user when we are root."""
        cmd = [str(self.bindir / program), *args]
        if self._run_as is not None:
            cmd = ["runuser", "-u", self._run_as, "--", *cmd]
        # cwd inside our directory: the server user may not be allowed to
        # enter the caller's working directory (e.g. /root).
        return subprocess.run(cmd, cwd=self.root, capture_output=True, text=True, stdin=subprocess.DEVNULL)

    def _give_to_server_user(self, path: Path) -> None:
        if self._run_as is not None:
            entry = pwd.getpwnam(self._run_as)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def _describe(self, what: str, result: subprocess.CompletedProcess) -> str:
        return (
            f"{what} (exit {result.returncode}): {result.stderr.strip()}\n"
            f"{result.stdout.strip()}\n--- server log ---\n{self.log_tail()}"
        )


@contextlib.contextmanager
def throwaway_cluster(base_dir: str | os.PathLike | None = None) -> Iterator[Cluster]:
    """Create and start a temporary cluster; stop and delete it on exit.

    ``base_dir`` is where the temporary directory goes (default: the system
    temp dir).  As root, the server user must be able to reach it.
    """
    bindir = find_bindir()
    run_as = None
    if os.geteuid() == 0:
        run_as = SERVER_OS_USER
        try:
            pwd.getpwnam(run_as)
        except KeyError:
            raise ClusterError(
                f"running as root but there is no {run_as!r} OS user to run the "
                "server as; install Debian's postgresql package"
            ) from None
    root = Path(tempfile.mkdtemp(prefix="queuelog-pg-", dir=base_dir))
    cluster = Cluster(bindir, root, run_as)
    try:
        cluster._give_to_server_user(root)
        cluster.initdb()
        cluster.start()
        yield cluster
    finally:
        try:
            # Immediate: the data is about to be deleted, a clean shutdown
            # would only waste time writing a checkpoint.
            cluster.stop(mode="immediate")
        finally:
            shutil.rmtree(root, ignore_errors=True)


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _raise_system_exit(signum, _frame):
    # Turn SIGTERM into an exception so the context manager cleans up, and
    # ignore further signals so an impatient second one cannot cut the
    # cleanup short and leave a server running.
    for other in _STOP_SIGNALS:
        signal.signal(other, signal.SIG_IGN)
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """Start a cluster, print its URL and keep it up until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="python -m tests.support.pg_cluster", description=main.__doc__)
    parser.add_argument(
        "--url-file", help="also write the URL to this file (written once the server accepts connections)"
    )
    options = parser.parse_args(argv)

    for signum in _STOP_SIGNALS:
        signal.signal(signum, _raise_system_exit)
    started = time.monotonic()
    try:
        with throwaway_cluster() as cluster:
            print(cluster.url, flush=True)
            print(
                f"cluster ready in {time.monotonic() - started:.1f} s "
                f"(data in {cluster.root}); stop with SIGTERM or Ctrl-C",
                file=sys.stderr,
                flush=True,
            )
            if options.url_file:
                # Write then rename, so a reader never sees a partial URL.
                tmp = options.url_file + ".tmp"
                Path(tmp).write_text(cluster.url + "\n")
                os.replace(tmp, options.url_file)
            while True:
                signal.pause()
    except SystemExit as exc:
        # A signal: the cluster is already cleaned up by the with block.
        return 0 if exc.code in (128 + signal.SIGTERM, 128 + signal.SIGINT) else 1
    except ClusterError as exc:
        print(f"pg_cluster: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
