"""The OpenAPI 3.1 description of the JSON API, served without auth at ``GET /openapi.json``.

The document is Python data built from the same constants the parsers use (schemas.py) and the
server's configuration (the job-type allowlist, the payload limit), so it describes this server as
it runs. tests/test_openapi.py checks that every route is documented; tests/test_schemathesis.py
checks that the answers match it.
"""
from __future__ import annotations

from typing import Any

from flask import Flask, current_app, jsonify

from ..states import RETRYABLE, spell
from . import bp, openapi_schedules, openapi_workers
from . import openapi_schemas as s
from .schemas import LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX

PRODUCER, WORKER, ADMIN = "producer", "worker", "admin"
# Generated clients group their functions by tag (openapi-python-client: one module per tag), so each
# operation carries the one tag of the part of the system that calls it.
JOBS, WORKERS, ADMIN_TAG, META = "jobs", "workers", "admin", "meta"
TAGS = [
    {"name": JOBS, "description": "Enqueue jobs and follow them: producers, and admins on any job."},
    {"name": WORKERS, "description": "Register worker processes and beat them; claim jobs, keep their leases and "
                                     "report how they ended: worker keys."},
    {"name": ADMIN_TAG, "description": f"Put {spell(RETRYABLE)} jobs back to work, and pause, resume and limit "
                                       "job types, manage schedules, and quiet or stop worker processes: admin keys."},
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
    429: {"Retry-After": "Whole seconds to wait: until the rate's window has room, a fixed 5 s hint for "
                         "max-pending (workers decide when a pending job leaves), or until the online worker "
                         "process that beat longest ago would be gone (sooner if one deregisters)."},
    503: {"Retry-After": "Seconds to wait before retrying."},
}
# Every authenticated route can answer these (414: a URL too long for the production server to read).
_ALWAYS = (401, 403, 414, 500, 503)
_WITH_BODY = (400, 413, 415, 422)
WITH_BODY = _WITH_BODY
# An enqueue can also meet its key's producer quota.
_ENQUEUE_ERRORS = (*_WITH_BODY, 429)
_QUOTAS = ("A producer key may carry quotas (at most N jobs in any S seconds, at most M pending or waiting): a request "
           "that would pass one is refused whole with 429. Only new jobs count; an idempotent replay does not.")
_HOLDER = ("Only the worker holding the job under this claim token may do this; a stale token, another "
           "worker or a job no longer running answers 409.")


def _headers(notes: dict[str, str]) -> dict[str, Any]:
    return {name: {"description": text, "schema": {"type": "string"}} for name, text in notes.items()}


def problem_response(status: int) -> dict[str, Any]:
    """An error answer: application/problem+json with the Problem schema."""
    response = {"description": _ERRORS[status],
                "content": {"application/problem+json": {"schema": s.ref("Problem")}}}
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


def operation(tag: str, operation_id: str, summary: str, roles: tuple[str, ...], responses: dict[int, Any],
              errors: tuple[int, ...], request: dict | None = None, parameters: list | None = None,
              description: str = "") -> dict[str, Any]:
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


