"""The bodies a worker sends about the jobs it takes: claim, complete (one or many), fail, heartbeat and
release, each parsed into a frozen value (or an InvalidRequest with a JSON pointer per problem).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from flask import current_app

from ..core.errors import InvalidRequest
from ..core.patterns import JOB_TYPE
from .body import Fields, json_body
from .limits import (
    MAX_BATCH_CLAIM,
    MAX_BATCH_COMPLETE,
    MAX_CLAIM_WAIT_SECONDS,
    MAX_JOB_ID,
    MAX_LEASE_SECONDS,
    MAX_PROCESS_ID,
    MAX_PROGRESS_BYTES,
)

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


def parse_claim(worker_name: str) -> ClaimRequest:
    fields = Fields(json_body(required=False), {"types", "lease_seconds", "worker_id", "limit", "wait", "process_id"})
    types = fields.body.get("types")
    if types is not None:
        if (
            not isinstance(types, list)
            or not types
            or len(types) > 100
            or not all(isinstance(t, str) and JOB_TYPE.fullmatch(t) for t in types)
        ):
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
    return ClaimRequest(
        types=None if types is None else tuple(types),
        lease_seconds=lease,
        limit=limit,
        wait=wait,
        process_id=process_id,
    )


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
