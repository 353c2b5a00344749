"""The worker runner: claim jobs, run their handlers on threads, heartbeat, acknowledge, shut down.

Threads, and who moves a held job along:
- the claimer long-polls ``POST /jobs/claim`` (``wait``) for the free slots (``limit``) and, when recent
  jobs were short, for a few more to start as soon as a slot frees (prefetch: see ``_Runner.ahead``), only
  for the types this worker has handlers for;
- ``concurrency`` slot threads each run one job's handler at a time and queue its outcome; a job claimed
  ahead waits for a slot (at most MAX_AHEAD_WAIT_SECONDS, then it goes back to the queue), and every job stays
  *held* from its claim until the server has acknowledged it;
- the heartbeater extends the lease of every held job every lease/3 seconds, and gives up on a handler that
  outlives its job's ``timeout_seconds`` (the claim's ``timeout_at``): the job is failed as timed out and the
  handler's slot is freed (a new slot thread takes it); Python cannot stop the handler's thread, so whatever
  it returns later is dropped;
- the acker (acks.py) sends the outcomes, batching completes, and retries them until they arrive;
- the main thread handles SIGTERM/SIGINT — first: stop claiming, finish the running jobs, exit 0;
  second: release the unfinished jobs and exit — and logs a summary every ``summary_interval`` s;
- the presence thread (presence.py) registers the process and beats it; an admin's quiet (claim nothing
  more, keep running) or stop (as a first signal) comes back in the beat's answer.

This module keeps the Worker, the runner's shared state and the main thread; the claimer lives in fetching.py,
the slot threads in executing.py and the heartbeater in heartbeats.py, each a mixin of ``_Runner``.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections import deque
from collections.abc import Callable

from ..core import telemetry
from ..core.patterns import JOB_TYPE
from .acks import Acknowledger, Held, Journal
from .client import Client
from .executing import DURATION_WEIGHT, Handler, PermanentError, _Call, _Executing, _wants
from .fetching import (
    IDLE_POLL_SECONDS,
    MAX_AHEAD_WAIT_SECONDS,
    MAX_CLAIM,
    PREFETCH_SECONDS,
    TIMEOUT_MARGIN_SECONDS,
    _Fetching,
)
from .heartbeats import _Heartbeats
from .presence import QUIET, STOP, Presence

# Names that lived here before the runner was split by concern: importable from here still.
__all__ = [
    "DEFAULT_WAIT",
    "DURATION_WEIGHT",
    "HARD_STOP_SECONDS",
    "IDLE_POLL_SECONDS",
    "MAX_AHEAD_WAIT_SECONDS",
    "MAX_CLAIM",
    "PREFETCH_SECONDS",
    "TIMEOUT_MARGIN_SECONDS",
    "Handler",
    "PermanentError",
    "Worker",
    "default_prefetch",
]

log = logging.getLogger("queuelog.worker")

DEFAULT_WAIT = 25.0  # long-poll seconds: an idle worker makes about 2 requests a minute
HARD_STOP_SECONDS = 5.0  # after the second signal: time allowed for releases and last acks


class Worker:
    """A set of job handlers, run by ``queuelog-worker module:worker`` or ``worker.run()``."""

    def __init__(self):
        self.handlers: dict[str, Handler] = {}

    def handler(self, job_type: str) -> Callable[[Handler], Handler]:
        """Decorator: ``fn(payload) -> dict | None`` handles jobs of ``job_type``; its return is the result.

        A handler that declares a second parameter, ``fn(payload, parents)``, gets the job's parents (a
        workflow's fan-in: ``[{"id", "type", "status", "result"}, ...]``, [] for a job without any). One that
        declares a ``progress`` parameter gets a function to report progress with, ``progress({"percent":
        40})``: any JSON object up to 4 KiB, sent with a heartbeat at once and shown on the job.
        """
        if not JOB_TYPE.fullmatch(job_type):
            raise ValueError(f"{job_type!r} is not a valid job type name")
        if job_type in self.handlers:
            raise ValueError(f"a handler for {job_type!r} is already registered")

        def register(fn: Handler) -> Handler:
            self.handlers[job_type] = fn
            return fn

        return register

    def run(
        self,
        url: str | None = None,
        api_key: str | None = None,
        concurrency: int = 1,
        wait: float = DEFAULT_WAIT,
        lease_seconds: int | None = None,
        summary_interval: float = 60.0,
        prefetch: int | None = None,
    ) -> int:
        """Work until SIGTERM/SIGINT (signals need the main thread); returns the exit status (0 = clean).

        ``prefetch``: the most jobs claimed beyond the free slots, and only while recent jobs were short enough
        that they would start within PREFETCH_SECONDS; 0 claims only for free slots. Default: as many as fit
        in one claim beside the slots.
        """
        if not self.handlers:
            raise ValueError("this worker has no handlers: register one with @worker.handler('type')")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if prefetch is None:
            prefetch = default_prefetch(concurrency)
        if prefetch < 0:
            raise ValueError("prefetch must be 0 or more")
        runner = _Runner(
            self, lambda: Client(url, api_key), concurrency, wait, lease_seconds, summary_interval, prefetch
        )
        return runner.run()


def default_prefetch(concurrency: int) -> int:
    """As many jobs ahead as one claim carries beside the slots: PREFETCH_SECONDS is what bounds them."""
    return max(0, MAX_CLAIM - concurrency)


class _Runner(_Fetching, _Executing, _Heartbeats):
    """One run of a Worker: the state its threads share, and the main thread that starts and stops them."""

    def __init__(
        self,
        worker: Worker,
        make_client: Callable[[], Client],
        concurrency: int,
        wait: float,
        lease_seconds: int | None,
        summary_interval: float,
        prefetch: int = 0,
    ):
        # Each handler's signature is read once: inspect costs more than a no-op job.
        self.calls = {job_type: _Call(fn, *_wants(fn)) for job_type, fn in worker.handlers.items()}
        self.types = sorted(self.calls)
        self.concurrency, self.wait, self.lease_seconds = concurrency, wait, lease_seconds
        self.prefetch = prefetch
        self.mean_run_seconds: float | None = None  # no job run yet: claim for the free slots only
        self.queue_ran_dry = False  # the last claim got fewer jobs than it asked for
        self.summary_interval = summary_interval
        self.client = make_client()
        self.claim_client = make_client()  # its own connection, so a shutdown can abort the long-poll
        # One lock, three conditions, so that a job starting or ending wakes only who it concerns: ``cond`` the
        # claimer, the acker and the main thread; ``slots`` the idle slot threads; ``beats`` the heartbeater.
        lock = threading.RLock()
        self.cond = threading.Condition(lock)
        self.slots = threading.Condition(lock)
        self.beats = threading.Condition(lock)
        self.held: dict[int, Held] = {}
        self.waiting: deque[Held] = deque()  # claimed ahead, in claim order, for the next free slot
        self.running = 0  # handlers running now (≤ concurrency)
        self.running_since: dict[int, float] = {}  # job id → monotonic start, for the handlers running now
        self.stopping = threading.Event()  # no more claims
        self.finished = threading.Event()  # the acker and heartbeater may go
        self.journal = Journal()
        self.acker = Acknowledger(self.client, self.cond, self.held, self.journal, self.finished)
        self.signals = 0
        self.quiet = threading.Event()  # an admin said quiet (or stop): claim nothing more
        self.told_to_stop = False  # an admin said stop: as a first signal
        self.presence = Presence(make_client(), concurrency, self.types, self._on_command, self.finished)
        self.fatal = False  # the server refuses this worker: stop as if signalled
        self.refused_in_a_row = 0  # claims answered "too many waiting claims, come back later"
        self.exit_code = 0

    # --- main thread ------------------------------------------------------------------------

    def run(self) -> int:
        """Start the threads, watch for signals and the summary clock, return the exit status."""
        previous = self._install_signal_handlers()
        # opentelemetry (the otel extra) is imported now, not inside the first handler's run: that run's time
        # would carry the import, and prefetch is judged from the handlers' average run time.
        telemetry.enabled()
        self.presence.start()  # before the first claim, which names the process
        for _ in range(self.concurrency):
            self._start_slot()
        claimer = threading.Thread(target=self._claim_loop, name="queuelog-claim", daemon=True)
        for thread in (
            claimer,
            threading.Thread(target=self.acker.loop, name="queuelog-ack", daemon=True),
            threading.Thread(target=self._heartbeat_loop, name="queuelog-heartbeat", daemon=True),
        ):
            thread.start()
        log.info(
            "worker started: %s, types %s, concurrency %d", self.client.url, ",".join(self.types), self.concurrency
        )
        next_summary = time.monotonic() + self.summary_interval
        try:
            while True:
                # The signal handler only counts; the work happens here, outside it.
                time.sleep(0.1)
                if self.signals >= 2:
                    self._hard_stop()
                    break
                if (self.signals == 1 or self.fatal or self.told_to_stop) and not self.stopping.is_set():
                    log.info("stopping: no new jobs; finishing %d running (signal again to release them)", self.running)
                    self._begin_stop()
                if self.stopping.is_set():
                    self.claim_client.interrupt()  # abort the long-poll in flight, if any
                    if not claimer.is_alive() and self._all_acknowledged():
                        break
                if time.monotonic() >= next_summary:
                    self.journal.summary(self.running)
                    next_summary = time.monotonic() + self.summary_interval
        finally:
            self.finished.set()
            with self.cond:
                for condition in (self.cond, self.slots, self.beats):
                    condition.notify_all()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.presence.stop()
        self.journal.summary(self.running, final=True)
        return self.exit_code

    def _install_signal_handlers(self) -> dict:
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {signum: signal.signal(signum, self._on_signal) for signum in (signal.SIGTERM, signal.SIGINT)}

    def _on_signal(self, _signum, _frame) -> None:
        # No locks here: the main thread may be holding one when the signal arrives.
        self.signals += 1

    def _on_command(self, command: str) -> None:
        """The presence thread heard quiet or stop: claim nothing more, and for stop, exit once the held jobs are
        done.

        The long-poll in flight is left to end by itself: the server gives a quiet process nothing, and cutting
        the connection could throw away an answer already on its way, leaving its jobs claimed for nobody. (A
        stop, like a signal, does cut it; the deregistration on the way out gives such jobs back.)
        """
        if command in (QUIET, STOP):
            log.info(
                "the server says %s: no new jobs; finishing %d running%s",
                command,
                self.running,
                ", then exiting" if command == STOP else "",
            )
            self.quiet.set()
            with self.cond:
                self.cond.notify_all()
            self._give_back_soon(self._unstarted())
        if command == STOP:
            self.told_to_stop = True

    def _begin_stop(self) -> None:
        self.stopping.set()
        with self.cond:
            self.cond.notify_all()
        self._give_back_soon(self._unstarted())

    def _all_acknowledged(self) -> bool:
        with self.cond:
            return not self.held and not self.acker.queue

    def _hard_stop(self) -> None:
        """Second signal: give back every job whose handler has not finished, send what is done, go."""
        self._begin_stop()
        self.claim_client.interrupt()
        with self.cond:
            # The ones claimed ahead are among them, unless the first signal's give-back already has them.
            self.waiting.clear()
            unfinished = [
                held for held in self.held.values() if not (held.handler_done or held.timed_out or held.released)
            ]
            for held in unfinished:
                held.released = True  # its handler's outcome, if it ever comes, is dropped
        log.warning("second signal: releasing %d unfinished job(s) and exiting", len(unfinished))
        deadline = time.monotonic() + HARD_STOP_SECONDS
        for held in unfinished:
            if not self._release(held, deadline):
                self.exit_code = 1
        while not self._all_acknowledged() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not self._all_acknowledged():
            log.error(
                "exiting with unacknowledged results; the server gives those jobs back when this process "
                "deregisters, or after their lease"
            )
            self.exit_code = 1
