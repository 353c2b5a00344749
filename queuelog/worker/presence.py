"""The worker's presence on the server: register this process, beat it, hear quiet and stop, deregister.

One thread beats every ``heartbeat_seconds`` (the server says how often). The beat's answer carries the
command an admin gave on the Workers page (or ``POST /workers/{id}/quiet|stop``): the runner is told once,
when it changes. A server without ``/workers`` (older) or one that refuses the registration leaves the
worker running as before, unregistered; a process the server no longer knows (deleted while this one was
cut off for a day) registers again.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from importlib import metadata

from .acks import Backoff
from .client import ApiError, Client, ServerUnavailable

log = logging.getLogger("queuelog.worker")

RUN, QUIET, STOP = "run", "quiet", "stop"
DEFAULT_BEAT_SECONDS = 3.0


def worker_version() -> str:
    """What the Workers page shows as this worker's version."""
    try:
        return f"queuelog-worker {metadata.version('queuelog')}"
    except metadata.PackageNotFoundError:
        return "queuelog-worker"


class Presence:
    """Registers on ``start``, beats on its own thread, calls ``on_command(command)`` when it changes."""

    def __init__(
        self,
        client: Client,
        concurrency: int,
        types: list[str],
        on_command: Callable[[str], None],
        finished: threading.Event,
    ):
        self.client, self.concurrency, self.types = client, concurrency, types
        self.on_command, self.finished = on_command, finished
        self.process_id: int | None = None
        self.command = RUN
        self.beat_seconds = DEFAULT_BEAT_SECONDS
        self.thread = threading.Thread(target=self._loop, name="queuelog-presence", daemon=True)

    def start(self) -> None:
        """Register now (so the first claim can name the process), then beat on the thread."""
        self._register()
        self.thread.start()

    def stop(self) -> None:
        """A clean exit: leave the server's list (best effort; a gone process is pruned anyway)."""
        self.thread.join(timeout=2 * self.beat_seconds)
        if self.process_id is None:
            return
        try:
            self.client.deregister_process(self.process_id)
        except (ApiError, ServerUnavailable) as exc:
            log.info("could not deregister worker process %d (%s); the server will see it gone", self.process_id, exc)

    def _register(self) -> bool:
        try:
            answer = self.client.register_process(
                socket.gethostname(), os.getpid(), worker_version(), self.concurrency, self.types
            )
        except ApiError as exc:
            log.warning("the server did not register this worker process (%s); working unregistered", exc)
            return False
        except ServerUnavailable as exc:
            log.warning("could not register this worker process yet (%s); retrying with the next beat", exc)
            return False
        self.process_id = answer["id"]
        self.beat_seconds = float(answer.get("heartbeat_seconds") or DEFAULT_BEAT_SECONDS)
        log.info("registered as worker process %d", self.process_id)
        self._heard(answer.get("command", RUN))
        return True

    def _loop(self) -> None:
        backoff = Backoff(cap=self.beat_seconds)
        while not self.finished.wait(self.beat_seconds):
            if self.process_id is None:
                self._register()
                continue
            try:
                answer = self.client.beat_process(self.process_id)
            except ApiError as exc:
                if exc.status == 404:
                    log.warning("the server no longer knows worker process %d; registering again", self.process_id)
                    self.process_id = None
                    self._register()
                else:
                    log.warning("heartbeat of worker process %d refused (%s)", self.process_id, exc)
                continue
            except ServerUnavailable as exc:
                log.warning("heartbeat of worker process %d failed (%s); retrying", self.process_id, exc)
                self.finished.wait(backoff.next())
                continue
            backoff.reset()
            self._heard(answer.get("command", RUN))

    def _heard(self, command: str) -> None:
        if command != self.command and command in (QUIET, STOP):
            self.command = command
            self.on_command(command)
