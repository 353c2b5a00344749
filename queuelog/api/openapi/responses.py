"""The JSON Schemas of the jobs' answers, as api/serialize.py and api/problems.py build them."""

from __future__ import annotations

from ...states import RunWhen
from .shapes import (
    EVENTS,
    MAX_JOB_ID,
    PRIORITY_LABELS,
    STATUSES,
    Schema,
    closed,
    integer,
    json_object,
    nullable,
    ref,
    time,
)


def _job_properties() -> dict[str, Schema]:
    """The fields of serialize.job_json, in its order."""
    text = {"type": "string"}
    return {
        "id": integer(1, MAX_JOB_ID, "The job's id."),
        "type": text,
        "status": {"type": "string", "enum": list(STATUSES)},
        "priority": {"type": "string", "enum": list(PRIORITY_LABELS)},
        "payload": json_object(),
        "result": nullable(json_object(description="Set by complete.")),
        "retry_count": {"type": "integer", "minimum": 0},
        "max_retries": {"type": "integer", "minimum": 0},
        "stall_count": {
            "type": "integer",
            "minimum": 0,
            "description": "How often a worker died holding the job (see flask reap).",
        },
        "idempotency_key": nullable(text),
        "producer": nullable({"type": "string", "description": "Name of the key that enqueued the job."}),
        "worker_id": nullable({"type": "string", "description": "Name of the worker key holding the job."}),
        "error": nullable(
            {"type": "string", "description": "The last error; shown only to admins and the holding worker."}
        ),
        "run_at": time("Not claimable before this time."),
        "claimed_at": time("When the current (or last) claim was made.", null=True),
        "heartbeat_at": time("The holding worker's last heartbeat.", null=True),
        "lease_expires_at": time("When a running job's lease runs out.", null=True),
        "completed_at": time("When the job completed.", null=True),
        "created_at": time("When the job was enqueued."),
        "updated_at": time("The job's last change."),
        "concurrency_key": nullable({"type": "string", "description": "The job's concurrency key, if it has one."}),
        "unique_key": nullable(
            {"type": "string", "description": "The dedupe window the job was enqueued with (unique_for), if any."}
        ),
        "expires_at": time("Not claimed by then, the job never runs.", null=True),
        "timeout_seconds": nullable({"type": "integer", "minimum": 1, "description": "How long a run may take."}),
        "timeout_at": time("Set by the claim: when the current run times out (null: no timeout).", null=True),
        "schedule": nullable(
            {"type": "string", "description": "The schedule that enqueued the job (null: a producer did)."}
        ),
        "scheduled_for": time("The schedule's tick the job was enqueued for (Run now: when it was asked).", null=True),
        "run_when": nullable(
            {
                "type": "string",
                "enum": [mode.value for mode in RunWhen],
                "description": "When a job with parents may run (null: it has none).",
            }
        ),
        "progress": nullable(json_object(description="The holding worker's last progress report (heartbeat).")),
        "traceparent": nullable(
            {"type": "string", "description": "The W3C traceparent the job was enqueued with (null: none)."}
        ),
        "tracestate": nullable(
            {"type": "string", "description": "The W3C tracestate sent beside that traceparent (null: none)."}
        ),
        "depends_on": {
            "type": "array",
            "items": {"type": "integer"},
            "description": "The ids of its parents (a producer sees only its own jobs').",
        },
        "dependents": {
            "type": "array",
            "items": {"type": "integer"},
            "description": "The ids of the jobs that depend on it (a producer sees only its own).",
        },
    }


def _parents() -> Schema:
    """A claimed child's parents, with their results: a fan-in handler reads its inputs from the claim."""
    parent = closed(
        {
            "id": {"type": "integer"},
            "type": {"type": "string"},
            "status": {"type": "string", "enum": list(STATUSES)},
            "result": nullable(json_object()),
        },
        required=["id", "type", "status", "result"],
    )
    return {"type": "array", "items": parent, "description": "Only for a job with parents."}


def claimed_job() -> Schema:
    """A claimed job: a job with its claim token, and its parents when it has any."""
    schema = job(claim_token={"type": "string", "description": "Send it back with every action."}, parents=_parents())
    schema["required"].remove("parents")
    return schema


def job(**extra: Schema) -> Schema:
    """A job as the API shows it, with any extra (required) fields of a particular answer."""
    properties = {**_job_properties(), **extra}
    return closed(properties, required=list(properties))


