"""PATCH /types/{type}'s body: a job type's pause, flow-control limits and push target, each validated."""

from __future__ import annotations

from typing import Any

from flask import current_app

from ..core.patterns import one_of
from ..queue.flow import FIELDS as FLOW_FIELDS
from ..queue.flow import UNIQUE_SCOPES, RateLimit
from ..queue.push_targets import (
    DEFAULT_MODE,
    DEFAULT_TIMEOUT_SECONDS,
    MAX_TIMEOUT_SECONDS,
    MIN_TIMEOUT_SECONDS,
    MODES,
    PushTarget,
    url_problem,
)
from .body import Fields, json_body
from .limits import MAX_FLOW_LIMIT, MAX_RATE_WINDOW_SECONDS


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
    if "push" in body:
        wanted["push"] = _push(fields, body["push"])
    fields.done()
    return wanted


def _push(fields: Fields, value: Any) -> PushTarget | None:
    """``{"url": ..., "mode": "sync"|"async", "timeout_seconds": 1-900}`` or null (no push target)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        fields.error("push", 'must be {"url": ..., "mode": "sync" or "async", "timeout_seconds": N} or null')
        return None
    inner = Fields(value, {"url", "mode", "timeout_seconds"}, "/push")
    url = inner.string("url", required=True)
    if url is not None:
        problem = url_problem(url, current_app.config["PUSH_ALLOW_PRIVATE"])
        if problem:
            inner.error("url", problem)
    mode = value.get("mode", DEFAULT_MODE)
    if mode not in MODES:
        inner.error("mode", "must be " + one_of(MODES))
    timeout = inner.integer("timeout_seconds", DEFAULT_TIMEOUT_SECONDS, MIN_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS)
    fields.errors.extend(inner.errors)
    return PushTarget(url, mode, timeout) if not inner.errors else None


def _limit(fields: Fields, value: Any, pointer: str) -> int | None:
    """A limit of jobs: null (none) or a whole number from 1 to MAX_FLOW_LIMIT."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON has one number type: 3.0 is the integer 3
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
