"""Request bodies: one parser per body, each returning a frozen value or raising InvalidRequest.

Unknown fields are refused, so a client can never mass-assign ``status``, ``retry_count`` or
``worker_id``; every problem is reported at once with a JSON pointer to it.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
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
    JSON_NUMBER,
    NAME_PATTERN,
    PRIORITY_BY_LABEL,
    PRIORITY_LABELS,
    Priority,
    one_of,
)
from ..queue import NewJob
from ..queue.flow import FIELDS as FLOW_FIELDS
from ..queue.flow import UNIQUE_SCOPES, RateLimit
from ..states import STATUS_NAMES, RunWhen
from .body import Fields, json_body

MAX_RETRIES_LIMIT = 100
MAX_BATCH_ENQUEUE = 500
#: A batch that is a workflow (an item names a ref or depends_on) may hold a fan-out of up to this many jobs.
MAX_BATCH_WORKFLOW = 1000
MAX_DEPENDS_ON = 100
#: A batch item's name for other items' depends_on: 1-100 letters, digits, '_', '-', '.', ':'.
REF = re.compile(NAME_PATTERN)
REF_HINT = "must be 1-100 letters, digits, '_', '-', '.' or ':'"
MAX_PROGRESS_BYTES = 4096
MAX_BATCH_CLAIM = 100
MAX_BATCH_COMPLETE = 100
MAX_CLAIM_WAIT_SECONDS = 30
MAX_JOB_ID = 2**63 - 1
MAX_PROCESS_ID = 2**31 - 1   # worker_processes.id is a 32-bit integer on PostgreSQL
MAX_LEASE_SECONDS = 86400
MAX_UNIQUE_FOR_SECONDS = 604_800   # a dedupe window: up to a week
MAX_TIMEOUT_SECONDS = 86_400       # a run's timeout: up to a day
MAX_FLOW_LIMIT = 1_000_000   # jobs: a concurrency, rate or per-key limit
MAX_RATE_WINDOW_SECONDS = 86400
#: A concurrency key (a tenant, a customer, …) takes what an idempotency key takes: 1-200 printable ASCII.
CONCURRENCY_KEY, CONCURRENCY_KEY_HINT = IDEMPOTENCY_KEY, IDEMPOTENCY_KEY_HINT
LIST_LIMIT_DEFAULT = 50
LIST_LIMIT_MAX = 200


# --- what the parsers return ----------------------------------------------------------------------

@dataclass(frozen=True)
class ClaimRequest:
    """POST /jobs/claim: which types (None: any the key may claim), for how long, how many, how long to wait."""

    types: tuple[str, ...] | None
    lease_seconds: int | None  # None: QUEUELOG_LEASE_SECONDS
    limit: int | None  # None: one job, answered as a job; a number: up to that many, as {"jobs": [...]}
    wait: float  # long-poll seconds; 0 answers at once
    process_id: int | None = None  # the caller's registered worker process (POST /workers), if it names one


@dataclass(frozen=True)
class CompleteRequest:
    """POST /jobs/{id}/complete."""

    token: str
    result: dict | None


@dataclass(frozen=True)
class CompleteItem:
    """One item of POST /jobs/complete."""

    id: int
    token: str
    result: dict | None


@dataclass(frozen=True)
class FailRequest:
    """POST /jobs/{id}/fail."""

    token: str
    error: str | None
    retryable: bool


@dataclass(frozen=True)
class HeartbeatRequest:
    """POST /jobs/{id}/heartbeat."""

    token: str
    lease_seconds: int | None  # None: QUEUELOG_LEASE_SECONDS
    progress: dict | None = None  # the worker's progress report, stored as it is (None: unchanged)


@dataclass(frozen=True)
class ReleaseRequest:
    """POST /jobs/{id}/release."""

    token: str


@dataclass(frozen=True)
class ListQuery:
    """GET /jobs: the filters (None: any), the page size and where the page starts."""

    status: str | None
    type: str | None
    priority: int | None
    worker_id: str | None
    limit: int
    cursor: str | None


@dataclass(frozen=True)
class PageQuery:
    """A page of a list without filters (GET /schedules): its size and where it starts."""

    limit: int
    cursor: str | None


def _priority(fields: Fields) -> int:
    value = fields.body.get("priority")
    if value is None:
        return Priority.LOW.value
    if not isinstance(value, str) or value.lower() not in PRIORITY_BY_LABEL:
        fields.error("priority", "must be one of " + ", ".join(PRIORITY_LABELS))
        return Priority.LOW.value
    return PRIORITY_BY_LABEL[value.lower()]


_ENQUEUE_FIELDS = {"type", "payload", "priority", "max_retries", "idempotency_key", "run_at", "concurrency_key",
                   "unique_for", "unique_key", "expires_at", "timeout_seconds",
                   "depends_on", "run_when"}
#: A unique key takes what an idempotency key takes: 1-200 printable ASCII.
UNIQUE_KEY, UNIQUE_KEY_HINT = IDEMPOTENCY_KEY, IDEMPOTENCY_KEY_HINT
_TIME_HINT = "must be an RFC 3339 time with an offset, e.g. 2026-01-01T12:00:00Z"


def _time(fields: Fields, name: str) -> datetime | None:
    """An optional RFC 3339 time with an offset."""
    raw = fields.string(name)
    if raw is None:
        return None
    try:
        return parse_rfc3339(raw)
    except (ValueError, OverflowError):  # OverflowError: year 1 or 9999 pushed out of range by the offset
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


def _new_job(body: Any, prefix: str, header_key: str | None) -> tuple[NewJob | None, list[dict]]:
    if not isinstance(body, dict):
        return None, [{"pointer": prefix, "detail": "must be a JSON object"}]
    in_batch = prefix != ""   # a batch item: /jobs/<index>
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
    if fields.errors:
        return None, fields.errors
    return NewJob(type=job_type, payload=payload, priority=priority, max_retries=max_retries,
                  idempotency_key=key, run_at=run_at, concurrency_key=concurrency_key, unique_for=unique_for,
                  unique_key=unique_key, expires_at=expires_at, timeout_seconds=timeout, depends_on=depends_on,
                  run_when=run_when, ref=ref), []


def parse_enqueue() -> NewJob:
    job, errors = _new_job(json_body(), "", request.headers.get("Idempotency-Key"))
    if errors:
        raise InvalidRequest(errors)
    return job


def parse_enqueue_batch() -> list[NewJob]:
    fields = Fields(json_body(), {"jobs"})
    items = fields.body.get("jobs")
    if not isinstance(items, list) or not items:
        fields.error("jobs", "must be a non-empty list of jobs")
    elif len(items) > MAX_BATCH_WORKFLOW or (len(items) > MAX_BATCH_ENQUEUE and not _is_workflow(items)):
        fields.error("jobs", f"at most {MAX_BATCH_ENQUEUE} jobs per batch ({MAX_BATCH_WORKFLOW} when it is a "
                             "workflow: its items name refs or depends_on)")
    fields.done()
    parsed, errors = [], []
    for index, item in enumerate(items):
        job, item_errors = _new_job(item, f"/jobs/{index}", None)
        parsed.append(job)
        errors.extend(item_errors)
    if errors:
        raise InvalidRequest(errors)
    errors = _graph_problems(parsed)
    if errors:
        raise InvalidRequest(errors)
    return parsed


def _is_workflow(items: list) -> bool:
    return any(isinstance(item, dict) and ("ref" in item or "depends_on" in item) for item in items)


def _graph_problems(jobs: list[NewJob]) -> list[dict]:
    """A batch's refs: each unique, each named in a depends_on defined by an item, and no cycle among them."""
    errors: list[dict] = []
    index_of: dict[str, int] = {}
    for index, job in enumerate(jobs):
        if job.ref is None:
            continue
        if job.ref in index_of:
            errors.append({"pointer": f"/jobs/{index}/ref",
                           "detail": f"ref {job.ref!r} is already used by item {index_of[job.ref]}"})
        else:
            index_of[job.ref] = index
    for index, job in enumerate(jobs):
        for position, parent in enumerate(job.depends_on):
            if isinstance(parent, str) and parent not in index_of:
                errors.append({"pointer": f"/jobs/{index}/depends_on/{position}",
                               "detail": f"no item of this batch has ref {parent!r}"})
    if errors:
        return errors
    cycle = _find_cycle(jobs, index_of)
    if cycle is not None:
        index, position = cycle
        errors.append({"pointer": f"/jobs/{index}/depends_on/{position}",
                       "detail": f"depending on {jobs[index].depends_on[position]!r} makes a cycle: "
                                 "a workflow must be a DAG"})
    return errors


