"""The runner's executor: slot threads that start held jobs, run their handlers and queue the outcomes.

A mixin of ``runner._Runner``: it reads and writes the runner's shared state (``held``, ``waiting``, ``running``)
under its ``cond``.
"""

from __future__ import annotations

import inspect
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..core import telemetry
from .acks import Held, Outcome, short_error

log = logging.getLogger("queuelog.worker")

DURATION_WEIGHT = 0.2  # how much the latest run time moves the running average prefetch is judged by

Handler = Callable[..., "dict | None"]


class PermanentError(Exception):
    """Raise (or subclass) in a handler to fail the job for good: the server will not retry it."""


class _Executing:
    """The slot threads: take the next waiting job, run its handler, hand its outcome to the acker."""

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
                return  # given up on as timed out: another slot thread took this one's place

    def _next_to_start(self) -> Held | None:
        """The next waiting job, now counted as running; None if none may start. Call with ``cond`` held."""
        while self.waiting and self.running < self.concurrency and not (self.stopping.is_set() or self.quiet.is_set()):
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

    def _execute(self, held: Held) -> bool:
        """Run the job's handler and queue its outcome; False if it was given up on as timed out meanwhile."""
        started = time.monotonic()
        outcome = Outcome(held, ok=True)
        try:
            with telemetry.processing(
                held.type, held.id, held.traceparent, held.tracestate, first_attempt=held.retry_count == 0
            ):
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
                log.warning(
                    "job %d (%s): its handler returned %.1f s after the job timed out; its outcome is dropped",
                    held.id,
                    held.type,
                    (time.monotonic() - held.deadline),
                )
                return False  # its slot was freed and its failure sent when it timed out
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

    def _report(self, held: Held, report: dict) -> None:
        """A handler's progress report: sent with a heartbeat right away (the latest one wins)."""
        if not isinstance(report, dict):
            raise TypeError(f"progress must be a dict, not {type(report).__name__}")
        with self.cond:
            held.progress = dict(report)
            held.next_beat = time.monotonic()
            self.beats.notify()


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
    except (TypeError, ValueError):  # a builtin or a C callable: the payload only
        return False, False
    positional = [
        p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "progress"
    ]
    varargs = any(p.kind is p.VAR_POSITIONAL for p in parameters)
    return len(positional) >= 2 or (varargs and len(positional) == 1), any(p.name == "progress" for p in parameters)
