"""SQLite's wake-up for waiting claims in other server processes: a Unix datagram socket per process.

SQLite has no NOTIFY. Instead, each server process that has had a waiting claim binds a datagram socket
in a directory beside the database file (``queuelog.db-wake/<pid>-<random>.sock``, made mode 0700), and
a thread that sleeps on it and wakes that process's waiting claims. After a transaction that made jobs
claimable commits (``wakeup.jobs_ready``), its process sends one byte to every other socket there,
without waiting. Any process of the same user may send (``flask reap`` from cron, say); only processes
that wait listen.

Why this way:
- Idle, it costs nothing: each thread sleeps in ``recv`` and nothing polls. (``PRAGMA data_version``
  would have every process poll the file, and would wake a waiter only as often as it polls.)
- An announcement (the directory listed, one send per other process) costs a small fraction of the
  enqueue itself, and the datagram wakes a waiter in another process well within a pickup's time.
- Socket files rather than Linux's abstract namespace: the directory is the registry, its mode says who
  may send, and it works on every Unix. A file whose process was killed refuses the next datagram
  (ECONNREFUSED), and that sender removes it; a process that exits removes its own.
- A receive queue that is full (EAGAIN) already holds a wake-up: the datagram is not needed.

A socket path holds about 100 bytes, so a database whose path is too long for that keeps its sockets in
the temp directory instead (``queuelog-wake-<hash of the database path>``, used only while it is this
user's own, private directory). Where a process cannot listen, ``listen`` says so and its waiting claims
poll instead.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import logging
import os
import secrets
import socket
import stat
import tempfile
import threading
from collections.abc import Callable

log = logging.getLogger("queuelog.wakeup")

DIRECTORY_SUFFIX = "-wake"  # beside SQLite's own -wal and -shm
SOCKET_SUFFIX = ".sock"
THREAD_NAME = "queuelog-wake"
#: The longest socket path used: sun_path holds 108 bytes on Linux and 104 on macOS, the final NUL included.
MAX_SOCKET_PATH = 103
#: A socket's file name: the pid (at most 7 digits on Linux), a random part, the suffix.
_NAME_ROOM = len("4194304-") + 8 + len(SOCKET_SUFFIX)
_TEMP_PREFIX = "queuelog-wake-"
#: What a datagram announces: jobs became claimable (waiting claims wake), or jobs that producers wait for
#: reached a final state (``GET /jobs/{id}?wait=S`` wakes).
JOBS_READY = b"\x01"
JOBS_FINISHED = b"\x02"


# --- where -------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def directory_for(database: str) -> str:
    """The directory of the sockets for the SQLite file ``database``: every process finds the same one."""
    database = os.path.realpath(database)
    beside = database + DIRECTORY_SUFFIX
    if len(os.fsencode(beside)) + 1 + _NAME_ROOM <= MAX_SOCKET_PATH:
        return beside
    digest = hashlib.sha256(os.fsencode(database)).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), _TEMP_PREFIX + digest)


# --- sending -----------------------------------------------------------------------------------------


def announce(database: str, kind: bytes = JOBS_READY) -> None:
    """Wake the waiting claims (or, ``kind`` JOBS_FINISHED, the waiting producers) of every other process on
    ``database``: a datagram each, never waiting.

    Called after a commit that made jobs claimable (or final), on the request's thread: it never raises.
    """
    directory = directory_for(database)
    try:
        names = os.listdir(directory)
    except OSError:
        return  # no process has listened here yet (or we may not look): nobody to wake
    listener = _listeners.get(directory)
    own = listener.name if listener is not None else None
    try:
        sender = _sender()
    except OSError as error:  # out of file descriptors, say: the others' recheck finds the jobs
        log.warning("wake-ups not sent: %s", error)
        return
    for name in names:
        if name == own or not name.endswith(SOCKET_SUFFIX):
            continue
        path = os.path.join(directory, name)
        try:
            sender.sendto(kind, path)
        except BlockingIOError:
            pass  # its queue is full, so a wake-up is waiting for it already
        except ConnectionRefusedError:
            _remove_stale(path)
        except OSError as error:  # gone since the listing (ENOENT), not ours to write to (EACCES), ...
            log.debug("wake-up not sent to %s: %s", path, error)


def _remove_stale(path: str) -> None:
    # Nobody reads this socket: its process was killed before it could remove it. Names are never
    # reused (a random part), so this is not a newer process's socket.
    with contextlib.suppress(OSError):
        os.unlink(path)
        log.info("removed the wake-up socket of a process that is gone: %s", path)


_sending: socket.socket | None = None


def _sender() -> socket.socket:
    """One unbound, non-blocking datagram socket to send from, shared by the process's threads."""
    global _sending
    if _sending is None:
        with _lock:
            if _sending is None:
                sending = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                sending.setblocking(False)
                _sending = sending
    return _sending


# --- listening ---------------------------------------------------------------------------------------


