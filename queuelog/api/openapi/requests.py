"""The JSON Schemas of the jobs' request bodies, as api/job_bodies.py and api/worker_bodies.py parse them."""

from __future__ import annotations

from ...core import patterns
from ...core.trace_context import TRACEPARENT_MAX, TRACEPARENT_PATTERN, TRACESTATE_MAX, TRACESTATE_PATTERN
from ...states import RunWhen
from .. import limits
from .shapes import (
    IDEMPOTENCY_KEY_PATTERN,
    MAX_JOB_ID,
    NO_NUL_PATTERN,
    PRIORITY_LABELS,
    PRIORITY_PATTERN,
    REF_PATTERN,
    TYPE_PATTERN,
    Schema,
    closed,
    integer,
    json_object,
    nullable,
    or_null_for_default,
    ref,
    text,
    time,
)


def enqueue_request(job_types: list[str], max_payload_bytes: int, in_batch: bool = False) -> Schema:
    """POST /jobs (and, ``in_batch``, each item of POST /jobs/batch, which may also name a ref)."""
    parent = integer(1, MAX_JOB_ID, "A job id.")
    if in_batch:
        parent = {
            "anyOf": [
                parent,
                {"type": "string", "pattern": REF_PATTERN, "description": "The ref of another item of this batch."},
            ]
        }
    workflow: dict[str, Schema] = {
        "depends_on": nullable(
            {
                "type": "array",
                "minItems": 1,
                "maxItems": limits.MAX_DEPENDS_ON,
                "items": parent,
                "description": "Parents: the job waits (status waiting) until they are done as run_when says. Each "
                "must be a job the caller may see (a producer: its own), else 422 pointing at it."
                + (" In a batch, an item's ref names a job of the same batch; a cycle is a 422." if in_batch else ""),
            }
        ),
        "run_when": nullable(
            {
                "type": "string",
                "enum": [mode.value for mode in RunWhen],
                "description": "completed (default): every parent completed; a parent that fails for good or is "
                "cancelled cancels this job (event dependency_failed). finished: every parent reached "
                "a final state, whichever (cleanups, callbacks). Only with depends_on (else 422).",
            }
        ),
    }
    if in_batch:
        workflow["ref"] = nullable(
            {
                "type": "string",
                "pattern": REF_PATTERN,
                "description": "This item's name for other items' depends_on (unique in the batch).",
            }
        )
    workflow["traceparent"] = nullable(
        {
            "type": "string",
            "maxLength": TRACEPARENT_MAX,
            "pattern": TRACEPARENT_PATTERN,
            "description": "The W3C trace context the job is enqueued in (version-trace_id-parent_id-flags, "
            "lowercase hex; else 422), handed to its workers with the claim. Sent here, it is this job's; else "
            "the request's traceparent header applies. Not part of the request an idempotency key replays.",
        }
    )
    workflow["tracestate"] = nullable(
        {
            "type": "string",
            "maxLength": TRACESTATE_MAX,
            "pattern": TRACESTATE_PATTERN,
            "description": "The W3C tracestate beside the traceparent (up to 32 key=value members, no key twice; "
            "only with a traceparent, else 422).",
        }
    )
    return closed(
        {
            "type": {
                "type": "string",
                "pattern": TYPE_PATTERN,
                "enum": list(job_types),
                "description": "A job type on this server's allowlist (QUEUELOG_JOB_TYPES); a key may be "
                "limited further to some types (403).",
            },
            "payload": or_null_for_default(
                json_object(
                    default={},
                    description=f"Any JSON object, at most {max_payload_bytes} bytes as compact JSON (else 422).",
                )
            ),
            "priority": or_null_for_default(
                {
                    "type": "string",
                    "pattern": PRIORITY_PATTERN,
                    "default": "low",
                    "description": f"{patterns.one_of(PRIORITY_LABELS)} (case-insensitive). A producer key may not go "
                    "above its ceiling (403).",
                }
            ),
            "max_retries": or_null_for_default(
                integer(0, limits.MAX_RETRIES_LIMIT, "How many failures are retried before the job fails for good.")
                | {"default": 3}
            ),
            "idempotency_key": nullable(
                {
                    "type": "string",
                    "pattern": IDEMPOTENCY_KEY_PATTERN,
                    "description": "1-200 printable ASCII characters (space included), scoped to the producing key: "
                    "the same key with the same request answers 200 with the existing job, with a "
                    "different request 422.",
                }
            ),
            "run_at": nullable(
                time(
                    "Not claimable before this time; RFC 3339 with an offset, within the years 1 to 9999 once "
                    "converted to UTC (else 422)."
                )
            ),
            "concurrency_key": nullable(
                {
                    "type": "string",
                    "pattern": IDEMPOTENCY_KEY_PATTERN,
                    "description": "The tenant (or any group) the job belongs to: 1-200 printable ASCII characters. "
                    "Among jobs of equal priority, claims take the keys in turns (jobs without a key are one "
                    "group), and a type's key_concurrency_limit caps the running jobs of each key.",
                }
            ),
            "unique_for": nullable(
                integer(
                    1,
                    limits.MAX_UNIQUE_FOR_SECONDS,
                    "Seconds of a dedupe window on (type, unique_key): while a job of the same type and unique key "
                    "was enqueued less than this long ago and is not finished (completed, failed or cancelled), the "
                    'enqueue answers 200 with that job and "deduplicated": true instead of creating one. Each key '
                    "has its own windows (as its idempotency keys), unless an admin set the type's unique_scope to "
                    '"type": '
                    "then one window per unique key serves every producer, and a hit on a job this key may not see "
                    'answers only {"deduplicated": true} (HiddenDedupeHit): the caller learns that a job with that key '
                    "exists in the window, nothing else of it.",
                )
            ),
            "unique_key": nullable(
                {
                    "type": "string",
                    "pattern": IDEMPOTENCY_KEY_PATTERN,
                    "description": "The dedupe window's key (1-200 printable ASCII characters; only with unique_for, "
                    "else 422). "
                    "Default: a digest of the type and the payload as canonical JSON.",
                }
            ),
            "expires_at": nullable(
                time(
                    "Not claimed by then, the job never runs: the reaper cancels it (event expired). RFC 3339 with an "
                    "offset, in the future and after run_at, within the years 1 to 9999 once converted to UTC "
                    "(else 422)."
                )
            ),
            "timeout_seconds": nullable(
                integer(
                    1,
                    limits.MAX_TIMEOUT_SECONDS,
                    "How long a run may take: a run not finished this long after its claim is failed by the reaper as "
                    "timed out (retried per max_retries), even while its worker heartbeats, and the worker's late "
                    "complete, fail or heartbeat is refused 409. The claim answers timeout_at.",
                )
            ),
            **workflow,
        },
        required=["type"],
        allOf=[
            _only_with("run_when", "depends_on"),
            _only_with("unique_key", "unique_for"),
            _only_with("tracestate", "traceparent"),
        ],
    )


