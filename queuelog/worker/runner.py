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
"""
from __future__ import annotations

import inspect
import json
import logging
import math
import random
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from ..patterns import JOB_TYPE
from .acks import Acknowledger, Backoff, Held, Journal, Outcome, short_error
from .client import ApiError, Client, ServerUnavailable
from .presence import QUIET, STOP, Presence

log = logging.getLogger("queuelog.worker")

DEFAULT_WAIT = 25.0          # long-poll seconds: an idle worker makes about 2 requests a minute
MAX_CLAIM = 100              # the most jobs the server hands out in one claim (the API's MAX_BATCH_CLAIM)
#: Prefetch: claim beyond the free slots only as many jobs as are expected to start within this many seconds
#: (from the handlers' recent run times). A prefetched job's lease and timeout run from its claim, so this bounds
#: what waiting in the worker adds to them; it also bounds how long a job waits here while another worker idles.
PREFETCH_SECONDS = 0.1
#: A job claimed ahead that has not started this long after its claim (a handler ran far longer than the average)
#: goes back to the queue, where another worker can run it.
MAX_AHEAD_WAIT_SECONDS = 1.0
DURATION_WEIGHT = 0.2        # how much the latest run time moves the running average prefetch is judged by
IDLE_POLL_SECONDS = 2.0      # if the server answers at once despite `wait`, do not hammer it
HARD_STOP_SECONDS = 5.0      # after the second signal: time allowed for releases and last acks
#: A timed-out job is failed this much before its timeout_at (at most; a quarter of a short timeout), so that
#: the failure reaches the server while it still takes it. Later, the server refuses it (409) and its reaper
#: fails the run as timed out instead: either way the run ends as a timed-out attempt.
TIMEOUT_MARGIN_SECONDS = 1.0

Handler = Callable[..., "dict | None"]


class PermanentError(Exception):
    """Raise (or subclass) in a handler to fail the job for good: the server will not retry it."""


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

    def run(self, url: str | None = None, api_key: str | None = None, concurrency: int = 1,
            wait: float = DEFAULT_WAIT, lease_seconds: int | None = None,
            summary_interval: float = 60.0, prefetch: int | None = None) -> int:
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
        runner = _Runner(self, lambda: Client(url, api_key), concurrency, wait, lease_seconds,
                         summary_interval, prefetch)
        return runner.run()


def default_prefetch(concurrency: int) -> int:
    """As many jobs ahead as one claim carries beside the slots: PREFETCH_SECONDS is what bounds them."""
    return max(0, MAX_CLAIM - concurrency)


class _Runner:
    def __init__(self, worker: Worker, make_client: Callable[[], Client], concurrency: int,
                 wait: float, lease_seconds: int | None, summary_interval: float, prefetch: int = 0):
        # Each handler's signature is read once: inspect costs more than a no-op job.
        self.calls = {job_type: _Call(fn, *_wants(fn)) for job_type, fn in worker.handlers.items()}
        self.types = sorted(self.calls)
        self.concurrency, self.wait, self.lease_seconds = concurrency, wait, lease_seconds
        self.prefetch = prefetch
        self.mean_run_seconds: float | None = None   # no job run yet: claim for the free slots only
        self.queue_ran_dry = False          # the last claim got fewer jobs than it asked for
        self.summary_interval = summary_interval
        self.client = make_client()
        self.claim_client = make_client()   # its own connection, so a shutdown can abort the long-poll
        # One lock, three conditions, so that a job starting or ending wakes only who it concerns: ``cond`` the
        # claimer, the acker and the main thread; ``slots`` the idle slot threads; ``beats`` the heartbeater.
        lock = threading.RLock()
        self.cond = threading.Condition(lock)
        self.slots = threading.Condition(lock)
        self.beats = threading.Condition(lock)
        self.held: dict[int, Held] = {}
        self.waiting: deque[Held] = deque()  # claimed ahead, in claim order, for the next free slot
        self.running = 0                    # handlers running now (≤ concurrency)
        self.running_since: dict[int, float] = {}   # job id → monotonic start, for the handlers running now
        self.stopping = threading.Event()   # no more claims
        self.finished = threading.Event()   # the acker and heartbeater may go
        self.journal = Journal()
        self.acker = Acknowledger(self.client, self.cond, self.held, self.journal, self.finished)
        self.signals = 0
        self.quiet = threading.Event()     # an admin said quiet (or stop): claim nothing more
        self.told_to_stop = False          # an admin said stop: as a first signal
        self.presence = Presence(make_client(), concurrency, self.types, self._on_command, self.finished)
        self.fatal = False                  # the server refuses this worker: stop as if signalled
        self.refused_in_a_row = 0           # claims answered "too many waiting claims, come back later"
        self.exit_code = 0

    # --- main thread ------------------------------------------------------------------------

    def run(self) -> int:
        """Start the threads, watch for signals and the summary clock, return the exit status."""
        previous = self._install_signal_handlers()
        self.presence.start()   # before the first claim, which names the process
        for _ in range(self.concurrency):
            self._start_slot()
        claimer = threading.Thread(target=self._claim_loop, name="queuelog-claim", daemon=True)
        for thread in (claimer, threading.Thread(target=self.acker.loop, name="queuelog-ack", daemon=True),
                       threading.Thread(target=self._heartbeat_loop, name="queuelog-heartbeat", daemon=True)):
            thread.start()
        log.info("worker started: %s, types %s, concurrency %d", self.client.url, ",".join(self.types),
                 self.concurrency)
        next_summary = time.monotonic() + self.summary_interval
        try:
            while True:
                # The signal handler only counts; the work happens here, outside it.
                time.sleep(0.1)
                if self.signals >= 2:
                    self._hard_stop()
                    break
                if (self.signals == 1 or self.fatal or self.told_to_stop) and not self.stopping.is_set():
                    log.info("stopping: no new jobs; finishing %d running (signal again to release them)",
                             self.running)
                    self._begin_stop()
                if self.stopping.is_set():
                    self.claim_client.interrupt()   # abort the long-poll in flight, if any
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
            log.info("the server says %s: no new jobs; finishing %d running%s", command, self.running,
                     ", then exiting" if command == STOP else "")
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
            unfinished = [held for held in self.held.values()
                          if not (held.handler_done or held.timed_out or held.released)]
            for held in unfinished:
                held.released = True   # its handler's outcome, if it ever comes, is dropped
        log.warning("second signal: releasing %d unfinished job(s) and exiting", len(unfinished))
        deadline = time.monotonic() + HARD_STOP_SECONDS
        for held in unfinished:
            if not self._release(held, deadline):
                self.exit_code = 1
        while not self._all_acknowledged() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not self._all_acknowledged():
            log.error("exiting with unacknowledged results; the server gives those jobs back when this process "
                      "deregisters, or after their lease")
            self.exit_code = 1

    def _release(self, held: Held, deadline: float) -> bool:
        backoff = Backoff(cap=1.0)
        while True:
            try:
                self.client.release(held.id, held.token)
                self.journal.job(held, "released")
            except ApiError as exc:
                self.journal.job(held, "lease-lost", detail=f"release refused: {exc}")
            except ServerUnavailable as exc:
                if time.monotonic() + 0.5 > deadline:
                    log.error("job %d: could not release it (%s); it runs again after its lease", held.id, exc)
                    return False
                time.sleep(backoff.next())
                continue
            self.acker.forget(held)
            return True

    # --- claiming and running ---------------------------------------------------------------

    def _claim_loop(self) -> None:
        backoff = Backoff()
        while not (self.stopping.is_set() or self.quiet.is_set()):
            with self.cond:
                self.cond.wait_for(lambda: self._to_claim() or self.stopping.is_set() or self.quiet.is_set())
                limit, slot_idle = self._to_claim() or (0, False)
            if self.stopping.is_set() or self.quiet.is_set() or not limit:
                return
            started = time.monotonic()
            # Only an idle slot long-polls. Jobs for later are taken if the queue has them now: a long-poll held
            # open for them would take back the very jobs this worker gives back for others to run.
            wait = self.wait if slot_idle else 0
            try:
                jobs = self.claim_client.claim(self.types, limit=limit, wait=wait,
                                               lease_seconds=self.lease_seconds, process_id=self.presence.process_id)
            except ServerUnavailable as exc:
                if self.stopping.is_set() or self.quiet.is_set():
                    return
                delay = self._claim_retry_delay(exc, backoff)
                self.stopping.wait(delay)
                continue
            except ApiError as exc:
                log.error("the server refuses to hand out jobs to this worker (%s); stopping", exc)
                self.exit_code = 1
                self.fatal = True
                return
            except Exception:  # noqa: BLE001 - a bug or a strange answer must not end claiming
                log.exception("unexpected error while claiming; retrying")
                self.stopping.wait(backoff.next())
                continue
            backoff.reset()
            self.refused_in_a_row = 0
            with self.cond:
                # A claim the queue could not fill waits for an idle slot before the next one. A long-poll answered
                # with fewer jobs than it asked for emptied the queue too: a top-up sent at once would find nothing,
                # and on a busy machine its request would hold up the start of the job just claimed.
                self.queue_ran_dry = len(jobs) < limit
            self._take(jobs)
            if slot_idle and not jobs and (self.wait == 0 or time.monotonic() - started < self.wait / 2):
                self.stopping.wait(IDLE_POLL_SECONDS)

    def ahead(self) -> int:
        """How many jobs to hold claimed beyond the slots: as many as would start within PREFETCH_SECONDS.

        Judged from the running average of recent run times, so a worker of short jobs makes one claim and one
        acknowledgement per many jobs, while one whose jobs take seconds claims only for its free slots (and
        leaves the rest to other workers). Call with ``cond`` held.
        """
        if not self.prefetch or self.mean_run_seconds is None:
            return 0
        now = time.monotonic()
        # A handler running longer than the average says the average is out of date: trust the longer time.
        longest = now - min(self.running_since.values(), default=now)
        starts_in_budget = self.concurrency * PREFETCH_SECONDS / max(self.mean_run_seconds, longest, 1e-6)
        return min(self.prefetch, int(starts_in_budget))

    def _to_claim(self) -> tuple[int, bool] | None:
        """The next claim's ``limit``, and whether a slot is idle (nothing to run); None: wait. Call with ``cond``
        held.

        An idle slot claims at once. Otherwise the claim tops up the jobs claimed ahead, once a quarter of the
        room has freed (a busy worker claims in batches rather than one job per finished one), unless the last
        top-up found the queue dry.
        """
        ahead = self.ahead()
        room = self.concurrency + ahead - self.running - len(self.waiting)
        if room <= 0:
            return None
        slot_idle = self.running + len(self.waiting) < self.concurrency
        if not slot_idle and (self.queue_ran_dry or room < max(1, (self.concurrency + ahead) // 4)):
            return None
        return min(room, MAX_CLAIM), slot_idle

    def _claim_retry_delay(self, exc: ServerUnavailable, backoff: Backoff) -> float:
        """Seconds to wait before claiming again after ``exc``: what the server asked for, if it said."""
        if exc.retry_after is None:
            delay = backoff.next()
            log.warning("claim failed (%s); retrying in %.1f s", exc, delay)
            return delay
        # Up to half as long again, so a fleet refused together does not come back together.
        delay = exc.retry_after * random.uniform(1.0, 1.5)
        if exc.problem.get("type", "").endswith("/long-polls-full"):
            # Expected when a server carries more idle workers than it has threads for: say it once.
            self.refused_in_a_row += 1
            level = logging.INFO if self.refused_in_a_row == 1 else logging.DEBUG
            log.log(level, "the server holds as many waiting claims as it can; claiming again in %.1f s "
                    "(and every Retry-After while it is full)", delay)
        else:
            log.warning("claim failed (%s); retrying in %.1f s, as the server asked", exc, delay)
        return delay

    def _take(self, jobs: list[dict]) -> None:
        """Hold the claimed jobs, start as many as there are free slots, keep the rest waiting for one."""
        now = time.monotonic()
        with self.cond:
            for job in jobs:
                held = _held(job, now)
                self.held[held.id] = held
                self.waiting.append(held)
            self._dispatch()
            self.beats.notify()   # a short lease or timeout may be due before the heartbeater's next look
            if jobs:
                ahead = max(0, len(self.waiting) - (self.concurrency - self.running))
                log.debug("claimed %d job(s), %d of them ahead of the free slots", len(jobs), ahead)
        if self.stopping.is_set() or self.quiet.is_set():
            self._give_back(self._unstarted())

    def _start_slot(self) -> None:
        threading.Thread(target=self._slot_loop, name="queuelog-slot", daemon=True).start()

    def _slot_loop(self) -> None:
        """One slot: run waiting jobs one after another, until the worker ends or a job's timeout takes it."""
        while True:
            with self.cond:
                held = self._next_to_start()
                while held is None:
                    if self.finished.is_set():
                        return
                    self.slots.wait()
                    held = self._next_to_start()
            if not self._execute(held):
                return   # given up on as timed out: another slot thread took this one's place

    def _next_to_start(self) -> Held | None:
        """The next waiting job, now counted as running; None if none may start. Call with ``cond`` held."""
        while self.waiting and self.running < self.concurrency and not (self.stopping.is_set() or
                                                                        self.quiet.is_set()):
            held = self.waiting.popleft()
            if held.released:
                continue
            if held.give_back_at <= time.monotonic():
                # It waited too long, or so long that its timeout would cut it short: back, unstarted, no attempt.
                held.released = True
                self._give_back_soon([held], overdue=True)
                continue
            held.started, held.started_at = True, time.monotonic()
            self.running += 1
            self.running_since[held.id] = held.started_at
            return held
        return None

    def _dispatch(self) -> None:
        """Wake a slot thread for each waiting job, and the claimer to see the room. Call with ``cond`` held."""
        if self.waiting:
            self.slots.notify(len(self.waiting))
        self.cond.notify_all()

    def _unstarted(self, overdue_only: bool = False) -> list[Held]:
        """Take the jobs claimed ahead out of the waiting line, marked released: all of them (stop, quiet), or
        only those past their ``give_back_at``. ``_give_back`` then tells the server."""
        with self.cond:
            now = time.monotonic()
            unstarted = [held for held in self.waiting
                         if not held.released and (not overdue_only or held.give_back_at <= now)]
            if unstarted:
                self.waiting = deque(held for held in self.waiting if not held.released and held not in unstarted)
            for held in unstarted:
                held.released = True
        return unstarted

    def _give_back(self, unstarted: list[Held], overdue: bool = False) -> None:
        """Release jobs that never started, so other workers can run them now (no attempt counted)."""
        if unstarted:
            log.info("giving back %d job(s) claimed ahead that have not started%s", len(unstarted),
                     " in time (a handler ran long)" if overdue else "")
        deadline = time.monotonic() + 30.0
        for held in unstarted:
            self._release(held, deadline)

    def _give_back_soon(self, unstarted: list[Held], overdue: bool = False) -> None:
        """``_give_back`` on a thread of its own, so neither signals, beats nor slots wait for the server."""
        if unstarted:
            threading.Thread(target=self._give_back, args=(unstarted, overdue), name="queuelog-give-back",
                             daemon=True).start()

    def _execute(self, held: Held) -> bool:
        """Run the job's handler and queue its outcome; False if it was given up on as timed out meanwhile."""
        started = time.monotonic()
        outcome = Outcome(held, ok=True)
        try:
            call = self.calls.get(held.type)
            if call is None:
                raise PermanentError(f"this worker has no handler for job type {held.type!r}")
            result = call(held, lambda report: self._report(held, report))
            if result is not None and not isinstance(result, dict):
                raise TypeError(f"the handler returned {type(result).__name__}; return a dict or None")
            # Checked here, where a bad result can still fail the job, not in the acker.
            outcome.size = len(json.dumps(result)) if result is not None else 0
            outcome.result = result
        except BaseException as exc:  # noqa: BLE001 - whatever the handler raised fails the job
            outcome.ok, outcome.retryable = False, not isinstance(exc, PermanentError)
            outcome.error = short_error(exc)
            log.error("job %d (%s) raised %s", held.id, held.type, outcome.error, exc_info=True)
        ran = time.monotonic() - started
        outcome.duration_ms = round(ran * 1000)
        with self.cond:
            self._count_run_time(ran)
            held.handler_done = True
            if held.timed_out:
                log.warning("job %d (%s): its handler returned %.1f s after the job timed out; its outcome is "
                            "dropped", held.id, held.type, (time.monotonic() - held.deadline))
                return False   # its slot was freed and its failure sent when it timed out
            self.running -= 1
            self.running_since.pop(held.id, None)
            if not held.released:
                self.acker.put(outcome)
            self._dispatch()
        return True

    def _count_run_time(self, seconds: float) -> None:
        """Fold one handler's run time into the average prefetch is judged by. Call with ``cond`` held."""
        if self.mean_run_seconds is None:
            self.mean_run_seconds = seconds
        else:
            self.mean_run_seconds += DURATION_WEIGHT * (seconds - self.mean_run_seconds)

    def _give_up_on_timed_out(self, now: float) -> None:
        """Fail the jobs whose handlers outlived their timeout: stop waiting for them, free their slots."""
        with self.cond:
            late = [h for h in self.held.values()
                    if h.started and h.deadline is not None and h.deadline <= now
                    and not (h.handler_done or h.timed_out or h.released or h.lost)]
            for held in late:
                held.timed_out = True
                self.running -= 1
                self.running_since.pop(held.id, None)
                self._count_run_time(now - held.started_at)
                self._start_slot()   # the stuck thread keeps its handler; a new one takes its slot
                error = "TimeoutError: timed out: the handler did not finish within the job's timeout_seconds"
                log.error("job %d (%s) timed out: failing it; its handler thread is left running and its "
                          "outcome will be dropped", held.id, held.type)
                self.acker.put(Outcome(held, ok=False, error=error, retryable=True))
            if late:
                self._dispatch()
    def _report(self, held: Held, report: dict) -> None:
        """A handler's progress report: sent with a heartbeat right away (the latest one wins)."""
        if not isinstance(report, dict):
            raise TypeError(f"progress must be a dict, not {type(report).__name__}")
        with self.cond:
            held.progress = dict(report)
            held.next_beat = time.monotonic()
            self.beats.notify()

    # --- heartbeats -------------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        while not self.finished.is_set():
            now = time.monotonic()
            self._give_up_on_timed_out(now)
            self._give_back_soon(self._unstarted(overdue_only=True), overdue=True)
            with self.cond:
                due = [h for h in self.held.values()
                       if h.next_beat <= now and not (h.released or h.lost or h.timed_out)]
            for held in due:
                self._beat(held)
            with self.cond:
                upcoming = [h.next_beat for h in self.held.values() if not (h.released or h.lost or h.timed_out)]
                upcoming += [h.deadline for h in self.held.values()
                             if h.deadline is not None and not (h.handler_done or h.timed_out)]
                upcoming += [h.give_back_at for h in self.waiting]
                delay = min(upcoming, default=time.monotonic() + 1.0) - time.monotonic()
                if delay > 0 and not self.finished.is_set():
                    self.beats.wait(min(delay, 1.0))

    def _beat(self, held: Held) -> None:
        with self.cond:
            progress, held.progress = held.progress, None
        try:
            self.client.heartbeat(held.id, held.token, self.lease_seconds, progress)
            held.next_beat = time.monotonic() + held.beat_every
        except ApiError as exc:
            with self.cond:
                acknowledged = held.id not in self.held
            if acknowledged:
                return   # completed between our look at it and this heartbeat: nothing lost
            if exc.status in (404, 409):
                held.lost = True
                log.warning("job %d: lease lost (%s); its result will not be accepted", held.id,
                            exc.problem.get("detail", exc))
            else:
                held.next_beat = time.monotonic() + min(held.beat_every, 2.0)
        except Exception as exc:  # noqa: BLE001 - network, 5xx or a strange answer: try again soon
            log.warning("job %d: heartbeat failed (%s); retrying", held.id, exc)
            held.next_beat = time.monotonic() + min(held.beat_every, 1.0)
            with self.cond:
                if held.progress is None:
                    held.progress = progress   # not lost: it goes with the next try


