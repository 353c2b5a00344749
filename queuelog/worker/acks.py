"""Acknowledging jobs: sending outcomes to the server without ever dropping one, and logging them.

The acker sends as soon as it is free: the completes that queued up while a request was in flight
go together in one ``POST /jobs/complete`` (up to 100 and 512 KiB), so a lone job is acknowledged at
once and a busy worker batches. Failures go one by one (``POST /jobs/{id}/fail``). On a network error,
a 5xx or a refusal of the key, the outcomes are kept and retried with backoff.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from .client import ApiError, Client, ServerUnavailable

log = logging.getLogger("queuelog.worker")

MAX_ACK_BATCH = 100
MAX_ACK_BYTES = 512 * 1024  # well under the server's 1 MiB request body limit
MAX_ERROR_CHARS = 500  # the failure message stored on the job: type and text, trimmed


@dataclass(eq=False)
class Held:
    """A job this worker holds: from its claim until the server acknowledged its outcome."""

    id: int
    type: str
    token: str
    payload: dict
    beat_every: float
    next_beat: float
    give_back_at: float = float("inf")  # monotonic time it goes back to the queue if it has not started
    started: bool = False  # its handler was started (until then it waits for a free slot)
    started_at: float = 0.0  # monotonic time its handler started
    handler_done: bool = False
    released: bool = False
    lost: bool = False
    deadline: float | None = None  # monotonic time the runner gives up on the handler (timeout_seconds)
    timed_out: bool = False  # given up on: failed as timed out, the handler's own outcome is dropped
    parents: list[dict] | None = None  # a workflow's child: its parents, with their results
    progress: dict | None = None  # the handler's latest progress report, not yet sent
    retry_count: int = 0  # attempts already counted (0: the first), from the claim
    traceparent: str | None = None  # the W3C trace context it was enqueued in (core/telemetry.py), or None
    tracestate: str | None = None


@dataclass(eq=False)
class Outcome:
    """What a handler did with a job, waiting to be told to the server."""

    held: Held
    ok: bool
    duration_ms: int = 0
    result: dict | None = None
    error: str | None = None
    retryable: bool = True
    size: int = 0
    alone: bool = False  # the server refused it in a batch: send it on its own
    attempts: int = 0


class Backoff:
    """Exponential backoff with jitter, bounded: about 0.25 s, 0.5 s, 1 s, … up to ``cap``."""

    def __init__(self, first: float = 0.25, cap: float = 10.0):
        self.first, self.cap, self.attempt = first, cap, 0

    def next(self) -> float:
        """The next delay in seconds."""
        delay = min(self.cap, self.first * 2 ** min(self.attempt, 20))
        self.attempt += 1
        return delay / 2 + random.uniform(0, delay / 2)

    def reset(self) -> None:
        """After a success: start from the shortest delay again."""
        self.attempt = 0


@dataclass
class Counts:
    """Jobs finished per outcome since ``since`` (a monotonic time)."""

    completed: int = 0
    failed: int = 0
    lost: int = 0
    released: int = 0
    since: float = field(default_factory=time.monotonic)


class Journal:
    """The worker's log: one line per job (id, type, outcome, duration) and periodic summaries."""

    def __init__(self):
        self.totals = Counts()
        self.window = Counts()
        self._lock = threading.Lock()

    def job(
        self, held: Held, outcome: str, done: Outcome | None = None, detail: str | None = None, retry: str | None = None
    ) -> None:
        """Log the end of one job: completed, failed, released, lease-lost or gone."""
        with self._lock:
            for counts in (self.totals, self.window):
                name = {"completed": "completed", "failed": "failed", "released": "released"}.get(outcome, "lost")
                setattr(counts, name, getattr(counts, name) + 1)
        parts = [f"job {held.id} type={held.type} outcome={outcome}"]
        if retry:
            parts.append(f"retry={retry}")
        if done is not None:
            parts.append(f"duration_ms={done.duration_ms}")
            if done.error and outcome == "failed":
                parts.append(f"error={json.dumps(done.error)}")
        if detail:
            parts.append(f"detail={json.dumps(detail)}")
        log.log(logging.WARNING if outcome in ("lease-lost", "gone") else logging.INFO, " ".join(parts))

    def summary(self, running: int, final: bool = False) -> None:
        """Log counts and jobs/s since the last summary (or, at the end, since the start)."""
        with self._lock:
            counts = self.totals if final else self.window
            if not final:
                self.window = Counts()
        elapsed = max(time.monotonic() - counts.since, 1e-9)
        rate = (counts.completed + counts.failed) / elapsed
        log.info(
            "%s: completed=%d failed=%d lease_lost=%d released=%d running=%d in %.0f s (%.2f jobs/s)",
            "stopped; totals" if final else "summary",
            counts.completed,
            counts.failed,
            counts.lost,
            counts.released,
            running,
            elapsed,
            rate,
        )


