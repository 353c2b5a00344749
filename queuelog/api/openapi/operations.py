"""The building blocks of the document's operations: roles and tags, every error answer, JSON answers and
bodies, links, query and page parameters. Built on shapes.py only.
"""

from __future__ import annotations

from typing import Any

from ...states import RETRYABLE, spell
from ..limits import LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX
from . import shapes as s

PRODUCER, WORKER, ADMIN = "producer", "worker", "admin"
# Generated clients group their functions by tag (openapi-python-client: one module per tag), so each
# operation carries the one tag of the part of the system that calls it.
JOBS, WORKERS, ADMIN_TAG, META = "jobs", "workers", "admin", "meta"
TAGS = [
    {"name": JOBS, "description": "Enqueue jobs and follow them: producers, and admins on any job."},
    {
        "name": WORKERS,
        "description": "Register worker processes and beat them; claim jobs, keep their leases and "
        "report how they ended: worker keys.",
    },
    {
        "name": ADMIN_TAG,
        "description": f"Put {spell(RETRYABLE)} jobs back to work, and pause, resume and limit "
        "job types, manage schedules, and quiet or stop worker processes: admin keys.",
    },
    {"name": META, "description": "This document, for tools and client generators; no key needed."},
]

_ERRORS = {
    400: "The body is not valid JSON, or holds a number beyond a double's finite range (1e400).",
    401: "No API key, or an unknown or revoked one (see WWW-Authenticate).",
    403: "The key's role, type limits or priority ceiling do not allow this.",
    404: "No such job, or one this key may not see; no such job type or schedule on this server; no such "
    "worker process, or another key's.",
    409: "The job is not in a state that allows this (job_status says which); a schedule name in use, or the "
    "server's most schedules reached (type .../max-schedules-reached, with limit and schedules); a worker "
    "process gone, or already told to stop.",
    413: "The request body is larger than 1 MiB.",
    414: "The request line (method and URL) is longer than gunicorn's limit_request_line (4094 bytes by default): "
    "answered by the production server before the app reads the request.",
    415: "A body sent with a Content-Type other than application/json (or none).",
    422: "Wrong, missing or unknown fields (errors lists each with a JSON pointer).",
    429: "The key's producer quota refuses these jobs: over its enqueue rate (type .../enqueue-rate-exceeded) "
    "or at its most pending jobs, waiting ones included (.../max-pending-reached). Nothing was stored; a "
    "batch is refused whole. quota, limit, requested and in_window or pending give the numbers. Or a "
    "worker key has its most worker processes online (.../max-worker-processes-reached, with limit and "
    "online); nothing was registered. Retry after Retry-After seconds.",
    500: "An unexpected error; it has been logged (never a traceback in the body).",
    503: "The database is not answering; retry after Retry-After seconds.",
}
_HEADER_NOTES = {
    401: {"WWW-Authenticate": "Bearer challenge."},
    429: {
        "Retry-After": "Whole seconds to wait: until the rate's window has room, a fixed 5 s hint for "
        "max-pending (workers decide when a pending job leaves), or until the online worker "
        "process that beat longest ago would be gone (sooner if one deregisters)."
    },
    503: {"Retry-After": "Seconds to wait before retrying."},
}
# Every authenticated route can answer these (414: a URL too long for the production server to read).
_ALWAYS = (401, 403, 414, 500, 503)
WITH_BODY = (400, 413, 415, 422)


def _headers(notes: dict[str, str]) -> dict[str, Any]:
    return {name: {"description": text, "schema": {"type": "string"}} for name, text in notes.items()}


def problem_response(status: int) -> dict[str, Any]:
    """An error answer: application/problem+json with the Problem schema."""
    response = {"description": _ERRORS[status], "content": {"application/problem+json": {"schema": s.ref("Problem")}}}
    if status in _HEADER_NOTES:
        response["headers"] = _headers(_HEADER_NOTES[status])
    return response


def json_response(description: str, schema: dict, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """A successful JSON answer."""
    response = {"description": description, "content": {"application/json": {"schema": schema}}}
    if headers:
        response["headers"] = _headers(headers)
    return response


def job_response(description: str) -> dict[str, Any]:
    return json_response(description, s.ref("Job"))


def links(*operation_ids: str, with_token: bool = False) -> dict[str, Any]:
    """OpenAPI links: what a client does next with the job in this answer (its id, and its claim token)."""
    result = {}
    for operation_id in operation_ids:
        link: dict[str, Any] = {"operationId": operation_id, "parameters": {"job_id": "$response.body#/id"}}
        if with_token:
            link["requestBody"] = {"claim_token": "$response.body#/claim_token"}
        result[operation_id[0].upper() + operation_id[1:]] = link
    return result


def body(schema_name: str, required: bool = True) -> dict[str, Any]:
    """A JSON request body described by a component schema."""
    return {"required": required, "content": {"application/json": {"schema": s.ref(schema_name)}}}


def operation(
    tag: str,
    operation_id: str,
    summary: str,
    roles: tuple[str, ...],
    responses: dict[int, Any],
    errors: tuple[int, ...],
    request: dict | None = None,
    parameters: list | None = None,
    description: str = "",
) -> dict[str, Any]:
    """One operation: who may call it, what it takes, and every answer it can give."""
    who = ", ".join(roles)
    op: dict[str, Any] = {
        "tags": [tag],
        "operationId": operation_id,
        "summary": summary,
        "description": (description + "\n\n" if description else "") + f"Keys with the role: {who}.",
        "x-roles": list(roles),
        "responses": {str(code): answer for code, answer in responses.items()},
    }
    for status in sorted(set(errors) | set(_ALWAYS)):
        op["responses"][str(status)] = problem_response(status)
    if request is not None:
        op["requestBody"] = request
    if parameters:
        op["parameters"] = parameters
    return op


def query(name: str, schema: dict, description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


#: The page parameters of every paginated list (GET /jobs, GET /schedules), as api/query_params.py reads them.
PAGE_PARAMETERS = [
    query(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": LIST_LIMIT_MAX, "default": LIST_LIMIT_DEFAULT},
        "Page size.",
    ),
    query(
        "cursor",
        s.text(),
        "next_cursor of the previous page, as it was: an opaque string. One this "
        "server did not issue is a 422 (pointer /query/cursor).",
    ),
]


def page_of(items: str, item_schema: dict) -> dict[str, Any]:
    """A page's answer: its items under ``items``, and next_cursor."""
    return s.closed(
        {
            items: {"type": "array", "items": item_schema},
            "next_cursor": {
                "type": ["string", "null"],
                "description": "Pass as cursor for the next page; null on the last.",
            },
        },
        required=[items, "next_cursor"],
    )


JOB_ID = {
    "name": "job_id",
    "in": "path",
    "required": True,
    "description": "The job's id.",
    "schema": {"type": "integer", "minimum": 1, "maximum": s.MAX_JOB_ID},
}
