"""Request bodies: one parser per body, each returning a frozen value or raising InvalidRequest.

Unknown fields are refused, so a client can never mass-assign ``status``, ``retry_count`` or
``worker_id``; every problem is reported at once with a JSON pointer to it.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from flask import current_app, request
from werkzeug.exceptions import RequestEntityTooLarge

from ..clock import parse_rfc3339
from ..errors import InvalidRequest
from ..patterns import (IDEMPOTENCY_KEY, IDEMPOTENCY_KEY_HINT, JOB_TYPE, JOB_TYPE_HINT, PRIORITY_BY_LABEL,
                        PRIORITY_LABELS, Priority, one_of)
from ..queue import NewJob
from ..states import STATUS_NAMES
from . import strict_json

MAX_RETRIES_LIMIT = 100
MAX_BATCH_ENQUEUE = 500
MAX_BATCH_CLAIM = 100
MAX_BATCH_COMPLETE = 100
MAX_CLAIM_WAIT_SECONDS = 30
MAX_JOB_ID = 2**63 - 1
MAX_LEASE_SECONDS = 86400
# Deeper documents would hit Python's recursion limit somewhere between parsing and answering (a 500).
MAX_JSON_DEPTH = 64
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


class MalformedJSON(Exception):
    """The body is not JSON at all (400), as opposed to JSON with wrong fields (422)."""

    def __init__(self, detail: str, errors: list[dict] | None = None):
        super().__init__(detail)
        self.errors = errors  # pointers to the offending values, when they can be named


class NotJSONMediaType(Exception):
    """A body sent as something other than JSON (415): it is refused, never guessed at."""


def _whole_body() -> bytes:
    """The request body, or RequestEntityTooLarge (413) when it is over MAX_CONTENT_LENGTH, however it was sent."""
    raw = request.get_data(cache=True)
    limit = request.max_content_length
    if request.content_length is None and limit is not None and len(raw) >= limit:
        # Sent without a Content-Length (chunked), a body is read only up to the limit, and Werkzeug hands
        # over those bytes as if they were all: one byte more from the server's stream tells a body cut at
        # the limit from one of exactly that size.
        if request.environ["wsgi.input"].read(1):
            raise RequestEntityTooLarge()
    return raw


def json_body(required: bool = True) -> dict:
    """The request body as a JSON object; an empty body counts as {} where that is allowed."""
    raw = _whole_body()
    if not raw.strip():
        if required:
            raise InvalidRequest([{"pointer": "", "detail": "a JSON object body is required"}])
        # Nothing to interpret, so no Content-Type is needed: `curl -X POST …/claim` sends none.
        return {}
    if not request.is_json:
        # application/json, with parameters such as charset, or an application/…+json type (Flask's rule).
        # A form or text body that happens to parse as JSON is refused rather than guessed at: its sender
        # said it was something else.
        sent = request.headers.get("Content-Type", "").strip()
        raise NotJSONMediaType(f"the body must be sent as Content-Type: application/json, not {sent!r}" if sent
                               else "the body has no Content-Type; send it as Content-Type: application/json")
    try:
        # NaN, Infinity and numbers beyond a double (1e400) would be echoed back as invalid JSON.
        body = strict_json.loads(raw)
    except strict_json.NotStrictJSON as exc:
        raise MalformedJSON(f"the body is not valid JSON: {exc}", exc.errors) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedJSON(f"the body is not valid JSON: {exc}") from None
    except RecursionError:
        raise MalformedJSON(f"the body is nested too deeply (the limit is {MAX_JSON_DEPTH} levels)") from None
    if not isinstance(body, dict):
        raise InvalidRequest([{"pointer": "", "detail": "the body must be a JSON object"}])
    return body


def _too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when objects/arrays nest more than ``limit`` levels (checked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


class _Fields:
    """Collects field problems so a client learns about all of them in one response."""

    def __init__(self, body: dict, allowed: set[str], prefix: str = ""):
        self.body, self.prefix, self.errors = body, prefix, []
        for name in body:
            if name not in allowed:
                self.error(name, "unknown field")

    def error(self, name: str, detail: str) -> None:
        self.errors.append({"pointer": f"{self.prefix}/{name}", "detail": detail})

    def string(self, name: str, required=False, pattern: re.Pattern | None = None, hint: str = "",
               nul_ok: bool = False) -> str | None:
        value = self.body.get(name)
        if value is None:
            if required:
                self.error(name, "is required")
            return None
        if not isinstance(value, str):
            self.error(name, "must be a string")
            return None
        if "\x00" in value and not nul_ok:
            # PostgreSQL text cannot hold NUL; refusing it here keeps both databases alike (not a 500).
            self.error(name, "must not contain NUL characters")
            return None
        if _lone_surrogates(value):
            # Half a UTF-16 pair (JSON "\ud800") cannot be encoded for either database: 422, not a 500.
            # A worker's error text is cleaned instead, like its NULs.
            if not nul_ok:
                self.error(name, "must not contain unpaired surrogates")
                return None
            value = value.encode("utf-8", "replace").decode("utf-8")
        # fullmatch, not match: "$" also matches before a trailing newline ("email\n" passed).
        if pattern is not None and not pattern.fullmatch(value):
            self.error(name, hint or "has an invalid format")
            return None
        return value

    def integer(self, name: str, default: int | None, low: int, high: int) -> int | None:
        value = self.body.get(name)
        if value is None:
            return default
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # JSON has one number type: 3.0 is the integer 3 (as JSON Schema says)
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(name, "must be an integer")
            return default
        if not low <= value <= high:
            self.error(name, f"must be between {low} and {high}")
            return default
        return value

    def number(self, name: str, default: float | None, low: float, high: float) -> float | None:
        value = self.body.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.error(name, "must be a number")
            return default
        if not low <= value <= high:
            self.error(name, f"must be between {low} and {high}")
            return default
        return float(value)

    def boolean(self, name: str, default: bool) -> bool:
        value = self.body.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.error(name, "must be true or false")
            return default
        return value

    def obj(self, name: str, default: Any) -> dict | None:
        value = self.body.get(name)
        if value is None:
            return default
        if not isinstance(value, dict):
            self.error(name, "must be a JSON object")
            return default
        if _too_deep(value):
            self.error(name, f"is nested more than {MAX_JSON_DEPTH} levels deep")
            return default
        return value

    def done(self) -> None:
        if self.errors:
            raise InvalidRequest(self.errors)


def _lone_surrogates(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _priority(fields: _Fields) -> int:
    value = fields.body.get("priority")
    if value is None:
        return Priority.LOW.value
    if not isinstance(value, str) or value.lower() not in PRIORITY_BY_LABEL:
        fields.error("priority", "must be one of " + ", ".join(PRIORITY_LABELS))
        return Priority.LOW.value
    return PRIORITY_BY_LABEL[value.lower()]


_ENQUEUE_FIELDS = {"type", "payload", "priority", "max_retries", "idempotency_key", "run_at"}


def _new_job(body: Any, prefix: str, header_key: str | None) -> tuple[NewJob | None, list[dict]]:
    if not isinstance(body, dict):
        return None, [{"pointer": prefix, "detail": "must be a JSON object"}]
    fields = _Fields(body, _ENQUEUE_FIELDS, prefix)
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
    run_at = None
    raw_run_at = fields.string("run_at")
    if raw_run_at is not None:
        try:
            run_at = parse_rfc3339(raw_run_at)
        except (ValueError, OverflowError):  # OverflowError: year 1 or 9999 pushed out of range by the offset
            fields.error("run_at", "must be an RFC 3339 time with an offset, e.g. 2026-01-01T12:00:00Z")
    if fields.errors:
        return None, fields.errors
    return NewJob(type=job_type, payload=payload, priority=priority, max_retries=max_retries,
                  idempotency_key=key, run_at=run_at), []


def parse_enqueue() -> NewJob:
    job, errors = _new_job(json_body(), "", request.headers.get("Idempotency-Key"))
    if errors:
        raise InvalidRequest(errors)
    return job


def parse_enqueue_batch() -> list[NewJob]:
    fields = _Fields(json_body(), {"jobs"})
    items = fields.body.get("jobs")
    if not isinstance(items, list) or not items:
        fields.error("jobs", "must be a non-empty list of jobs")
    elif len(items) > MAX_BATCH_ENQUEUE:
        fields.error("jobs", f"at most {MAX_BATCH_ENQUEUE} jobs per batch")
    fields.done()
    parsed, errors = [], []
    for index, item in enumerate(items):
        job, item_errors = _new_job(item, f"/jobs/{index}", None)
        parsed.append(job)
        errors.extend(item_errors)
    if errors:
        raise InvalidRequest(errors)
    return parsed


def parse_claim(worker_name: str) -> ClaimRequest:
    fields = _Fields(json_body(required=False), {"types", "lease_seconds", "worker_id", "limit", "wait"})
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
    fields.done()
    return ClaimRequest(types=None if types is None else tuple(types), lease_seconds=lease, limit=limit, wait=wait)


def _token(fields: _Fields) -> str:
    return fields.string("claim_token", required=True) or ""


def parse_complete() -> CompleteRequest:
    fields = _Fields(json_body(), {"claim_token", "result"})
    token = _token(fields)
    result = fields.obj("result", None)
    fields.done()
    return CompleteRequest(token=token, result=result)


def parse_complete_batch() -> list[CompleteItem]:
    """``{"jobs": [{id, claim_token, result?}, ...]}`` (1-100 items) → a CompleteItem each, in order."""
    fields = _Fields(json_body(), {"jobs"})
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
        item_fields = _Fields(item, {"id", "claim_token", "result"}, f"/jobs/{index}")
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
    fields = _Fields(json_body(), {"claim_token", "error", "retryable"})
    token = _token(fields)
    error = fields.string("error", nul_ok=True)  # scrub_error drops NUL: a worker's failure is never refused for it
    retryable = fields.boolean("retryable", True)
    fields.done()
    return FailRequest(token=token, error=error, retryable=retryable)


def parse_heartbeat() -> HeartbeatRequest:
    fields = _Fields(json_body(), {"claim_token", "lease_seconds"})
    token = _token(fields)
    lease = fields.integer("lease_seconds", None, 1, MAX_LEASE_SECONDS)
    fields.done()
    return HeartbeatRequest(token=token, lease_seconds=lease)


def parse_release() -> ReleaseRequest:
    fields = _Fields(json_body(), {"claim_token"})
    token = _token(fields)
    fields.done()
    return ReleaseRequest(token=token)


def parse_empty() -> None:
    """Actions without parameters still refuse unknown fields rather than ignore them."""
    _Fields(json_body(required=False), set()).done()


def parse_list_query() -> ListQuery:
    args = request.args
    errors = []
    unknown = set(args) - {"status", "type", "priority", "limit", "cursor", "worker_id"}
    for name in sorted(unknown):
        errors.append({"pointer": f"/query/{name}", "detail": "unknown parameter"})
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
    limit = LIST_LIMIT_DEFAULT
    if args.get("limit") is not None:
        # Digits only: int() would also take " 5", "+5", "5_0" and other scripts' digits.
        digits = args["limit"]
        limit = int(digits) if re.fullmatch(r"[0-9]{1,4}", digits) else 0
        if not 1 <= limit <= LIST_LIMIT_MAX:
            limit = LIST_LIMIT_DEFAULT
            errors.append({"pointer": "/query/limit", "detail": f"must be an integer from 1 to {LIST_LIMIT_MAX}"})
    if errors:
        raise InvalidRequest(errors)
    return ListQuery(status=status, type=args.get("type"), priority=priority, worker_id=args.get("worker_id"),
                     limit=limit, cursor=args.get("cursor"))