def _find_cycle(jobs: list[NewJob], index_of: dict[str, int]) -> tuple[int, int] | None:
    """An edge (item, position in its depends_on) on a cycle of the batch's refs, or None (Kahn's algorithm)."""
    children: dict[int, list[int]] = {}
    waiting_on = [0] * len(jobs)
    for index, job in enumerate(jobs):
        for parent in job.depends_on:
            if isinstance(parent, str):
                children.setdefault(index_of[parent], []).append(index)
                waiting_on[index] += 1
    ready = [index for index, count in enumerate(waiting_on) if count == 0]
    while ready:
        for child in children.get(ready.pop(), ()):
            waiting_on[child] -= 1
            if waiting_on[child] == 0:
                ready.append(child)
    for index in range(len(jobs)):
        if waiting_on[index]:
            # Left over: on a cycle, or downstream of one. Follow unfinished parents until one repeats.
            seen: dict[int, int] = {}
            current = index
            while current not in seen:
                position = next(p for p, parent in enumerate(jobs[current].depends_on)
                                if isinstance(parent, str) and waiting_on[index_of[parent]])
                seen[current] = position
                current = index_of[jobs[current].depends_on[position]]
            return current, seen[current]
    return None


def parse_claim(worker_name: str) -> ClaimRequest:
    fields = Fields(json_body(required=False), {"types", "lease_seconds", "worker_id", "limit", "wait", "process_id"})
    types = fields.body.get("types")
    if types is not None:
        if (not isinstance(types, list) or not types or len(types) > 100
                or not all(isinstance(t, str) and JOB_TYPE.fullmatch(t) for t in types)):
            fields.error("types", "must be a non-empty list of job type names")
            types = None
        else:
            # A type that can never be enqueued would make the worker wait forever: a typo says so at once.
            allowlist = set(current_app.config["JOB_TYPES"])
            for index, name in enumerate(types):
                if name not in allowlist:
                    fields.error(f"types/{index}", f"job type {name!r} is not on this server's QUEUELOG_JOB_TYPES")
    lease = fields.integer("lease_seconds", None, 1, MAX_LEASE_SECONDS)
    worker_id = fields.string("worker_id")
    if worker_id is not None and worker_id != worker_name:
        # V-04: the worker's identity is its key; a body may repeat it but never choose it.
        fields.error("worker_id", "must be this key's name (or left out): workers cannot choose their identity")
    limit = fields.integer("limit", None, 1, MAX_BATCH_CLAIM)
    # Long-poll: hold the request up to this many seconds for a job (0 = answer at once).
    wait = fields.number("wait", 0.0, 0, MAX_CLAIM_WAIT_SECONDS)
    process_id = fields.integer("process_id", None, 1, MAX_PROCESS_ID)
    fields.done()
    return ClaimRequest(types=None if types is None else tuple(types), lease_seconds=lease, limit=limit, wait=wait,
                        process_id=process_id)