class Acknowledger:
    """The acker thread's work. ``cond`` guards ``held`` (shared with the runner) and the queue."""

    def __init__(
        self,
        client: Client,
        cond: threading.Condition,
        held: dict[int, Held],
        journal: Journal,
        finished: threading.Event,
    ):
        self.client, self.cond, self.held, self.journal, self.finished = client, cond, held, journal, finished
        self.queue: deque[Outcome] = deque()

    def put(self, outcome: Outcome) -> None:
        """Queue an outcome (call with ``cond`` held)."""
        self.queue.append(outcome)
        self.cond.notify_all()

    def forget(self, held: Held) -> None:
        """The job is no longer this worker's business."""
        with self.cond:
            self.held.pop(held.id, None)
            self.cond.notify_all()

    def loop(self) -> None:
        """Send outcomes until ``finished`` is set and nothing is queued (or it is set during a retry wait)."""
        backoff = Backoff()
        while True:
            with self.cond:
                self.cond.wait_for(lambda: self.queue or self.finished.is_set())
                if not self.queue:
                    return
                batch = self._take_batch()
            try:
                unsent, problem = self._send(batch), None
            except ServerUnavailable as exc:
                unsent, problem = batch, exc
            except Exception as exc:  # noqa: BLE001 - whatever went wrong, the outcomes are kept
                log.exception("unexpected error while acknowledging")
                unsent, problem = batch, exc
            if not unsent:
                backoff.reset()
                continue
            with self.cond:
                self.queue.extendleft(reversed(unsent))
            if problem is not None:
                delay = backoff.next()
                log.warning("acknowledging %d job(s) failed (%s); retrying in %.1f s", len(unsent), problem, delay)
                if self.finished.wait(delay):
                    return

    def _take_batch(self) -> list[Outcome]:
        """The next request's worth: one failure, one lone item, or the completes queued in a row."""
        first = self.queue.popleft()
        batch, size = [first], first.size
        if not first.ok or first.alone:
            return batch
        while self.queue and len(batch) < MAX_ACK_BATCH:
            nxt = self.queue[0]
            if not nxt.ok or nxt.alone or size + nxt.size > MAX_ACK_BYTES:
                break
            batch.append(self.queue.popleft())
            size += nxt.size
        return batch

    def _send(self, batch: list[Outcome]) -> list[Outcome]:
        """Send one batch; returns what must be sent again (raises ServerUnavailable to retry it all)."""
        for outcome in batch:
            outcome.attempts += 1
        if not batch[0].ok:
            return self._send_failure(batch[0])
        items = [
            {"id": o.held.id, "claim_token": o.held.token, **({"result": o.result} if o.result is not None else {})}
            for o in batch
        ]
        try:
            results = self.client.complete_many(items)
        except ApiError as exc:
            if exc.status in (413, 422):
                return self._refused_results(batch, exc)
            raise ServerUnavailable(str(exc), exc.status) from exc  # 401/403/…: keep the results, retry
        for outcome, answer in zip(batch, results, strict=False):
            if answer["status"] == 200:
                self.journal.job(outcome.held, "completed", outcome)
            elif (
                answer["status"] == 409 and outcome.attempts > 1 and answer["problem"].get("job_status") == "completed"
            ):
                # An earlier try went through but its answer was lost on the way back.
                self.journal.job(outcome.held, "completed", outcome)
            else:
                lost = "gone" if answer["status"] == 404 else "lease-lost"
                self.journal.job(outcome.held, lost, outcome, answer["problem"].get("detail"))
            self.forget(outcome.held)
        return []

    def _refused_results(self, batch: list[Outcome], exc: ApiError) -> list[Outcome]:
        if len(batch) > 1:
            for outcome in batch:
                outcome.alone = True
            return batch  # find the culprit: each on its own
        outcome = batch[0]
        log.error("job %d: the server refused its result (%s); failing the job", outcome.held.id, exc)
        outcome.ok, outcome.retryable = False, False
        outcome.error = trim(f"result rejected by the server: {exc.problem.get('detail', exc)}")
        return [outcome]

    def _send_failure(self, outcome: Outcome) -> list[Outcome]:
        held = outcome.held
        try:
            job = self.client.fail(held.id, held.token, outcome.error or "failed", outcome.retryable)
            retry = "yes" if job.get("status") == "pending" else "no"
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise ServerUnavailable(str(exc), exc.status) from exc
            lost = "gone" if exc.status == 404 else "lease-lost"
            self.journal.job(held, lost, outcome, exc.problem.get("detail"))
        else:
            self.journal.job(held, "failed", outcome, retry=retry)
        self.forget(held)
        return []


def short_error(exc: BaseException) -> str:
    """``ExceptionType: text``, trimmed: what the server stores. The traceback stays in our log."""
    text = " ".join(str(exc).split())
    return trim(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


def trim(text: str) -> str:
    """At most MAX_ERROR_CHARS characters."""
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"