@dataclass(frozen=True)
class _Call:
    """A handler and what it declares (read once): a second parameter for the parents, one named progress."""

    handler: Handler
    wants_parents: bool
    wants_progress: bool

    def __call__(self, held: Held, report: Callable[[dict], None]):
        args = (held.payload, held.parents or []) if self.wants_parents else (held.payload,)
        return self.handler(*args, progress=report) if self.wants_progress else self.handler(*args)


def _wants(handler: Handler) -> tuple[bool, bool]:
    """Does ``handler`` declare a second positional parameter (the parents), and one named progress?"""
    try:
        parameters = inspect.signature(handler).parameters.values()
    except (TypeError, ValueError):   # a builtin or a C callable: the payload only
        return False, False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                  and p.name != "progress"]
    varargs = any(p.kind is p.VAR_POSITIONAL for p in parameters)
    return len(positional) >= 2 or (varargs and len(positional) == 1), any(p.name == "progress" for p in parameters)


def _held(job: dict, now: float) -> Held:
    """A claimed job as this worker holds it: beats due every lease/3, its deadline from its timeout."""
    beat_every = max(0.5, _lease_of(job) / 3)
    timeout = _timeout_of(job)
    deadline = None if timeout is None else now + timeout - min(TIMEOUT_MARGIN_SECONDS, timeout / 4)
    # Unstarted by then, it goes back: after MAX_AHEAD_WAIT_SECONDS, and while the server still takes it back.
    give_back_at = min(now + MAX_AHEAD_WAIT_SECONDS, deadline if deadline is not None else math.inf)
    return Held(id=job["id"], type=job["type"], token=job["claim_token"], payload=job.get("payload") or {},
                beat_every=beat_every, next_beat=now + beat_every, parents=job.get("parents"), deadline=deadline,
                give_back_at=give_back_at)


def _timeout_of(job: dict) -> float | None:
    """How long the server lets this run take (timeout_at less claimed_at), in seconds; None: no timeout."""
    try:
        if not job.get("timeout_at"):
            return None
        allowed = datetime.fromisoformat(job["timeout_at"]) - datetime.fromisoformat(job["claimed_at"])
        return max(allowed.total_seconds(), 0.0)
    except (KeyError, TypeError, ValueError):
        return None


def _lease_of(job: dict) -> float:
    """The lease the server granted, read from the claim (300 s if it cannot be read)."""
    try:
        granted = datetime.fromisoformat(job["lease_expires_at"]) - datetime.fromisoformat(job["claimed_at"])
        return max(granted.total_seconds(), 1.0)
    except (KeyError, TypeError, ValueError):
        return 300.0
