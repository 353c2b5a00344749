"""Query parameters: GET /jobs's filters and page, GET /schedules's page, GET /jobs/{id}'s wait.

A parameter a route does not take is refused (a misspelt one must not be ignored), each problem with a
JSON pointer under /query.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from flask import request

from ..core.errors import InvalidRequest
from ..core.patterns import JSON_NUMBER, PRIORITY_BY_LABEL, PRIORITY_LABELS, one_of
from ..states import STATUS_NAMES
from .limits import LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX, MAX_CLAIM_WAIT_SECONDS


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
        raise InvalidRequest(
            [
                {
                    "pointer": "/query/wait",
                    "detail": f"must be a number of seconds above 0 and at most {MAX_CLAIM_WAIT_SECONDS}",
                }
            ]
        )
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
    return ListQuery(
        status=status,
        type=args.get("type"),
        priority=priority,
        worker_id=args.get("worker_id"),
        limit=limit,
        cursor=args.get("cursor"),
    )


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
