"""The OpenAPI description of /jobs: what producers, workers and admins do with jobs."""

from __future__ import annotations

from typing import Any

from ...core.trace_context import TRACEPARENT_MAX, TRACEPARENT_PATTERN, TRACESTATE_MAX, TRACESTATE_PATTERN
from ...states import RETRYABLE, spell
from ..limits import MAX_CLAIM_WAIT_SECONDS
from . import shapes as s
from .operations import (
    ADMIN,
    ADMIN_TAG,
    JOB_ID,
    JOBS,
    PAGE_PARAMETERS,
    PRODUCER,
    WITH_BODY,
    WORKER,
    WORKERS,
    body,
    job_response,
    json_response,
    links,
    operation,
    page_of,
    query,
)

# An enqueue can also meet its key's producer quota.
_ENQUEUE_ERRORS = (*WITH_BODY, 429)
_QUOTAS = (
    "A producer key may carry quotas (at most N jobs in any S seconds, at most M pending or waiting): a request "
    "that would pass one is refused whole with 429. Only new jobs count; an idempotent replay does not."
)
_HOLDER = (
    "Only the worker holding the job under this claim token may do this; a stale token, another "
    "worker or a job no longer running answers 409."
)


def _job_action(
    tag: str,
    name: str,
    summary: str,
    roles: tuple[str, ...],
    request: dict,
    description: str = "",
    token_alone: bool = False,
) -> dict[str, Any]:
    """POST /jobs/{job_id}/<name>: answers 200 with the job as it now is, 404 or 409. ``token_alone``: a push
    target may call it with no key, its claim token being the capability."""
    action = operation(
        tag,
        f"{name}Job",
        summary,
        roles,
        {200: job_response("The job as it now is.")},
        errors=(*WITH_BODY, 404, 409),
        request=request,
        parameters=[JOB_ID],
        description=description + (_TOKEN_ALONE if token_alone else ""),
    )
    if token_alone:
        action["security"] = [{"bearerAuth": []}, {}]
    return {"post": action}


_TOKEN_ALONE = (
    "\n\nA push target (a job type with an async push target) calls this with no Authorization header: the "
    "claim_token it was delivered with is its capability, for the job's current attempt only (a token of an "
    "attempt since reaped: 409). Without a key, a job that was not pushed answers 401."
)