def _token(fields: Fields) -> str:
    return fields.string("claim_token", required=True) or ""


def parse_complete() -> CompleteRequest:
    fields = Fields(json_body(), {"claim_token", "result"})
    token = _token(fields)
    result = fields.obj("result", None)
    fields.done()
    return CompleteRequest(token=token, result=result)


def parse_complete_batch() -> list[CompleteItem]:
    """``{"jobs": [{id, claim_token, result?}, ...]}`` (1-100 items) → a CompleteItem each, in order."""
    fields = Fields(json_body(), {"jobs"})
    items = fields.body.get("jobs")
    if not isinstance(items, list) or not items:
        fields.error("jobs", "must be a non-empty list of {id, claim_token, result} objects")
    elif len(items) > MAX_BATCH_COMPLETE:
        fields.error("jobs", f"at most {MAX_BATCH_COMPLETE} jobs per request")
    fields.done()
    parsed, errors = [], []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            errors.append({"pointer": f"/jobs/{index}", "detail": "must be a JSON object"})
            continue
        item_fields = Fields(item, {"id", "claim_token", "result"}, f"/jobs/{index}")
        job_id = item_fields.integer("id", None, 1, MAX_JOB_ID)
        if item.get("id") is None:
            item_fields.error("id", "is required")
        token = _token(item_fields)
        result = item_fields.obj("result", None)
        errors.extend(item_fields.errors)
        if not item_fields.errors:
            parsed.append(CompleteItem(id=job_id, token=token, result=result))
    if errors:
        raise InvalidRequest(errors)
    return parsed