def event() -> Schema:
    """One line of a job's event log, as serialize.event_json builds it."""
    status = {"type": "string", "enum": list(STATUSES)}
    properties = {
        "id": {"type": "integer", "minimum": 1},
        "job_id": integer(1, MAX_JOB_ID, "The job's id."),
        "event": {"type": "string", "enum": list(EVENTS)},
        "from_status": nullable(status),
        "to_status": status,
        "actor": {"type": "string", "description": "key:NAME, an admin, or reaper."},
        "attempt": {"type": "integer", "minimum": 0, "description": "The job's retry_count after the change."},
        "error": nullable(
            {
                "type": "string",
                "description": "Shown only to admins and the holding worker; "
                "dependency_failed's (which parent) to every viewer.",
            }
        ),
        "http_status": nullable(
            integer(100, 599, "A push delivery's answer (event delivered); null when none came, and for other events.")
        ),
        "at": time("When it happened."),
    }
    return closed(properties, required=list(properties))


def batch_complete_response() -> Schema:
    """POST /jobs/complete: one outcome per item, in request order, each like a single complete's answer."""
    outcome = closed(
        {
            "id": {"type": "integer", "description": "The item's job id."},
            "status": {
                "type": "integer",
                "minimum": 200,
                "maximum": 599,
                "description": "What a single complete would have answered: 200, 404 or 409.",
            },
            "job": ref("Job"),
            "problem": ref("Problem"),
        },
        required=["id", "status"],
    )
    return closed({"results": {"type": "array", "items": outcome}}, required=["results"])


def problem() -> Schema:
    """RFC 9457 problem details; extension members (e.g. job_status on a 409) may follow."""
    return {
        "type": "object",
        "required": ["type", "title", "status", "detail"],
        "properties": {
            "type": {"type": "string", "format": "uri"},
            "title": {"type": "string"},
            "status": {
                "type": "integer",
                "minimum": 400,
                "maximum": 599,
                "description": "Always equal to the HTTP status.",
            },
            "detail": {"type": "string"},
            "errors": {
                "type": "array",
                "description": "On 422, and on a 400 for numbers beyond a double: each problem, with a JSON "
                "pointer into the request.",
                "items": closed(
                    {"pointer": {"type": "string"}, "detail": {"type": "string"}}, required=["pointer", "detail"]
                ),
            },
            "job_status": {
                "type": "string",
                "enum": list(STATUSES),
                "description": "On 409: the state that refused the action.",
            },
            "quota": {
                "type": "string",
                "enum": ["enqueue_rate", "max_pending"],
                "description": "On 429: the producer quota that refused the jobs.",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "description": "On 429: the quota's N (rate) or M (pending), or the most worker processes "
                "online per key; on 409 for max-schedules: the most schedules.",
            },
            "window_seconds": {"type": "integer", "minimum": 1, "description": "On 429 for the rate: its S."},
            "in_window": {
                "type": "integer",
                "minimum": 0,
                "description": "On 429 for the rate: jobs the key enqueued in the last S seconds.",
            },
            "pending": {
                "type": "integer",
                "minimum": 0,
                "description": "On 429 for max-pending: the key's pending and waiting jobs (counted up to limit).",
            },
            "online": {
                "type": "integer",
                "minimum": 0,
                "description": "On 429 for worker processes: the key's processes online.",
            },
            "schedules": {
                "type": "integer",
                "minimum": 0,
                "description": "On 409 for max-schedules: the schedules the server has.",
            },
            "requested": {"type": "integer", "minimum": 1, "description": "On 429: the new jobs the request held."},
        },
    }


_DEDUPLICATED = {
    "type": "boolean",
    "const": True,
    "description": "Present (true) when this is the job holding the dedupe window (unique_for) the "
    "request fell in: nothing was created.",
}


def hidden_dedupe_hit() -> Schema:
    """A dedupe hit on a job the caller may not see: that there was one, nothing of the job."""
    return closed(
        {"deduplicated": _DEDUPLICATED},
        required=["deduplicated"],
        description="The enqueue (or batch item) fell in a type's shared dedupe window (unique_scope "
        '"type") held by a job this key may not see: nothing was created, and nothing of '
        "that job is told (no id, no field, no Location header). A depends_on naming this "
        "item's ref is refused (422, pointing at that depends_on entry).",
    )


def _optional(schema: Schema, **extra: Schema) -> Schema:
    """``schema`` with optional extra properties (present only in some answers)."""
    return dict(schema, properties={**schema["properties"], **extra})


def enqueued_job() -> Schema:
    """POST /jobs's job: a job, marked when it is the one holding the dedupe window the request fell in."""
    return _optional(job(), deduplicated=_DEDUPLICATED)


def batch_job() -> Schema:
    """An item of POST /jobs/batch's answer: a job, whether it was created, and the dedupe mark."""
    return _optional(
        job(
            created={
                "type": "boolean",
                "description": "false when an idempotency key replayed an earlier job, "
                "or the item fell in a dedupe window.",
            }
        ),
        deduplicated=_DEDUPLICATED,
    )
