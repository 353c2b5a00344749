"""The enqueue's bodies: POST /jobs and each item of POST /jobs/batch, parsed into the queue's NewJob.

Unknown fields are refused, so a client can never mass-assign ``status``, ``retry_count`` or
``worker_id``; every problem is reported at once with a JSON pointer to it. A batch's graph rules (unique
refs, known refs, no cycle) are the queue's (queue/graph.py), checked when it enqueues.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from flask import current_app, request

from ..core.clock import parse_rfc3339, utcnow
from ..core.errors import InvalidRequest
from ..core.patterns import (
    IDEMPOTENCY_KEY,
    IDEMPOTENCY_KEY_HINT,
    JOB_TYPE,
    JOB_TYPE_HINT,
    PRIORITY_BY_LABEL,
    PRIORITY_LABELS,
    Priority,
    one_of,
)
from ..core.trace_context import traceparent_problem, tracestate_problem
from ..queue import NewJob
from ..states import RunWhen
from .body import Fields, json_body
from .limits import (
    CONCURRENCY_KEY,
    CONCURRENCY_KEY_HINT,
    MAX_BATCH_ENQUEUE,
    MAX_BATCH_WORKFLOW,
    MAX_DEPENDS_ON,
    MAX_JOB_ID,
    MAX_RETRIES_LIMIT,
    MAX_TIMEOUT_SECONDS,
    MAX_UNIQUE_FOR_SECONDS,
    REF,
    REF_HINT,
    UNIQUE_KEY,
    UNIQUE_KEY_HINT,
)


def _priority(fields: Fields) -> int:
    value = fields.body.get("priority")
    if value is None:
        return Priority.LOW.value
    if not isinstance(value, str) or value.lower() not in PRIORITY_BY_LABEL:
        fields.error("priority", "must be one of " + ", ".join(PRIORITY_LABELS))
        return Priority.LOW.value
    return PRIORITY_BY_LABEL[value.lower()]


_ENQUEUE_FIELDS = {
    "type",
    "payload",
    "priority",
    "max_retries",
    "idempotency_key",
    "run_at",
    "concurrency_key",
    "unique_for",
    "unique_key",
    "expires_at",
    "timeout_seconds",
    "depends_on",
    "run_when",
    "traceparent",
    "tracestate",
}
_TIME_HINT = "must be an RFC 3339 time with an offset, e.g. 2026-01-01T12:00:00Z"
_TIME_RANGE_HINT = "must fall within the years 1 to 9999 once converted to UTC"


def _time(fields: Fields, name: str) -> datetime | None:
    """An optional RFC 3339 time with an offset."""
    raw = fields.string(name)
    if raw is None:
        return None
    try:
        return parse_rfc3339(raw)
    except OverflowError:
        # Valid RFC 3339 (0001-01-01T00:00:00+01:00), but in year 0 or 10000 once in UTC, which no stored time
        # can be: said as its own rule, so a client is not told its well-formed time is malformed.
        fields.error(name, _TIME_RANGE_HINT)
        return None
    except ValueError:
        fields.error(name, _TIME_HINT)
        return None


def _time_limits(fields: Fields, run_at: datetime | None) -> tuple[int | None, str | None, datetime | None, int | None]:
    """unique_for, unique_key, expires_at and timeout_seconds of an enqueue.

    An expires_at already past, or not after the job's run_at, is refused: such a job could never run.
    """
    unique_for = fields.integer("unique_for", None, 1, MAX_UNIQUE_FOR_SECONDS)
    unique_key = fields.string("unique_key", pattern=UNIQUE_KEY, hint=UNIQUE_KEY_HINT)
    if unique_key is not None and fields.body.get("unique_for") is None:
        fields.error("unique_key", "needs unique_for: the seconds its dedupe window lasts")
    expires_at = _time(fields, "expires_at")
    if expires_at is not None:
        if expires_at <= utcnow():
            fields.error("expires_at", "is in the past: the job could never run")
        elif run_at is not None and expires_at <= run_at:
            fields.error("expires_at", "must be after run_at: the job could never run")
    timeout = fields.integer("timeout_seconds", None, 1, MAX_TIMEOUT_SECONDS)
    return unique_for, unique_key, expires_at, timeout


_RUN_WHEN = tuple(mode.value for mode in RunWhen)


def _depends_on(fields: Fields, in_batch: bool) -> tuple[tuple[int | str, ...], str | None]:
    """``depends_on`` (up to 100 job ids; in a batch, also other items' refs) and ``run_when``."""
    raw = fields.body.get("depends_on")
    run_when = fields.string("run_when")
    if run_when is not None and run_when not in _RUN_WHEN:
        fields.error("run_when", "must be " + one_of(_RUN_WHEN))
    if raw is None:
        if run_when is not None:
            fields.error("run_when", "applies only to a job with depends_on")
        return (), None
    what = "job ids or refs of other items of this batch" if in_batch else "job ids"
    if not isinstance(raw, list) or not raw:
        fields.error("depends_on", f"must be a non-empty list of {what}")
        return (), None
    if len(raw) > MAX_DEPENDS_ON:
        fields.error("depends_on", f"at most {MAX_DEPENDS_ON} parents")
        return (), None
    parents: list[int | str] = []
    for position, value in enumerate(raw):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        is_id = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_JOB_ID
        if is_id or (in_batch and isinstance(value, str) and REF.fullmatch(value)):
            parents.append(value)
        else:
            fields.error(f"depends_on/{position}", f"must be one of {what}")
    return tuple(dict.fromkeys(parents)), run_when


#: The trace context of a request's headers, checked: (traceparent, tracestate).
_TraceContext = tuple[str | None, str | None]


def _header_trace_context() -> tuple[_TraceContext, list[dict]]:
    """The request's ``traceparent`` and ``tracestate`` headers: the context of each job it enqueues that does not
    name its own in its body (an instrumented HTTP client sends the one it is in). More than one traceparent
    header is malformed. A tracestate header without a traceparent means nothing and is dropped, as W3C asks;
    a malformed one is refused like a malformed field (the API's document gives its pattern)."""
    parents = request.headers.getlist("traceparent")
    state = ",".join(value for value in request.headers.getlist("tracestate") if value.strip()) or None
    errors = []
    problem = "must be sent once" if len(parents) > 1 else traceparent_problem(parents[0]) if parents else None
    if problem:
        errors.append({"pointer": "/traceparent", "detail": f"the traceparent header {problem}"})
    if state is not None and (problem := tracestate_problem(state)):  # several headers are one list (W3C)
        errors.append({"pointer": "/tracestate", "detail": f"the tracestate header {problem}"})
    if errors or not parents:
        return (None, None), errors
    return (parents[0], state), []


def _trace_context(fields: Fields, sent: _TraceContext) -> _TraceContext:
    """The job's ``traceparent`` and ``tracestate`` fields, else ``sent`` (the headers'): the body's is the one
    the producer chose for this job."""
    parent = fields.string("traceparent")
    state = fields.string("tracestate")
    if parent is None:
        if state is not None:
            fields.error("tracestate", "needs a traceparent beside it")
        return sent
    if problem := traceparent_problem(parent):
        fields.error("traceparent", problem)
    if state is not None and (problem := tracestate_problem(state)):
        fields.error("tracestate", problem)
    return parent, (state if state and state.strip(" \t,") else None)


def _new_job(
    body: Any, prefix: str, header_key: str | None, sent: _TraceContext = (None, None)
) -> tuple[NewJob | None, list[dict]]:
    if not isinstance(body, dict):
        return None, [{"pointer": prefix, "detail": "must be a JSON object"}]
    in_batch = prefix != ""  # a batch item: /jobs/<index>
    fields = Fields(body, _ENQUEUE_FIELDS | ({"ref"} if in_batch else set()), prefix)
    job_type = fields.string("type", required=True, pattern=JOB_TYPE, hint=JOB_TYPE_HINT)
    payload = fields.obj("payload", {})
    if payload is not None:
        size = len(json.dumps(payload, separators=(",", ":")).encode())
        limit = current_app.config["MAX_PAYLOAD_BYTES"]
        if size > limit:
            fields.error("payload", f"is {size} bytes as JSON; the limit is {limit}")
    priority = _priority(fields)
    max_retries = fields.integer("max_retries", 3, 0, MAX_RETRIES_LIMIT)
    key = fields.string("idempotency_key", pattern=IDEMPOTENCY_KEY, hint=IDEMPOTENCY_KEY_HINT)
    if header_key is not None:
        if not IDEMPOTENCY_KEY.fullmatch(header_key):
            fields.errors.append({"pointer": "/headers/Idempotency-Key", "detail": IDEMPOTENCY_KEY_HINT})
        elif key is not None and key != header_key:
            fields.error("idempotency_key", "differs from the Idempotency-Key header")
        else:
            key = header_key
    run_at = _time(fields, "run_at")
    concurrency_key = fields.string("concurrency_key", pattern=CONCURRENCY_KEY, hint=CONCURRENCY_KEY_HINT)
    unique_for, unique_key, expires_at, timeout = _time_limits(fields, run_at)
    depends_on, run_when = _depends_on(fields, in_batch)
    ref = fields.string("ref", pattern=REF, hint=REF_HINT) if in_batch else None
    traceparent, tracestate = _trace_context(fields, sent)
    if fields.errors:
        return None, fields.errors
    return NewJob(
        type=job_type,
        payload=payload,
        priority=priority,
        max_retries=max_retries,
        idempotency_key=key,
        run_at=run_at,
        concurrency_key=concurrency_key,
        unique_for=unique_for,
        unique_key=unique_key,
        expires_at=expires_at,
        timeout_seconds=timeout,
        depends_on=depends_on,
        run_when=run_when,
        ref=ref,
        traceparent=traceparent,
        tracestate=tracestate,
    ), []


def parse_enqueue() -> NewJob:
    sent, header_errors = _header_trace_context()
    job, errors = _new_job(json_body(), "", request.headers.get("Idempotency-Key"), sent)
    if errors or header_errors:
        raise InvalidRequest(header_errors + errors)
    return job


def parse_enqueue_batch() -> list[NewJob]:
    fields = Fields(json_body(), {"jobs"})
    items = fields.body.get("jobs")
    if not isinstance(items, list) or not items:
        fields.error("jobs", "must be a non-empty list of jobs")
    elif len(items) > MAX_BATCH_WORKFLOW or (len(items) > MAX_BATCH_ENQUEUE and not _is_workflow(items)):
        fields.error(
            "jobs",
            f"at most {MAX_BATCH_ENQUEUE} jobs per batch ({MAX_BATCH_WORKFLOW} when it is a "
            "workflow: its items name refs or depends_on)",
        )
    sent, header_errors = _header_trace_context()
    fields.errors.extend(header_errors)
    fields.done()
    parsed, errors = [], []
    for index, item in enumerate(items):
        job, item_errors = _new_job(item, f"/jobs/{index}", None, sent)
        parsed.append(job)
        errors.extend(item_errors)
    if errors:
        raise InvalidRequest(errors)
    return parsed


def _is_workflow(items: list) -> bool:
    return any(isinstance(item, dict) and ("ref" in item or "depends_on" in item) for item in items)