def parse_fail() -> FailRequest:
    fields = Fields(json_body(), {"claim_token", "error", "retryable"})
    token = _token(fields)
    error = fields.string("error", nul_ok=True)  # scrub_error drops NUL: a worker's failure is never refused for it
    retryable = fields.boolean("retryable", True)
    fields.done()
    return FailRequest(token=token, error=error, retryable=retryable)


def parse_heartbeat() -> HeartbeatRequest:
    fields = Fields(json_body(), {"claim_token", "lease_seconds", "progress"})
    token = _token(fields)
    lease = fields.integer("lease_seconds", None, 1, MAX_LEASE_SECONDS)
    progress = fields.obj("progress", None)
    if progress is not None:
        size = len(json.dumps(progress, separators=(",", ":")).encode())
        if size > MAX_PROGRESS_BYTES:
            fields.error("progress", f"is {size} bytes as JSON; the limit is {MAX_PROGRESS_BYTES}")
    fields.done()
    return HeartbeatRequest(token=token, lease_seconds=lease, progress=progress)


def parse_release() -> ReleaseRequest:
    fields = Fields(json_body(), {"claim_token"})
    token = _token(fields)
    fields.done()
    return ReleaseRequest(token=token)


def parse_empty() -> None:
    """Actions without parameters still refuse unknown fields rather than ignore them."""
    Fields(json_body(required=False), set()).done()


def parse_job_query() -> float:
    """GET /jobs/{id}: ``wait`` seconds (0 < S ≤ 30) to hold the answer until the job is final; 0 without it."""
    _refuse_unknown_parameters({"wait"})
    raw = request.args.get("wait")
    if raw is None:
        return 0.0
    # Any number as JSON writes it ("12.3456", "1e1", "1.0E-4": a double as any client language prints it), but
    # not what only Python's float() reads ("nan", "inf", " 5", "1_0"). A value too small for a double reads as 0.
    wait = float(raw) if JSON_NUMBER.fullmatch(raw) else -1.0
    if not 0 < wait <= MAX_CLAIM_WAIT_SECONDS:
        raise InvalidRequest([{"pointer": "/query/wait",
                               "detail": f"must be a number of seconds above 0 and at most {MAX_CLAIM_WAIT_SECONDS}"}])
    return wait


def _unknown_parameters(known: set[str]) -> list[dict]:
    """An error for each query parameter the route does not take (a misspelt one must not be ignored)."""
    return [{"pointer": f"/query/{name}", "detail": "unknown parameter"} for name in sorted(set(request.args) - known)]


def _refuse_unknown_parameters(known: set[str]) -> None:
    errors = _unknown_parameters(known)
    if errors:
        raise InvalidRequest(errors)


def parse_list_query() -> ListQuery:
    args = request.args
    errors = _unknown_parameters({"status", "type", "priority", "limit", "cursor", "worker_id"})
    for name in ("type", "worker_id", "cursor"):
        if "\x00" in args.get(name, ""):
            errors.append({"pointer": f"/query/{name}", "detail": "must not contain NUL characters"})
    status = args.get("status")
    if status is not None and status not in STATUS_NAMES:
        errors.append({"pointer": "/query/status", "detail": "must be " + one_of(STATUS_NAMES)})
    priority = None
    if args.get("priority") is not None:
        priority = PRIORITY_BY_LABEL.get(args["priority"].lower())
        if priority is None:
            errors.append({"pointer": "/query/priority", "detail": "must be " + one_of(PRIORITY_LABELS)})
    limit = _page_limit(errors)
    if errors:
        raise InvalidRequest(errors)
    return ListQuery(status=status, type=args.get("type"), priority=priority, worker_id=args.get("worker_id"),
                     limit=limit, cursor=args.get("cursor"))


