"""The runner's heartbeats: extend the lease of every held job, and give up on handlers past their timeout.

A mixin of ``runner._Runner``: it reads and writes the runner's shared state (``held``, ``waiting``, ``running``)
under its ``cond``.
"""

from __future__ import annotations

import logging
import time

from .acks import Held, Outcome
from .client import ApiError

log = logging.getLogger("queuelog.worker")


class _Heartbeats:
    """The heartbeater thread: beats due leases, fails timed-out runs, gives back jobs that waited too long."""

    def _heartbeat_loop(self) -> None:
        while not self.finished.is_set():
            now = time.monotonic()
            self._give_up_on_timed_out(now)
            self._give_back_soon(self._unstarted(overdue_only=True), overdue=True)
            with self.cond:
                due = [
                    h for h in self.held.values() if h.next_beat <= now and not (h.released or h.lost or h.timed_out)
                ]
            for held in due:
                self._beat(held)
            with self.cond:
                upcoming = [h.next_beat for h in self.held.values() if not (h.released or h.lost or h.timed_out)]
                upcoming += [
                    h.deadline
                    for h in self.held.values()
                    if h.deadline is not None and not (h.handler_done or h.timed_out)
                ]
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
                return  # completed between our look at it and this heartbeat: nothing lost
            if exc.status in (404, 409):
                held.lost = True
                log.warning(
                    "job %d: lease lost (%s); its result will not be accepted", held.id, exc.problem.get("detail", exc)
                )
            else:
                held.next_beat = time.monotonic() + min(held.beat_every, 2.0)
        except Exception as exc:  # noqa: BLE001 - network, 5xx or a strange answer: try again soon
            log.warning("job %d: heartbeat failed (%s); retrying", held.id, exc)
            held.next_beat = time.monotonic() + min(held.beat_every, 1.0)
            with self.cond:
                if held.progress is None:
                    held.progress = progress  # not lost: it goes with the next try

    def _give_up_on_timed_out(self, now: float) -> None:
        """Fail the jobs whose handlers outlived their timeout: stop waiting for them, free their slots."""
        with self.cond:
            late = [
                h
                for h in self.held.values()
                if h.started
                and h.deadline is not None
                and h.deadline <= now
                and not (h.handler_done or h.timed_out or h.released or h.lost)
            ]
            for held in late:
                held.timed_out = True
                self.running -= 1
                self.running_since.pop(held.id, None)
                self._count_run_time(now - held.started_at)
                self._start_slot()  # the stuck thread keeps its handler; a new one takes its slot
                error = "TimeoutError: timed out: the handler did not finish within the job's timeout_seconds"
                log.error(
                    "job %d (%s) timed out: failing it; its handler thread is left running and its "
                    "outcome will be dropped",
                    held.id,
                    held.type,
                )
                self.acker.put(Outcome(held, ok=False, error=error, retryable=True))
            if late:
                self._dispatch()