def _query(name: str, schema: dict, description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


#: The page parameters of every paginated list (GET /jobs, GET /schedules), as schemas.py reads them.
PAGE_PARAMETERS = [
    _query("limit", {"type": "integer", "minimum": 1, "maximum": LIST_LIMIT_MAX, "default": LIST_LIMIT_DEFAULT},
           "Page size."),
    _query("cursor", s.text(), "next_cursor of the previous page, as it was: an opaque string. One this "
                               "server did not issue is a 422 (pointer /query/cursor)."),
]


def page_of(items: str, item_schema: dict) -> dict[str, Any]:
    """A page's answer: its items under ``items``, and next_cursor."""
    return s.closed({items: {"type": "array", "items": item_schema},
                     "next_cursor": {"type": ["string", "null"],
                                     "description": "Pass as cursor for the next page; null on the last."}},
                    required=[items, "next_cursor"])


JOB_ID = {"name": "job_id", "in": "path", "required": True, "description": "The job's id.",
          "schema": {"type": "integer", "minimum": 1, "maximum": s.MAX_JOB_ID}}


def _job_action(tag: str, name: str, summary: str, roles: tuple[str, ...], request: dict,
                description: str = "") -> dict[str, Any]:
    """POST /jobs/{job_id}/<name>: answers 200 with the job as it now is, 404 or 409."""
    return {"post": operation(tag, f"{name}Job", summary, roles, {200: job_response("The job as it now is.")},
                              errors=(*_WITH_BODY, 404, 409), request=request, parameters=[JOB_ID],
                              description=description)}


def type_paths() -> dict[str, Any]:
    """The /types routes: job types (queues) and their flow control, for admin keys."""
    type_name = {"name": "job_type", "in": "path", "required": True,
                 "description": "A job type of this server's QUEUELOG_JOB_TYPES (else 404).",
                 "schema": {"type": "string", "pattern": s.TYPE_PATTERN}}
    one_type = json_response("The type.", s.ref("JobType"))
    return {
        "/types": {"get": operation(
            ADMIN_TAG, "listTypes", "Every job type, with its flow control.", (ADMIN,),
            {200: json_response("Every type of QUEUELOG_JOB_TYPES, in its order.", s.closed(
                {"types": {"type": "array", "items": s.ref("JobType")}}, required=["types"]))}, errors=())},
        "/types/{job_type}": {
            "get": operation(ADMIN_TAG, "getType", "One job type, with its flow control.", (ADMIN,),
                             {200: one_type}, errors=(404,), parameters=[type_name]),
            "patch": operation(
                ADMIN_TAG, "updateType", "Pause or resume a type; set or clear its limits.", (ADMIN,),
                {200: json_response("The type as it now is.", s.ref("JobType"))},
                errors=(*_WITH_BODY, 404), request=body("TypePatchRequest"), parameters=[type_name],
                description="Send any of the fields; null clears a limit. A paused type's jobs are not claimed "
                            "(enqueue works, running jobs finish); limits hold across every worker and server. "
                            "Every change is written to the type's history with who made it."),
        },
        "/types/{job_type}/history": {"get": operation(
            ADMIN_TAG, "typeHistory", "Every change of the type's flow control, newest first.", (ADMIN,),
            {200: json_response("The changes.", s.closed(
                {"history": {"type": "array", "items": s.ref("TypeChange")}}, required=["history"]))},
            errors=(404,), parameters=[type_name])},
    }


def paths() -> dict[str, Any]:
    """Every route of the api blueprint."""
    list_parameters = [
        _query("status", {"type": "string", "enum": list(s.STATUSES)}, "Only jobs in this state."),
        _query("type", s.text(), "Only jobs of this type."),
        _query("priority", {"type": "string", "pattern": s.PRIORITY_PATTERN}, "Only jobs of this priority."),
        _query("worker_id", s.text(), "Only jobs held (or last held) by this worker key."),
        *PAGE_PARAMETERS,
    ]
    job_page = page_of("jobs", s.ref("Job"))
    idempotency_header = {"name": "Idempotency-Key", "in": "header", "required": False,
                          "schema": {"type": "string", "pattern": s.IDEMPOTENCY_KEY_PATTERN},
                          "description": "Same as the body's idempotency_key (they must agree if both are sent)."}
    location = {"Location": "The job's URL."}
    enqueued = links("getJob", "jobEvents", "cancelJob")
    claimed = {**links("getJob"), **links("completeJob", "failJob", "heartbeatJob", "releaseJob", with_token=True)}
    batch_jobs = s.closed({"jobs": {"type": "array", "items": {"oneOf": [s.ref("BatchJob"),
                                                                          s.ref("HiddenDedupeHit")]}}},
                          required=["jobs"])
    claimed_jobs = s.closed({"jobs": {"type": "array", "items": s.ref("ClaimedJob")}}, required=["jobs"])
    return {
        "/openapi.json": {"get": {
            "tags": [META], "operationId": "openapiDocument", "summary": "This document.", "security": [],
            "responses": {"200": json_response("The OpenAPI 3.1 document.", {"type": "object"})},
        }},
        "/jobs": {
            "post": operation(
                JOBS, "enqueueJob", "Enqueue a job.", (PRODUCER, ADMIN),
                {201: json_response("Created.", s.ref("EnqueuedJob"), location) | {"links": enqueued},
                 200: json_response("The idempotency key replayed an earlier, identical request, or the job fell "
                                    "in a dedupe window (unique_for; \"deduplicated\": true): that job. In a type's "
                                    "shared window held by a job this key may not see: only {\"deduplicated\": "
                                    "true} (HiddenDedupeHit), without Location.",
                                    {"oneOf": [s.ref("EnqueuedJob"), s.ref("HiddenDedupeHit")]},
                                    location) | {"links": enqueued}},
                errors=_ENQUEUE_ERRORS, request=body("EnqueueRequest"), parameters=[idempotency_header],
                description=_QUOTAS),
            "get": operation(
                JOBS, "listJobs", "List jobs, newest first.", (PRODUCER, ADMIN),
                {200: json_response("A page of jobs.", job_page)}, errors=(422,), parameters=list_parameters,
                description="A producer sees the jobs it enqueued, an admin all jobs."),
        },
        "/jobs/batch": {"post": operation(
            JOBS, "enqueueBatch", "Enqueue up to 500 jobs (a workflow: 1,000), all or nothing.", (PRODUCER, ADMIN),
            {201: json_response("At least one job was created.", batch_jobs),
             200: json_response("Every item replayed an earlier job or fell in a dedupe window.", batch_jobs)},
            errors=_ENQUEUE_ERRORS, request=body("BatchEnqueueRequest"),
            description="Each item has its own idempotency-key semantics; an item that falls in a dedupe window "
                        "(unique_for) answers, in its place, with the job holding it (\"deduplicated\": true; "
                        "nothing stored for it, its idempotency key included), or only with {\"deduplicated\": "
                        "true} when that job is one this key may not see (a type's shared window). An item may "
                        "name a ref, and others depend on it by that ref in depends_on: a whole workflow (a DAG) in "
                        "one request. A duplicate or unknown ref, or a cycle, is a 422 pointing at it, and so is a "
                        "depends_on entry naming the ref of an item answered by a job this key may not see. "
                        + _QUOTAS)},
        "/jobs/claim": {"post": operation(
            WORKERS, "claimJob", "Claim the next due job(s).", (WORKER,),
            {200: json_response("The claimed job, now running (with limit: {\"jobs\": [...]}).",
                                {"oneOf": [s.ref("ClaimedJob"), claimed_jobs]}) | {"links": claimed},
             204: {"description": "Nothing is claimable (after waiting up to wait seconds)."}},
            errors=(*_WITH_BODY, 404), request=body("ClaimRequest", required=False),
            description="Highest priority first; among equal priorities concurrency keys take turns, oldest "
                        "first within a key; only jobs whose run_at has come and whose expires_at has not, of "
                        "types not paused and within "
                        "their limits (a claim held back by them is answered 204 too). A claim "
                        "with wait that finds nothing due while this server process already holds as many "
                        "waiting claims as it may is answered at once: 503, type .../long-polls-full, with "
                        "Retry-After; nothing was claimed. A process_id that is not one of this key's worker "
                        "processes is a 404.")},
        "/jobs/complete": {"post": operation(
            WORKERS, "completeBatch", "Complete many held jobs in one request.", (WORKER,),
            {200: json_response("One outcome per item, in order.", s.ref("BatchCompleteResponse"))},
            errors=_WITH_BODY, request=body("BatchCompleteRequest"),
            description="Each item is checked like a single complete: 200 with the job, or 404/409 with a "
                        "problem.")},
        "/jobs/{job_id}": {"get": operation(
            JOBS, "getJob", "One job.", (PRODUCER, WORKER, ADMIN), {200: job_response("The job.")},
            errors=(404, 422, 503), parameters=[JOB_ID, _query(
                "wait", {"type": "number", "exclusiveMinimum": 0, "maximum": s.schemas.MAX_CLAIM_WAIT_SECONDS},
                "Hold the answer until the job is final (completed, failed, cancelled), at most this many "
                "seconds; then answer with the job as it is. Written as a JSON number (2.5, 0.0001, 1e1, "
                "1.0E-4); anything else, or a value out of range, is a 422 (pointer /query/wait).")],
            description="A producer sees its own jobs, a worker the job it holds, an admin every job. With "
                        "wait, a server process already holding as many waiting requests as it may answers "
                        "503 (type .../long-polls-full) with Retry-After.")},
        "/jobs/{job_id}/events": {"get": operation(
            JOBS, "jobEvents", "The job's event log, oldest first.", (PRODUCER, WORKER, ADMIN),
            {200: json_response("Every state change.", s.closed(
                {"events": {"type": "array", "items": s.ref("Event")}}, required=["events"]))},
            errors=(404,), parameters=[JOB_ID])},
        "/jobs/{job_id}/heartbeat": _job_action(
            WORKERS, "heartbeat", "Extend the lease, and report progress.", (WORKER,), body("HeartbeatRequest"),
            _HOLDER),
        "/jobs/{job_id}/complete": _job_action(
            WORKERS, "complete", "Mark the held job completed.", (WORKER,), body("CompleteRequest"), _HOLDER),
        "/jobs/{job_id}/fail": _job_action(
            WORKERS, "fail", "Record a failure: requeue while retries remain, else fail.", (WORKER,),
            body("FailRequest"), _HOLDER),
        "/jobs/{job_id}/release": _job_action(
            WORKERS, "release", "Give the held job back to pending without counting a failure.", (WORKER,),
            body("ReleaseRequest"), _HOLDER),
        "/jobs/{job_id}/cancel": _job_action(
            JOBS, "cancel", "Cancel a waiting or pending job.", (PRODUCER, ADMIN),
            body("EmptyRequest", required=False),
            "A producer may cancel its own jobs, an admin any. Its waiting children that need it completed are "
            "cancelled with it (dependency_failed)."),
        "/jobs/{job_id}/retry": _job_action(
            ADMIN_TAG, "retry", f"Put a {spell(RETRYABLE)} job back to pending, retries reset.", (ADMIN,),
            body("EmptyRequest", required=False)),
        **type_paths(),
        **openapi_schedules.paths(),
        **openapi_workers.paths(),
    }


def build_document(config) -> dict[str, Any]:
    """The whole OpenAPI document for an app with this configuration."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "queuelog",
            "version": "1",
            "description": "A persistent background job queue. Producers enqueue jobs, workers claim and "
                           "finish them, admins oversee. Every error is application/problem+json (RFC 9457).",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearerAuth": []}],
        "tags": TAGS,
        "paths": paths(),
        "components": {
            "securitySchemes": {"bearerAuth": {
                "type": "http", "scheme": "bearer",
                "description": "An API key from `flask keys create NAME --role producer|worker|admin`.",
            }},
            "schemas": s.components(list(config["JOB_TYPES"]), config["MAX_PAYLOAD_BYTES"]),
        },
    }


def document_for(app: Flask) -> dict[str, Any]:
    """The app's document, built once: the configuration it depends on does not change at run time."""
    if "queuelog_openapi" not in app.extensions:
        app.extensions["queuelog_openapi"] = build_document(app.config)
    return app.extensions["queuelog_openapi"]


@bp.get("/openapi.json")
def openapi_document():
    """The OpenAPI 3.1 document; public, so tools and clients can read it without a key."""
    return jsonify(document_for(current_app))
