"""What an enqueue takes and answers: a validated new job (``NewJob``) and one job's answer (``Enqueued``).

Apart from enqueueing.py so that the steps and parents it calls can name these types without importing
the module that imports them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from ..core.clock import rfc3339
from ..core.patterns import Priority
from ..sql import JobRow
from ..states import RunWhen


@dataclass(frozen=True)
class NewJob:
    """A validated enqueue request."""

    type: str
    payload: dict
    priority: int = Priority.LOW.value
    max_retries: int = 3
    idempotency_key: str | None = None
    run_at: datetime | None = None
    concurrency_key: str | None = None
    unique_for: int | None = None  # seconds: a dedupe window on (type, unique key)
    unique_key: str | None = None  # None: a digest of type and payload (only with unique_for)
    expires_at: datetime | None = None  # not claimed by then: never run
    timeout_seconds: int | None = None  # how long a run may take
    schedule: str | None = None  # set only by a schedule's tick (queuelog/schedules), never by a request
    scheduled_for: datetime | None = None
    depends_on: tuple[int | str, ...] = ()  # job ids, or (in a batch) the refs of other items
    run_when: str | None = None  # states.RunWhen; None: "completed" when it has parents
    ref: str | None = None  # a batch item's name, for other items' depends_on
    # W3C trace context (core/trace_context.py), checked. Not part of the request's digest: a producer's retry of
    # the same request carries a new span of its own, and is still a replay.
    traceparent: str | None = None
    tracestate: str | None = None

    def digest(self) -> str:
        """Fingerprint of the request, to tell a retry of it from a different request under one key."""
        body = {
            "type": self.type,
            "payload": self.payload,
            "priority": self.priority,
            "max_retries": self.max_retries,
            "run_at": rfc3339(self.run_at),
        }
        # Each only when given, so a request without them keeps the fingerprint it had before they existed.
        optional = {
            "concurrency_key": self.concurrency_key,
            "unique_for": self.unique_for,
            "unique_key": self.unique_key,
            "expires_at": rfc3339(self.expires_at),
            "timeout_seconds": self.timeout_seconds,
        }
        body.update({name: value for name, value in optional.items() if value is not None})
        if self.depends_on:
            body["depends_on"] = list(self.depends_on)
            body["run_when"] = self.run_when or RunWhen.COMPLETED.value
        return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    def window_key(self) -> str | None:
        """The key of the job's dedupe window: ``unique_key``, or a digest of type and payload; None without
        ``unique_for``."""
        if self.unique_for is None:
            return None
        if self.unique_key is not None:
            return self.unique_key
        canonical = json.dumps(self.payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(f"{self.type}\n{canonical}".encode()).hexdigest()


class Enqueued(NamedTuple):
    """An enqueue's answer for one job: the job, whether this request created it, and whether it is another
    enqueue's job whose dedupe window (unique_for) this one fell in. ``job`` is None for a deduplicated item
    whose window another producer's job holds (a type's shared window): the caller learns nothing of it."""

    job: JobRow | None
    created: bool  # False: the request repeats an idempotency key, or was deduplicated
    deduplicated: bool = False