def parse_page_query() -> PageQuery:
    """GET /schedules: limit and cursor, read as GET /jobs reads them."""
    errors = _unknown_parameters({"limit", "cursor"})
    if "\x00" in request.args.get("cursor", ""):
        errors.append({"pointer": "/query/cursor", "detail": "must not contain NUL characters"})
    limit = _page_limit(errors)
    if errors:
        raise InvalidRequest(errors)
    return PageQuery(limit=limit, cursor=request.args.get("cursor"))


def _page_limit(errors: list[dict]) -> int:
    """The page size asked for (LIST_LIMIT_DEFAULT if none); a bad one adds its error and gives the default."""
    digits = request.args.get("limit")
    if digits is None:
        return LIST_LIMIT_DEFAULT
    # Digits only: int() would also take " 5", "+5", "5_0" and other scripts' digits.
    limit = int(digits) if re.fullmatch(r"[0-9]{1,4}", digits) else 0
    if not 1 <= limit <= LIST_LIMIT_MAX:
        errors.append({"pointer": "/query/limit", "detail": f"must be an integer from 1 to {LIST_LIMIT_MAX}"})
        return LIST_LIMIT_DEFAULT
    return limit



def parse_type_patch() -> dict[str, Any]:
    """PATCH /types/{type}: the fields to change, each validated (a limit is 1-1,000,000 or null)."""
    fields = Fields(json_body(), set(FLOW_FIELDS))
    body = fields.body
    wanted: dict[str, Any] = {}
    if not body:
        fields.errors.append({"pointer": "", "detail": "name at least one of " + ", ".join(FLOW_FIELDS)})
    if "paused" in body:
        if not isinstance(body["paused"], bool):
            fields.error("paused", "must be true or false")
        else:
            wanted["paused"] = body["paused"]
    for name in ("concurrency_limit", "key_concurrency_limit"):
        if name in body:
            wanted[name] = _limit(fields, body[name], name)
    if "rate_limit" in body:
        wanted["rate_limit"] = _rate_limit(fields, body["rate_limit"])
    if "unique_scope" in body:
        if body["unique_scope"] not in UNIQUE_SCOPES:
            fields.error("unique_scope", "must be " + one_of(UNIQUE_SCOPES))
        else:
            wanted["unique_scope"] = body["unique_scope"]
    fields.done()
    return wanted


def _limit(fields: Fields, value: Any, pointer: str) -> int | None:
    """A limit of jobs: null (none) or a whole number from 1 to MAX_FLOW_LIMIT."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)   # JSON has one number type: 3.0 is the integer 3
    if isinstance(value, bool) or not isinstance(value, int):
        fields.error(pointer, "must be an integer or null")
    elif not 1 <= value <= MAX_FLOW_LIMIT:
        fields.error(pointer, f"must be between 1 and {MAX_FLOW_LIMIT}, or null for no limit")
    else:
        return value
    return None


def _rate_limit(fields: Fields, value: Any) -> RateLimit | None:
    """``{"jobs": N, "per_seconds": S}`` or null."""
    if value is None:
        return None
    if not isinstance(value, dict):
        fields.error("rate_limit", 'must be {"jobs": N, "per_seconds": S} or null')
        return None
    inner = Fields(value, {"jobs", "per_seconds"}, "/rate_limit")
    for name in ("jobs", "per_seconds"):
        if value.get(name) is None:
            inner.error(name, "is required")
    jobs = _limit(inner, value.get("jobs"), "jobs") if value.get("jobs") is not None else None
    seconds = inner.integer("per_seconds", None, 1, MAX_RATE_WINDOW_SECONDS)
    fields.errors.extend(inner.errors)
    return RateLimit(jobs, seconds) if not inner.errors else None