class _Listener:
    """This process's socket in one directory, and the thread that wakes its callbacks for each datagram."""

    def __init__(self, directory: str):
        self.directory = directory
        self.name = f"{os.getpid()}-{secrets.token_hex(4)}{SOCKET_SUFFIX}"
        self.path = os.path.join(directory, self.name)
        self.callbacks: dict[bytes, list[Callable[[], None]]] = {JOBS_READY: [], JOBS_FINISHED: []}
        self._closed = False
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self._socket.bind(self.path)
        except OSError:
            self._socket.close()
            raise
        self._thread = threading.Thread(target=self._receive, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while True:
            kinds = self._wait_for_datagrams()
            if kinds is None:
                return
            for kind in kinds:
                for wake in list(self.callbacks.get(kind, ())):
                    wake()

    def _wait_for_datagrams(self) -> set[bytes] | None:
        """Sleep until datagrams come, then read every one queued: one wake-up of each kind for all. None once
        closed."""
        kinds: set[bytes] = set()
        try:
            kinds.add(self._socket.recv(16)[:1])
            while not self._closed:
                kinds.add(self._socket.recv(16, socket.MSG_DONTWAIT)[:1])
        except BlockingIOError:
            pass  # all read
        except OSError:
            return None  # closed under us
        return None if self._closed else kinds

    def close(self) -> None:
        """Stop listening and remove the socket file, and the directory if it was the last one there."""
        self._closed = True
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        with contextlib.suppress(OSError):  # another process's socket is still there
            os.rmdir(self.directory)
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)  # the thread's recv returns
        self._socket.close()

    def forget(self) -> None:
        """In a forked child: drop the parent's socket without touching it (the parent still listens)."""
        self._socket.close()


_listeners: dict[str, _Listener] = {}
_cannot_listen: set[str] = set()
_lock = threading.Lock()
_process_hooks_installed = False


def listen(database: str, on_wake: Callable[[], None], kind: bytes = JOBS_READY) -> bool:
    """Call ``on_wake`` whenever another process announces jobs (of ``kind``) on ``database``.

    Binds this process's socket and starts its thread on first use. False when this process cannot
    listen (the directory is not usable, or the path is too long): its waiting claims must poll.
    """
    directory = directory_for(database)
    with _lock:
        listener = _listeners.get(directory)
        if listener is None:
            if directory in _cannot_listen:
                return False
            listener = _bind(directory)
            if listener is None:
                _cannot_listen.add(directory)
                return False
            _listeners[directory] = listener
            _install_process_hooks()
        callbacks = listener.callbacks.setdefault(kind, [])
        if on_wake not in callbacks:
            callbacks.append(on_wake)
    return True


def stop(database: str) -> None:
    """Stop listening for ``database`` in this process and remove its socket (``listen`` starts again)."""
    directory = directory_for(database)
    with _lock:
        listener = _listeners.pop(directory, None)
        _cannot_listen.discard(directory)
    if listener is not None:
        listener.close()


def socket_path(database: str) -> str | None:
    """This process's socket for ``database``, while it listens."""
    listener = _listeners.get(directory_for(database))
    return listener.path if listener is not None else None


def _bind(directory: str) -> _Listener | None:
    try:
        try:
            _make_directory(directory)
            return _Listener(directory)
        except FileNotFoundError:
            # The last process listening there removed the directory between our mkdir and our bind.
            _make_directory(directory)
            return _Listener(directory)
    except OSError as error:
        log.warning(
            "waiting claims cannot be woken from other server processes (%s: %s); they poll instead", directory, error
        )
        return None


def _make_directory(directory: str) -> None:
    """The sockets' directory, private to this user when made here; in the temp directory, only if it is."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, 0o700)
    if os.path.basename(directory).startswith(_TEMP_PREFIX):
        # Anyone may create a name in the temp directory: use it only if it is ours and nobody else's.
        info = os.lstat(directory)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise PermissionError(f"{directory} is not a private directory of this user")


def _install_process_hooks() -> None:
    """Once a process listens: remove its sockets when it exits, and let a forked child start afresh."""
    global _process_hooks_installed
    if not _process_hooks_installed:
        _process_hooks_installed = True
        atexit.register(_close_all)
        os.register_at_fork(after_in_child=_forget_after_fork)


def _close_all() -> None:
    with _lock:
        listeners = list(_listeners.values())
        _listeners.clear()
    for listener in listeners:
        listener.close()


def _forget_after_fork() -> None:
    # Threads do not survive fork, and the parent's sockets are the parent's: a child that waits binds its
    # own. The lock may have been held by a parent thread at the fork, so the child takes a new one.
    global _lock, _sending
    _lock = threading.Lock()
    for listener in _listeners.values():
        listener.forget()
    _listeners.clear()
    _cannot_listen.clear()
    if _sending is not None:
        _sending.close()
        _sending = None
