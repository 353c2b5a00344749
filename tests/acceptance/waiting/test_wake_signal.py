"""SQLite's cross-process wake-up (queuelog/waiting/wake_signal.py): a datagram socket per waiting server process.

Real sockets, real processes (a killed one, a forked one, one that exits); the database file need not
exist for the sockets, and each test names its own, so no two tests share a directory.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading

import pytest

from queuelog.extensions import db
from queuelog.waiting import wake_signal, wakeup
from tests.support.database import test_db_kind
from tests.support.server import REPO_ROOT

#: A process on ``sys.argv[1]`` that listens, says where, then prints "woken" for each wake-up.
LISTENER = """
import sys, time
from queuelog.waiting import wake_signal
wake_signal.listen(sys.argv[1], lambda: print("woken", flush=True))
print(wake_signal.socket_path(sys.argv[1]), flush=True)
time.sleep(float(sys.argv[2]))
"""


@pytest.fixture
def database():
    """A short path for a database file: its socket directory goes beside it. Straight in the temporary
    directory, not in pytest's deeper tmp_path: a socket's whole path must fit in 104 bytes."""
    directory = tempfile.mkdtemp(prefix="wake-")
    yield os.path.join(directory, "queuelog.db")
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def listeners(database):
    """listeners(seconds=30) → a Popen listening on ``database`` and the path of its socket."""
    started = []

    def start(seconds: float = 30):
        process = subprocess.Popen(
            [sys.executable, "-c", LISTENER, database, str(seconds)], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
        )
        started.append(process)
        return process, process.stdout.readline().strip()

    yield start
    for process in started:
        process.kill()
        process.wait()


@pytest.fixture
def listening(database):
    """This process listens on ``database`` (stopped after the test); returns an Event set by each wake-up."""
    woken = threading.Event()
    assert wake_signal.listen(database, woken.set)
    yield woken
    wake_signal.stop(database)


def sockets_in(directory: str) -> list[str]:
    try:
        return sorted(name for name in os.listdir(directory) if name.endswith(wake_signal.SOCKET_SUFFIX))
    except FileNotFoundError:
        return []


def wake_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == wake_signal.THREAD_NAME]


def test_the_sockets_live_beside_the_database_in_a_directory_only_its_user_may_enter(database, listening):
    directory = wake_signal.directory_for(database)
    assert directory == database + "-wake"
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    assert sockets_in(directory) == [os.path.basename(wake_signal.socket_path(database))]
    assert os.path.basename(wake_signal.socket_path(database)).startswith(f"{os.getpid()}-")


def test_an_announcement_wakes_a_listener_in_another_process(database, listeners):
    process, _ = listeners()
    wake_signal.announce(database)
    assert process.stdout.readline().strip() == "woken"


def test_a_process_is_not_woken_by_its_own_announcement(database, listening):
    wake_signal.announce(database)  # its own waiters were woken in-process already (wakeup's checkin hook)
    assert not listening.wait(0.3)


def test_a_socket_left_by_a_killed_process_is_removed_and_the_others_are_still_woken(database, listeners):
    killed, stale = listeners()
    alive, _ = listeners()
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert os.path.exists(stale)  # a killed process removes nothing

    wake_signal.announce(database)

    assert alive.stdout.readline().strip() == "woken"
    assert not os.path.exists(stale)
    wake_signal.announce(database)  # and the next announcement does not trip over it
    assert alive.stdout.readline().strip() == "woken"


def test_a_process_that_exits_removes_its_socket_and_the_last_one_the_directory(database, listeners):
    staying, stays = listeners()
    leaving, leaves = listeners(seconds=0)
    assert leaving.wait(timeout=30) == 0
    assert not os.path.exists(leaves) and os.path.exists(stays)

    staying.send_signal(signal.SIGTERM)  # Python's default: it exits without its atexit hooks
    staying.wait()
    wake_signal.announce(database)  # removes the socket it left
    listeners(seconds=0)[0].wait(timeout=30)
    assert not os.path.exists(wake_signal.directory_for(database))


def test_announcing_with_nobody_listening_costs_no_socket_and_no_thread(database):
    threads = wake_threads()
    wake_signal.announce(database)
    assert not os.path.exists(wake_signal.directory_for(database))
    assert wake_signal.socket_path(database) is None
    assert wake_threads() == threads


def test_a_forked_child_listens_on_its_own_socket_and_leaves_its_parents_alone(database, listening):
    parents = wake_signal.socket_path(database)
    report_read, report_write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: report its own socket, wake the parent, then go without a trace
        code = 1
        try:
            inherited = wake_signal.socket_path(database)
            woken = threading.Event()
            wake_signal.listen(database, woken.set)
            os.write(report_write, f"{inherited} {wake_signal.socket_path(database)}\n".encode())
            wake_signal.announce(database)
            code = 0 if woken.wait(10) else 2  # the parent announces back
            wake_signal.stop(database)
        finally:
            os._exit(code)
    with os.fdopen(report_read) as report:
        inherited, childs = report.readline().split()
    assert listening.wait(10), "the child's announcement did not wake the parent"
    wake_signal.announce(database)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the parent's announcement did not wake the child"
    assert inherited == "None" and childs != parents
    assert os.path.exists(parents) and not os.path.exists(childs)


def test_a_database_path_too_long_for_a_socket_keeps_its_sockets_in_a_private_temp_directory(tmp_path):
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    database = str(deep / "queuelog.db")
    woken = threading.Event()
    try:
        assert wake_signal.listen(database, woken.set)
        directory = wake_signal.directory_for(database)
        assert os.path.dirname(directory) == tempfile.gettempdir()
        assert stat.S_IMODE(os.lstat(directory).st_mode) == 0o700
        assert len(wake_signal.socket_path(database)) <= wake_signal.MAX_SOCKET_PATH
    finally:
        wake_signal.stop(database)
    assert not os.path.exists(directory)


def test_a_temp_directory_others_may_write_to_is_not_used_and_waiters_poll_instead(tmp_path):
    deep = tmp_path / ("e" * 100)
    deep.mkdir()
    database = str(deep / "queuelog.db")
    directory = wake_signal.directory_for(database)
    os.mkdir(directory)
    os.chmod(directory, 0o777)  # as another user could have made it, to read or redirect wake-ups
    try:
        assert not wake_signal.listen(database, lambda: None)
        assert sockets_in(directory) == []
    finally:
        wake_signal.stop(database)
        os.rmdir(directory)


@pytest.mark.skipif(test_db_kind() != "sqlite", reason="the wake socket is SQLite's; PostgreSQL has LISTEN")
def test_a_server_process_listens_from_its_first_waiting_claim_until_its_engine_is_disposed(
    app, client, worker, enqueue, database_url
):
    database = database_url.removeprefix("sqlite:///")
    enqueue()
    assert client.post("/jobs/claim", headers=worker).status_code == 200  # not waiting: no socket
    assert wake_signal.socket_path(database) is None

    for _ in range(2):
        assert client.post("/jobs/claim", json={"wait": 0.1}, headers=worker).status_code == 204
    assert len(sockets_in(wake_signal.directory_for(database))) == 1
    assert wakeup.waker_for_current_app().listening

    db.engine.dispose()
    assert wake_signal.socket_path(database) is None
    assert sockets_in(wake_signal.directory_for(database)) == []
