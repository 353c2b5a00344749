"""What each item of an enqueue does (its step): insert a new job, or be answered with a job that exists
already (an idempotency key's replay, a dedupe window's holder, an earlier item of the batch).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

from ..auth.keys import Caller
from ..core.errors import IdempotencyConflict
from ..sql import JobRow, NewJobRow, Window
from . import windows
from .moves import ENQUEUE

if TYPE_CHECKING:
    from .new_jobs import NewJob


class _Insert(NamedTuple):
    """An item that makes a new job."""

    row: NewJobRow


class _Earlier(NamedTuple):
    """An item repeating an earlier request's idempotency key: answered with the job made then."""

    job: JobRow


class _AsItem(NamedTuple):
    """An item repeating an earlier item of this batch (same key, same request): answered with its job."""

    index: int


class _Deduped(NamedTuple):
    """An item whose dedupe window another job holds: answered with that job, nothing stored."""

    job: JobRow


class _Hidden(NamedTuple):
    """An item whose dedupe window a job the caller may not see holds: nothing stored, nothing of that job
    answered (it holds no field of it, so no answer can show one)."""


class _SameWindow(NamedTuple):
    """An item in the dedupe window of an earlier item of this batch: answered with that item's job."""

    index: int


_Step = _Insert | _Earlier | _AsItem | _Deduped | _Hidden | _SameWindow


def _enqueue_steps(
    caller: Caller, new_jobs: list[NewJob], earlier: dict[str, JobRow], batch: bool, now: datetime
) -> list[_Step]:
    """What each item does: insert a new job, or answer with the job an idempotency key already names."""
    first_with_key: dict[str, int] = {}
    steps: list[_Step] = []
    for index, job in enumerate(new_jobs):
        key, digest = job.idempotency_key, job.digest()
        if key and key in earlier:
            if earlier[key].request_digest != digest:
                raise _key_reused(f"idempotency key {key!r} was already used for a different request", index, batch)
            steps.append(_Earlier(earlier[key]))
        elif key and key in first_with_key:
            if new_jobs[first_with_key[key]].digest() != digest:
                raise _key_reused(f"idempotency key {key!r} is used twice in this batch", index, batch)
            steps.append(_AsItem(first_with_key[key]))
        else:
            if key:
                first_with_key[key] = index
            steps.append(
                _Insert(
                    NewJobRow(
                        type=job.type,
                        payload=json.dumps(job.payload, separators=(",", ":")),
                        priority=job.priority,
                        status=ENQUEUE.to_status.value,
                        retry_count=0,
                        max_retries=job.max_retries,
                        stall_count=0,
                        idempotency_key=key,
                        request_digest=digest,
                        producer_key_id=caller.id,
                        producer=caller.name,
                        run_at=job.run_at or now,
                        created_at=now,
                        updated_at=now,
                        concurrency_key=job.concurrency_key or "",
                        fair_tag=0,
                        unique_key=job.window_key(),
                        expires_at=job.expires_at,
                        timeout_seconds=job.timeout_seconds,
                        schedule=job.schedule,
                        scheduled_for=job.scheduled_for,
                        traceparent=job.traceparent,
                        tracestate=job.tracestate,
                    )
                )
            )
    return steps


def _take_windows(
    conn, caller: Caller, new_jobs: list[NewJob], steps: list[_Step], now: datetime
) -> tuple[list[_Step], dict[tuple[str, str], Window]]:
    """Each new job with ``unique_for`` takes its dedupe window (queue/windows.py), or is answered with the job
    holding it (``_Deduped``; ``_Hidden`` when the caller may not see that job), or with the job of an
    earlier item of the batch in the same window.

    Returns the steps and the windows taken, by (type, key) (their job_id is set once the jobs are inserted).
    """
    first_in_window: dict[tuple[str, str], int] = {}
    for index, step in enumerate(steps):
        if isinstance(step, _Insert) and step.row.unique_key is not None:
            first_in_window.setdefault((step.row.type, step.row.unique_key), index)
    if not first_in_window:
        return steps, {}
    outcome = windows.take(
        conn, caller, {window: new_jobs[index].unique_for for window, index in first_in_window.items()}, now
    )
    steps = list(steps)
    taken: dict[tuple[str, str], Window] = {}
    for window, index in first_in_window.items():
        result = outcome[window]
        if isinstance(result, Window):
            taken[window] = result
        else:
            steps[index] = _Hidden() if isinstance(result, windows.Unseen) else _Deduped(result.job)
    for index, step in enumerate(steps):
        if isinstance(step, _Insert) and step.row.unique_key is not None:
            first = first_in_window[(step.row.type, step.row.unique_key)]
            if first != index:
                steps[index] = _SameWindow(first)
    return steps, taken


def _key_reused(detail: str, index: int, batch: bool) -> IdempotencyConflict:
    # A 422 like any other: it names the field, so clients can treat every 422 alike.
    pointer = f"/jobs/{index}/idempotency_key" if batch else "/idempotency_key"
    return IdempotencyConflict(detail, errors=[{"pointer": pointer, "detail": detail}])
