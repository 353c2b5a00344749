"""The runner's producer: claim jobs for free slots and a few ahead (prefetch), hold them, give back unstarted ones.

A mixin of ``runner._Runner``: it reads and writes the runner's shared state (``held``, ``waiting``, ``running``)
under its ``cond``.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections import deque
from datetime import datetime

from .acks import Backoff, Held
from .client import ApiError, ServerUnavailable

log = logging.getLogger("queuelog.worker")

MAX_CLAIM = 100  # the most jobs the server hands out in one claim (the API's MAX_BATCH_CLAIM)
#: Prefetch: claim beyond the free slots only as many jobs as are expected to start within this many seconds
#: (from the handlers' recent run times). A prefetched job's lease and timeout run from its claim, so this bounds
#: what waiting in the worker adds to them; it also bounds how long a job waits here while another worker idles.
PREFETCH_SECONDS = 0.1
#: A job claimed ahead that has not started this long after its claim (a handler ran far longer than the average)
#: goes back to the queue, where another worker can run it.
MAX_AHEAD_WAIT_SECONDS = 1.0
IDLE_POLL_SECONDS = 2.0  # if the server answers at once despite `wait`, do not hammer it
#: A timed-out job is failed this much before its timeout_at (at most; a quarter of a short timeout), so that
#: the failure reaches the server while it still takes it. Later, the server refuses it (409) and its reaper
#: fails the run as timed out instead: either way the run ends as a timed-out attempt.
TIMEOUT_MARGIN_SECONDS = 1.0


class _Fetching:
    """Claiming (the claimer thread), holding what was claimed, and giving back what never started."""

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
                jobs = self.claim_client.claim(
                    self.types,
                    limit=limit,
                    wait=wait,
                    lease_seconds=self.lease_seconds,
                    process_id=self.presence.process_id,
                )
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
            log.log(
                level,
                "the server holds as many waiting claims as it can; claiming again in %.1f s "
                "(and every Retry-After while it is full)",
                delay,
            )
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
            self.beats.notify()  # a short lease or timeout may be due before the heartbeater's next look
            if jobs:
                ahead = max(0, len(self.waiting) - (self.concurrency - self.running))
                log.debug("claimed %d job(s), %d of them ahead of the free slots", len(jobs), ahead)
        if self.stopping.is_set() or self.quiet.is_set():
            self._give_back(self._unstarted())

    def _unstarted(self, overdue_only: bool = False) -> list[Held]:
        """Take the jobs claimed ahead out of the waiting line, marked released: all of them (stop, quiet), or
        only those past their ``give_back_at``. ``_give_back`` then tells the server."""
        with self.cond:
            now = time.monotonic()
            unstarted = [
                held for held in self.waiting if not held.released and (not overdue_only or held.give_back_at <= now)
            ]
            if unstarted:
                self.waiting = deque(held for held in self.waiting if not held.released and held not in unstarted)
            for held in unstarted:
                held.released = True
        return unstarted

    def _give_back(self, unstarted: list[Held], overdue: bool = False) -> None:
        """Release jobs that never started, so other workers can run them now (no attempt counted)."""
        if unstarted:
            log.info(
                "giving back %d job(s) claimed ahead that have not started%s",
                len(unstarted),
                " in time (a handler ran long)" if overdue else "",
            )
        deadline = time.monotonic() + 30.0
        for held in unstarted:
            self._release(held, deadline)

    def _give_back_soon(self, unstarted: list[Held], overdue: bool = False) -> None:
        """``_give_back`` on a thread of its own, so neither signals, beats nor slots wait for the server."""
        if unstarted:
            threading.Thread(
                target=self._give_back, args=(unstarted, overdue), name="queuelog-give-back", daemon=True
            ).start()

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


def _held(job: dict, now: float) -> Held:
    """A claimed job as this worker holds it: beats due every lease/3, its deadline from its timeout."""
    beat_every = max(0.5, _lease_of(job) / 3)
    timeout = _timeout_of(job)
    deadline = None if timeout is None else now + timeout - min(TIMEOUT_MARGIN_SECONDS, timeout / 4)
    # Unstarted by then, it goes back: after MAX_AHEAD_WAIT_SECONDS, and while the server still takes it back.
    give_back_at = min(now + MAX_AHEAD_WAIT_SECONDS, deadline if deadline is not None else math.inf)
    return Held(
        id=job["id"],
        type=job["type"],
        token=job["claim_token"],
        payload=job.get("payload") or {},
        beat_every=beat_every,
        next_beat=now + beat_every,
        parents=job.get("parents"),
        deadline=deadline,
        retry_count=job.get("retry_count") or 0,
        traceparent=job.get("traceparent"),
        tracestate=job.get("tracestate"),
        give_back_at=give_back_at,
    )


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