def _only_with(field: str, needed: str) -> Schema:
    """``field`` (not null) is refused with 422 unless ``needed`` is given (not null) too."""
    return {
        "if": {"properties": {field: {"not": {"type": "null"}}}, "required": [field]},
        "then": {"properties": {needed: {"not": {"type": "null"}}}, "required": [needed]},
    }


def claim_request(job_types: list[str], max_lease: int) -> Schema:
    """POST /jobs/claim; every field is optional and an empty body is {}."""
    return closed(
        {
            "types": nullable(
                {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 100,
                    "items": {"type": "string", "pattern": TYPE_PATTERN, "enum": list(job_types)},
                    "description": "Claim only these types, each on this server's QUEUELOG_JOB_TYPES "
                    "(default: any the key may claim).",
                }
            ),
            "lease_seconds": nullable(integer(1, max_lease, "Lease length (default QUEUELOG_LEASE_SECONDS).")),
            "worker_id": nullable(
                {
                    "type": "string",
                    "pattern": NO_NUL_PATTERN,
                    "description": "Accepted only when equal to the key's name (422 otherwise): "
                    "a worker's identity is its key.",
                }
            ),
            "limit": nullable(
                integer(
                    1, limits.MAX_BATCH_CLAIM, 'Claim up to this many jobs at once; the answer is then {"jobs": [...]}.'
                )
            ),
            "wait": or_null_for_default(
                {
                    "type": "number",
                    "minimum": 0,
                    "maximum": limits.MAX_CLAIM_WAIT_SECONDS,
                    "default": 0,
                    "description": "Long-poll: hold the request up to this many seconds until a job is claimable "
                    "(then 200), else 204.",
                }
            ),
            "process_id": nullable(
                integer(
                    1,
                    limits.MAX_PROCESS_ID,
                    "This key's worker process claiming (POST /workers): written on the jobs "
                    "for the Workers page; a process told to quiet or stop is answered 204, "
                    "an unknown process or another key's 404.",
                )
            ),
        }
    )


def token_request(**extra: Schema) -> Schema:
    """A holding worker's action: the claim token, plus the action's own fields."""
    return closed({"claim_token": text("The token the claim returned."), **extra}, required=["claim_token"])


def complete_request() -> Schema:
    return token_request(result=nullable(json_object(description="Stored as the job's result.")))


def fail_request() -> Schema:
    return token_request(
        error=nullable(
            {"type": "string", "description": "What went wrong; trimmed and scrubbed of secrets before it is stored."}
        ),
        retryable=or_null_for_default(
            {"type": "boolean", "default": True, "description": "false fails the job for good, whatever its retries."}
        ),
    )


def heartbeat_request(max_lease: int) -> Schema:
    return token_request(
        lease_seconds=nullable(integer(1, max_lease, "New lease from now (default QUEUELOG_LEASE_SECONDS).")),
        progress=nullable(
            json_object(
                description=f"Any JSON object, at most {limits.MAX_PROGRESS_BYTES} bytes "
                "as compact JSON: stored on the job as it is (else 422)."
            )
        ),
    )


def batch_enqueue_request() -> Schema:
    return closed(
        {
            "jobs": {
                "type": "array",
                "minItems": 1,
                "maxItems": limits.MAX_BATCH_WORKFLOW,
                "items": ref("BatchEnqueueItem"),
                "description": f"At most {limits.MAX_BATCH_ENQUEUE} jobs, or "
                f"{limits.MAX_BATCH_WORKFLOW} when an item names a ref or depends_on.",
            }
        },
        required=["jobs"],
    )


def batch_complete_request() -> Schema:
    item = closed(
        {
            "id": integer(1, MAX_JOB_ID, "The job's id."),
            "claim_token": text(),
            "result": nullable(json_object()),
        },
        required=["id", "claim_token"],
    )
    return closed(
        {"jobs": {"type": "array", "minItems": 1, "maxItems": limits.MAX_BATCH_CLAIM, "items": item}}, required=["jobs"]
    )