def paths() -> dict[str, Any]:
    """The /jobs routes."""
    list_parameters = [
        query("status", {"type": "string", "enum": list(s.STATUSES)}, "Only jobs in this state."),
        query("type", s.text(), "Only jobs of this type."),
        query("priority", {"type": "string", "pattern": s.PRIORITY_PATTERN}, "Only jobs of this priority."),
        query("worker_id", s.text(), "Only jobs held (or last held) by this worker key."),
        *PAGE_PARAMETERS,
    ]
    job_page = page_of("jobs", s.ref("Job"))
    idempotency_header = {
        "name": "Idempotency-Key",
        "in": "header",
        "required": False,
        "schema": {"type": "string", "pattern": s.IDEMPOTENCY_KEY_PATTERN},
        "description": "Same as the body's idempotency_key (they must agree if both are sent).",
    }
    trace_headers = [
        {
            "name": "traceparent",
            "in": "header",
            "required": False,
            "schema": {"type": "string", "maxLength": TRACEPARENT_MAX, "pattern": TRACEPARENT_PATTERN},
            "description": "W3C trace context for the jobs of the request that name none in their body "
            "(malformed: 422, pointer /traceparent).",
        },
        {
            "name": "tracestate",
            "in": "header",
            "required": False,
            "schema": {"type": "string", "maxLength": TRACESTATE_MAX, "pattern": TRACESTATE_PATTERN},
            "description": "W3C tracestate beside the traceparent header (dropped without one; malformed: 422, "
            "pointer /tracestate).",
        },
    ]
    location = {"Location": "The job's URL."}
    enqueued = links("getJob", "jobEvents", "cancelJob")
    claimed = {**links("getJob"), **links("completeJob", "failJob", "heartbeatJob", "releaseJob", with_token=True)}
    batch_jobs = s.closed(
        {"jobs": {"type": "array", "items": {"oneOf": [s.ref("BatchJob"), s.ref("HiddenDedupeHit")]}}},
        required=["jobs"],
    )
    claimed_jobs = s.closed({"jobs": {"type": "array", "items": s.ref("ClaimedJob")}}, required=["jobs"])
    return {
        "/jobs": {
            "post": operation(
                JOBS,
                "enqueueJob",
                "Enqueue a job.",
                (PRODUCER, ADMIN),
                {
                    201: json_response("Created.", s.ref("EnqueuedJob"), location) | {"links": enqueued},
                    200: json_response(
                        "The idempotency key replayed an earlier, identical request, or the job fell "
                        'in a dedupe window (unique_for; "deduplicated": true): that job. In a type\'s '
                        'shared window held by a job this key may not see: only {"deduplicated": '
                        "true} (HiddenDedupeHit), without Location.",
                        {"oneOf": [s.ref("EnqueuedJob"), s.ref("HiddenDedupeHit")]},
                        location,
                    )
                    | {"links": enqueued},
                },
                errors=_ENQUEUE_ERRORS,
                request=body("EnqueueRequest"),
                parameters=[idempotency_header, *trace_headers],
                description=_QUOTAS,
            ),
            "get": operation(
                JOBS,
                "listJobs",
                "List jobs, newest first.",
                (PRODUCER, ADMIN),
                {200: json_response("A page of jobs.", job_page)},
                errors=(422,),
                parameters=list_parameters,
                description="A producer sees the jobs it enqueued, an admin all jobs.",
            ),
        },
        "/jobs/batch": {
            "post": operation(
                JOBS,
                "enqueueBatch",
                "Enqueue up to 500 jobs (a workflow: 1,000), all or nothing.",
                (PRODUCER, ADMIN),
                {
                    201: json_response("At least one job was created.", batch_jobs),
                    200: json_response("Every item replayed an earlier job or fell in a dedupe window.", batch_jobs),
                },
                errors=_ENQUEUE_ERRORS,
                request=body("BatchEnqueueRequest"),
                parameters=trace_headers,
                description="Each item has its own idempotency-key semantics; an item that falls in a dedupe window "
                '(unique_for) answers, in its place, with the job holding it ("deduplicated": true; '
                'nothing stored for it, its idempotency key included), or only with {"deduplicated": '
                "true} when that job is one this key may not see (a type's shared window). An item may "
                "name a ref, and others depend on it by that ref in depends_on: a whole workflow (a DAG) in "
                "one request. A duplicate or unknown ref, or a cycle, is a 422 pointing at it, and so is a "
                "depends_on entry naming the ref of an item answered by a job this key may not see. " + _QUOTAS,
            )
        },
        "/jobs/claim": {
            "post": operation(
                WORKERS,
                "claimJob",
                "Claim the next due job(s).",
                (WORKER,),
                {
                    200: json_response(
                        'The claimed job, now running (with limit: {"jobs": [...]}).',
                        {"oneOf": [s.ref("ClaimedJob"), claimed_jobs]},
                    )
                    | {"links": claimed},
                    204: {"description": "Nothing is claimable (after waiting up to wait seconds)."},
                },
                errors=(*WITH_BODY, 404),
                request=body("ClaimRequest", required=False),
                description="Highest priority first; among equal priorities concurrency keys take turns, oldest "
                "first within a key; only jobs whose run_at has come and whose expires_at has not, of "
                "types not paused and within "
                "their limits (a claim held back by them is answered 204 too). A claim "
                "with wait that finds nothing due while this server process already holds as many "
                "waiting claims as it may is answered at once: 503, type .../long-polls-full, with "
                "Retry-After; nothing was claimed. A process_id that is not one of this key's worker "
                "processes is a 404.",
            )
        },
        "/jobs/complete": {
            "post": operation(
                WORKERS,
                "completeBatch",
                "Complete many held jobs in one request.",
                (WORKER,),
                {200: json_response("One outcome per item, in order.", s.ref("BatchCompleteResponse"))},
                errors=WITH_BODY,
                request=body("BatchCompleteRequest"),
                description="Each item is checked like a single complete: 200 with the job, or 404/409 with a problem.",
            )
        },
        "/jobs/{job_id}": {
            "get": operation(
                JOBS,
                "getJob",
                "One job.",
                (PRODUCER, WORKER, ADMIN),
                {200: job_response("The job.")},
                errors=(404, 422, 503),
                parameters=[
                    JOB_ID,
                    query(
                        "wait",
                        {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_CLAIM_WAIT_SECONDS},
                        "Hold the answer until the job is final (completed, failed, cancelled), at most this many "
                        "seconds; then answer with the job as it is. Written as a JSON number (2.5, 0.0001, 1e1, "
                        "1.0E-4); anything else, or a value out of range, is a 422 (pointer /query/wait).",
                    ),
                ],
                description="A producer sees its own jobs, a worker the job it holds, an admin every job. With "
                "wait, a server process already holding as many waiting requests as it may answers "
                "503 (type .../long-polls-full) with Retry-After.",
            )
        },
        "/jobs/{job_id}/events": {
            "get": operation(
                JOBS,
                "jobEvents",
                "The job's event log, oldest first.",
                (PRODUCER, WORKER, ADMIN),
                {
                    200: json_response(
                        "Every state change.",
                        s.closed({"events": {"type": "array", "items": s.ref("Event")}}, required=["events"]),
                    )
                },
                errors=(404,),
                parameters=[JOB_ID],
            )
        },
        "/jobs/{job_id}/heartbeat": _job_action(
            WORKERS,
            "heartbeat",
            "Extend the lease, and report progress.",
            (WORKER,),
            body("HeartbeatRequest"),
            _HOLDER,
            token_alone=True,
        ),
        "/jobs/{job_id}/complete": _job_action(
            WORKERS,
            "complete",
            "Mark the held job completed.",
            (WORKER,),
            body("CompleteRequest"),
            _HOLDER,
            token_alone=True,
        ),
        "/jobs/{job_id}/fail": _job_action(
            WORKERS,
            "fail",
            "Record a failure: requeue while retries remain, else fail.",
            (WORKER,),
            body("FailRequest"),
            _HOLDER,
            token_alone=True,
        ),
        "/jobs/{job_id}/release": _job_action(
            WORKERS,
            "release",
            "Give the held job back to pending without counting a failure.",
            (WORKER,),
            body("ReleaseRequest"),
            _HOLDER,
        ),
        "/jobs/{job_id}/cancel": _job_action(
            JOBS,
            "cancel",
            "Cancel a waiting or pending job.",
            (PRODUCER, ADMIN),
            body("EmptyRequest", required=False),
            "A producer may cancel its own jobs, an admin any. Its waiting children that need it completed are "
            "cancelled with it (dependency_failed).",
        ),
        "/jobs/{job_id}/retry": _job_action(
            ADMIN_TAG,
            "retry",
            f"Put a {spell(RETRYABLE)} job back to pending, retries reset.",
            (ADMIN,),
            body("EmptyRequest", required=False),
        ),
    }
