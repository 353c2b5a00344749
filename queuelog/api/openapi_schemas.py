"""The JSON Schemas of the OpenAPI document: request bodies as schemas.py parses them, responses as
serialize.py and problems.py build them.

Kept as Python data next to the code it describes, so a change to a parser or serializer has one
obvious place to be mirrored (and tests/test_schemathesis.py fails until it is).
"""
from __future__ import annotations

from typing import Any

from ..core import patterns
from ..queue.flow import FIELDS, UNIQUE_SCOPES
from ..states import EVENT_NAMES, STATUS_NAMES, RunWhen
from . import schemas

Schema = dict[str, Any]

STATUSES = list(STATUS_NAMES)
PRIORITY_LABELS = list(patterns.PRIORITY_LABELS)
# The event names a job's log may hold, one per kind of state change (states.Event).
EVENTS = list(EVENT_NAMES)
MAX_JOB_ID = schemas.MAX_JOB_ID

# The very patterns schemas.py matches (queuelog/core/patterns.py writes them so ECMA-262 reads them alike).
TYPE_PATTERN = patterns.JOB_TYPE_PATTERN
IDEMPOTENCY_KEY_PATTERN = patterns.IDEMPOTENCY_KEY_PATTERN
PRIORITY_PATTERN = patterns.PRIORITY_LABEL_PATTERN  # the labels in any case: "high", "High", "HIGH"
REF_PATTERN = schemas.REF.pattern
NO_NUL_PATTERN = patterns.NO_NUL_PATTERN


def text(description: str = "") -> Schema:
    """A string the API refuses with 422 if it holds NUL (PostgreSQL text cannot store one; SQLite answers alike)."""
    schema: Schema = {"type": "string", "pattern": NO_NUL_PATTERN}
    return schema | {"description": description} if description else schema


def ref(name: str) -> Schema:
    """A reference to a schema under components/schemas."""
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: Schema) -> Schema:
    """The same schema, also allowing JSON null (OpenAPI 3.1 spells it as a type list)."""
    result = dict(schema)
    kind = result["type"]
    result["type"] = [*kind, "null"] if isinstance(kind, list) else [kind, "null"]
    if "enum" in result:
        result["enum"] = [*result["enum"], None]
    return result


def or_null_for_default(schema: Schema) -> Schema:
    """An optional request field with a default, which also takes null to mean the same as leaving it out.

    The default sits on the non-null branch of an anyOf, not beside a ["…", "null"] type list:
    openapi-python-client refuses a default the null branch cannot hold (``{}`` for an object) and
    leaves the whole operation out, and openapi-typescript makes a field with a default of its own
    required, as if a client had to send it.
    """
    branch = {key: value for key, value in schema.items() if key != "description"}
    result: Schema = {"anyOf": [branch, {"type": "null"}]}
    if "description" in schema:
        result["description"] = schema["description"]
    return result


def json_object(**extra: Any) -> Schema:
    """Any JSON object. additionalProperties is spelled out: a generator reads a bare {"type": "object"}
    as an object with no fields at all (openapi-typescript's Record<string, never>)."""
    return {"type": "object", "additionalProperties": True, **extra}


def closed(properties: dict[str, Schema], required: list[str] | tuple = (), **extra) -> Schema:
    """An object with exactly these properties: the API refuses (and never sends) any other field."""
    schema: Schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    schema.update(extra)
    return schema


def time(description: str, null: bool = False) -> Schema:
    """An RFC 3339 UTC time as the API writes it (``2026-01-01T12:00:00.000000Z``)."""
    schema = {"type": "string", "format": "date-time", "description": description}
    return nullable(schema) if null else schema


def _integer(low: int, high: int, description: str) -> Schema:
    return {"type": "integer", "minimum": low, "maximum": high, "description": description}


# --- requests -------------------------------------------------------------------------------------

def enqueue_request(job_types: list[str], max_payload_bytes: int, in_batch: bool = False) -> Schema:
    """POST /jobs (and, ``in_batch``, each item of POST /jobs/batch, which may also name a ref)."""
    parent = _integer(1, MAX_JOB_ID, "A job id.")
    if in_batch:
        parent = {"anyOf": [parent, {"type": "string", "pattern": REF_PATTERN,
                                     "description": "The ref of another item of this batch."}]}
    workflow: dict[str, Schema] = {
        "depends_on": nullable({
            "type": "array", "minItems": 1, "maxItems": schemas.MAX_DEPENDS_ON, "items": parent,
            "description": "Parents: the job waits (status waiting) until they are done as run_when says. Each "
                           "must be a job the caller may see (a producer: its own), else 422 pointing at it."
                           + (" In a batch, an item's ref names a job of the same batch; a cycle is a 422."
                              if in_batch else "")}),
        "run_when": nullable({
            "type": "string", "enum": [mode.value for mode in RunWhen],
            "description": "completed (default): every parent completed; a parent that fails for good or is "
                           "cancelled cancels this job (event dependency_failed). finished: every parent reached "
                           "a final state, whichever (cleanups, callbacks). Only with depends_on (else 422)."}),
    }
    if in_batch:
        workflow["ref"] = nullable({"type": "string", "pattern": REF_PATTERN,
                                    "description": "This item's name for other items' depends_on (unique in the "
                                                   "batch)."})
    return closed({
        "type": {"type": "string", "pattern": TYPE_PATTERN, "enum": list(job_types),
                 "description": "A job type on this server's allowlist (QUEUELOG_JOB_TYPES); a key may be "
                                "limited further to some types (403)."},
        "payload": or_null_for_default(json_object(
            default={}, description=f"Any JSON object, at most {max_payload_bytes} bytes as compact JSON "
                                    "(else 422).")),
        "priority": or_null_for_default({
            "type": "string", "pattern": PRIORITY_PATTERN, "default": "low",
            "description": f"{patterns.one_of(PRIORITY_LABELS)} (case-insensitive). A producer key may not go "
                           "above its ceiling (403)."}),
        "max_retries": or_null_for_default(_integer(0, schemas.MAX_RETRIES_LIMIT,
                                                    "How many failures are retried before the job fails for "
                                                    "good.") | {"default": 3}),
        "idempotency_key": nullable({
            "type": "string", "pattern": IDEMPOTENCY_KEY_PATTERN,
            "description": "1-200 printable ASCII characters (space included), scoped to the producing key: "
                           "the same key with the same request answers 200 with the existing job, with a "
                           "different request 422."}),
        "run_at": nullable(time("Not claimable before this time; RFC 3339 with an offset.")),
        "concurrency_key": nullable({
            "type": "string", "pattern": IDEMPOTENCY_KEY_PATTERN,
            "description": "The tenant (or any group) the job belongs to: 1-200 printable ASCII characters. Among "
                           "jobs of equal priority, claims take the keys in turns (jobs without a key are one "
                           "group), and a type's key_concurrency_limit caps the running jobs of each key."}),
        "unique_for": nullable(_integer(
            1, schemas.MAX_UNIQUE_FOR_SECONDS,
            "Seconds of a dedupe window on (type, unique_key): while a job of the same type and unique key was "
            "enqueued less than this long ago and is not finished (completed, failed or cancelled), the "
            "enqueue answers 200 with that job and \"deduplicated\": true instead of creating one. Each key has "
            "its own windows (as its idempotency keys), unless an admin set the type's unique_scope to \"type\": "
            "then one window per unique key serves every producer, and a hit on a job this key may not see "
            "answers only {\"deduplicated\": true} (HiddenDedupeHit): the caller learns that a job with that key "
            "exists in the window, nothing else of it.")),
        "unique_key": nullable({
            "type": "string", "pattern": IDEMPOTENCY_KEY_PATTERN,
            "description": "The dedupe window's key (1-200 printable ASCII characters; only with unique_for, "
                           "else 422). "
                           "Default: a digest of the type and the payload as canonical JSON."}),
        "expires_at": nullable(time(
            "Not claimed by then, the job never runs: the reaper cancels it (event expired). RFC 3339 with an "
            "offset, in the future and after run_at (else 422).")),
        "timeout_seconds": nullable(_integer(
            1, schemas.MAX_TIMEOUT_SECONDS,
            "How long a run may take: a run not finished this long after its claim is failed by the reaper as "
            "timed out (retried per max_retries), even while its worker heartbeats, and the worker's late "
            "complete, fail or heartbeat is refused 409. The claim answers timeout_at.")),
        **workflow,
    }, required=["type"], allOf=[_only_with("run_when", "depends_on"), _only_with("unique_key", "unique_for")])


def _only_with(field: str, needed: str) -> Schema:
    """``field`` (not null) is refused with 422 unless ``needed`` is given (not null) too."""
    return {"if": {"properties": {field: {"not": {"type": "null"}}}, "required": [field]},
            "then": {"properties": {needed: {"not": {"type": "null"}}}, "required": [needed]}}


def claim_request(job_types: list[str], max_lease: int) -> Schema:
    """POST /jobs/claim; every field is optional and an empty body is {}."""
    return closed({
        "types": nullable({"type": "array", "minItems": 1, "maxItems": 100,
                           "items": {"type": "string", "pattern": TYPE_PATTERN, "enum": list(job_types)},
                           "description": "Claim only these types, each on this server's QUEUELOG_JOB_TYPES "
                                          "(default: any the key may claim)."}),
        "lease_seconds": nullable(_integer(1, max_lease, "Lease length (default QUEUELOG_LEASE_SECONDS).")),
        "worker_id": nullable({"type": "string", "pattern": NO_NUL_PATTERN,
                               "description": "Accepted only when equal to the key's name (422 otherwise): "
                                              "a worker's identity is its key."}),
        "limit": nullable(_integer(1, schemas.MAX_BATCH_CLAIM,
                                   'Claim up to this many jobs at once; the answer is then {"jobs": [...]}.')),
        "wait": or_null_for_default({
            "type": "number", "minimum": 0, "maximum": schemas.MAX_CLAIM_WAIT_SECONDS, "default": 0,
            "description": "Long-poll: hold the request up to this many seconds until a job is claimable "
                           "(then 200), else 204."}),
        "process_id": nullable(_integer(1, schemas.MAX_PROCESS_ID,
                                        "This key's worker process claiming (POST /workers): written on the jobs "
                                        "for the Workers page; a process told to quiet or stop is answered 204, "
                                        "an unknown process or another key's 404.")),
    })


def _limit(description: str) -> Schema:
    return nullable(_integer(1, schemas.MAX_FLOW_LIMIT, description))


def rate_limit() -> Schema:
    """A rate limit: at most ``jobs`` claims in any window of ``per_seconds`` seconds."""
    return closed({
        "jobs": _integer(1, schemas.MAX_FLOW_LIMIT, "Claims allowed in any window."),
        "per_seconds": _integer(1, schemas.MAX_RATE_WINDOW_SECONDS, "The window, in seconds."),
    }, required=["jobs", "per_seconds"])


def type_patch_request() -> Schema:
    """PATCH /types/{type}: any of the five settings; null clears a limit."""
    return closed({
        "paused": {"type": "boolean", "description": "true: no job of the type is claimed (enqueue still works, "
                                                     "running jobs finish); false: claimable again at once."},
        "concurrency_limit": _limit("At most this many jobs of the type running at once, across every worker "
                                    "and server (null: no limit). A running job whose lease ran out counts "
                                    "until it is reaped."),
        "rate_limit": {"anyOf": [ref("RateLimit"), {"type": "null"}],
                       "description": "At most jobs claims of the type in any window of per_seconds seconds "
                                      "(null: no limit)."},
        "key_concurrency_limit": _limit("At most this many running jobs per concurrency key of the type (null: "
                                        "no limit)."),
        "unique_scope": unique_scope(),
    }, minProperties=1)


def unique_scope() -> Schema:
    """Whose dedupe windows a type keeps."""
    return {"type": "string", "enum": list(UNIQUE_SCOPES),
            "description": "Whose dedupe windows (unique_for) the type keeps: producer (the default): each key its "
                           "own, as its idempotency keys; type: one window per unique key for every producer. "
                           "In a shared window a producer whose enqueue meets a job it may not see is answered "
                           "only {\"deduplicated\": true}: it learns that a job with that key exists in the "
                           "window, nothing else (no id, no field, no Location), and cannot depend on it."}


def job_type() -> Schema:
    """A job type (a queue) as /types shows it."""
    properties = {
        "type": {"type": "string", "description": "A type of QUEUELOG_JOB_TYPES."},
        "paused": {"type": "boolean"},
        "concurrency_limit": _limit("Most jobs of the type running at once (null: no limit)."),
        "rate_limit": {"anyOf": [ref("RateLimit"), {"type": "null"}]},
        "key_concurrency_limit": _limit("Most running jobs per concurrency key (null: no limit)."),
        "unique_scope": unique_scope(),
        "pending": {"type": "integer", "minimum": 0, "description": "Jobs of the type waiting (due or not)."},
        "running": {"type": "integer", "minimum": 0, "description": "Jobs of the type running now."},
    }
    return closed(properties, required=list(properties))


def type_change() -> Schema:
    """One entry of a type's history."""
    change = closed({"old": {"description": "The value before (null: none)."},
                     "new": {"description": "The value after (null: none)."}}, required=["old", "new"])
    return closed({
        "at": time("When the change was made."),
        "actor": {"type": "string", "description": "Who made it: key:NAME for an admin key, cli:USER for flask types."},
        "changes": {"type": "object", "additionalProperties": change,
                    "propertyNames": {"enum": list(FIELDS)},
                    "description": "Each changed field, with its old and new value."},
    }, required=["at", "actor", "changes"])


def token_request(**extra: Schema) -> Schema:
    """A holding worker's action: the claim token, plus the action's own fields."""
    return closed({"claim_token": text("The token the claim returned."), **extra},
                  required=["claim_token"])


def complete_request() -> Schema:
    return token_request(result=nullable(json_object(description="Stored as the job's result.")))


def fail_request() -> Schema:
    return token_request(
        error=nullable({"type": "string",
                        "description": "What went wrong; trimmed and scrubbed of secrets before it is stored."}),
        retryable=or_null_for_default({"type": "boolean", "default": True,
                                       "description": "false fails the job for good, whatever its retries."}),
    )


def heartbeat_request(max_lease: int) -> Schema:
    return token_request(
        lease_seconds=nullable(_integer(1, max_lease, "New lease from now (default QUEUELOG_LEASE_SECONDS).")),
        progress=nullable(json_object(description=f"Any JSON object, at most {schemas.MAX_PROGRESS_BYTES} bytes "
                                                  "as compact JSON: stored on the job as it is (else 422).")))


def batch_enqueue_request() -> Schema:
    return closed({"jobs": {"type": "array", "minItems": 1, "maxItems": schemas.MAX_BATCH_WORKFLOW,
                            "items": ref("BatchEnqueueItem"),
                            "description": f"At most {schemas.MAX_BATCH_ENQUEUE} jobs, or "
                                           f"{schemas.MAX_BATCH_WORKFLOW} when an item names a ref or depends_on."}},
                  required=["jobs"])


def batch_complete_request() -> Schema:
    item = closed({
        "id": _integer(1, MAX_JOB_ID, "The job's id."),
        "claim_token": text(),
        "result": nullable(json_object()),
    }, required=["id", "claim_token"])
    return closed({"jobs": {"type": "array", "minItems": 1, "maxItems": schemas.MAX_BATCH_CLAIM,
                            "items": item}}, required=["jobs"])


# --- responses ------------------------------------------------------------------------------------

def _job_properties() -> dict[str, Schema]:
    """The fields of serialize.job_json, in its order."""
    text = {"type": "string"}
    return {
        "id": _integer(1, MAX_JOB_ID, "The job's id."),
        "type": text,
        "status": {"type": "string", "enum": list(STATUSES)},
        "priority": {"type": "string", "enum": list(PRIORITY_LABELS)},
        "payload": json_object(),
        "result": nullable(json_object(description="Set by complete.")),
        "retry_count": {"type": "integer", "minimum": 0},
        "max_retries": {"type": "integer", "minimum": 0},
        "stall_count": {"type": "integer", "minimum": 0,
                        "description": "How often a worker died holding the job (see flask reap)."},
        "idempotency_key": nullable(text),
        "producer": nullable({"type": "string", "description": "Name of the key that enqueued the job."}),
        "worker_id": nullable({"type": "string", "description": "Name of the worker key holding the job."}),
        "error": nullable({"type": "string",
                           "description": "The last error; shown only to admins and the holding worker."}),
        "run_at": time("Not claimable before this time."),
        "claimed_at": time("When the current (or last) claim was made.", null=True),
        "heartbeat_at": time("The holding worker's last heartbeat.", null=True),
        "lease_expires_at": time("When a running job's lease runs out.", null=True),
        "completed_at": time("When the job completed.", null=True),
        "created_at": time("When the job was enqueued."),
        "updated_at": time("The job's last change."),
        "concurrency_key": nullable({"type": "string", "description": "The job's concurrency key, if it has one."}),
        "unique_key": nullable({"type": "string",
                                "description": "The dedupe window the job was enqueued with (unique_for), if any."}),
        "expires_at": time("Not claimed by then, the job never runs.", null=True),
        "timeout_seconds": nullable({"type": "integer", "minimum": 1, "description": "How long a run may take."}),
        "timeout_at": time("Set by the claim: when the current run times out (null: no timeout).", null=True),
        "schedule": nullable({"type": "string", "description": "The schedule that enqueued the job (null: a "
                                                               "producer did)."}),
        "scheduled_for": time("The schedule's tick the job was enqueued for (Run now: when it was asked).",
                              null=True),
        "run_when": nullable({"type": "string", "enum": [mode.value for mode in RunWhen],
                              "description": "When a job with parents may run (null: it has none)."}),
        "progress": nullable(json_object(description="The holding worker's last progress report (heartbeat).")),
        "depends_on": {"type": "array", "items": {"type": "integer"},
                       "description": "The ids of its parents (a producer sees only its own jobs')."},
        "dependents": {"type": "array", "items": {"type": "integer"},
                       "description": "The ids of the jobs that depend on it (a producer sees only its own)."},
    }


def _parents() -> Schema:
    """A claimed child's parents, with their results: a fan-in handler reads its inputs from the claim."""
    parent = closed({"id": {"type": "integer"}, "type": {"type": "string"},
                     "status": {"type": "string", "enum": list(STATUSES)}, "result": nullable(json_object())},
                    required=["id", "type", "status", "result"])
    return {"type": "array", "items": parent, "description": "Only for a job with parents."}


def claimed_job() -> Schema:
    """A claimed job: a job with its claim token, and its parents when it has any."""
    schema = job(claim_token={"type": "string", "description": "Send it back with every action."},
                 parents=_parents())
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
        "job_id": _integer(1, MAX_JOB_ID, "The job's id."),
        "event": {"type": "string", "enum": list(EVENTS)},
        "from_status": nullable(status),
        "to_status": status,
        "actor": {"type": "string", "description": "key:NAME, an admin, or reaper."},
        "attempt": {"type": "integer", "minimum": 0, "description": "The job's retry_count after the change."},
        "error": nullable({"type": "string", "description": "Shown only to admins and the holding worker; "
                                                             "dependency_failed's (which parent) to every viewer."}),
        "at": time("When it happened."),
    }
    return closed(properties, required=list(properties))


def batch_complete_response() -> Schema:
    """POST /jobs/complete: one outcome per item, in request order, each like a single complete's answer."""
    outcome = closed({
        "id": {"type": "integer", "description": "The item's job id."},
        "status": {"type": "integer", "minimum": 200, "maximum": 599,
                   "description": "What a single complete would have answered: 200, 404 or 409."},
        "job": ref("Job"),
        "problem": ref("Problem"),
    }, required=["id", "status"])
    return closed({"results": {"type": "array", "items": outcome}}, required=["results"])


def problem() -> Schema:
    """RFC 9457 problem details; extension members (e.g. job_status on a 409) may follow."""
    return {
        "type": "object",
        "required": ["type", "title", "status", "detail"],
        "properties": {
            "type": {"type": "string", "format": "uri"},
            "title": {"type": "string"},
            "status": {"type": "integer", "minimum": 400, "maximum": 599,
                       "description": "Always equal to the HTTP status."},
            "detail": {"type": "string"},
            "errors": {
                "type": "array",
                "description": "On 422, and on a 400 for numbers beyond a double: each problem, with a JSON "
                               "pointer into the request.",
                "items": closed({"pointer": {"type": "string"}, "detail": {"type": "string"}},
                                required=["pointer", "detail"]),
            },
            "job_status": {"type": "string", "enum": list(STATUSES),
                           "description": "On 409: the state that refused the action."},
            "quota": {"type": "string", "enum": ["enqueue_rate", "max_pending"],
                      "description": "On 429: the producer quota that refused the jobs."},
            "limit": {"type": "integer", "minimum": 1,
                      "description": "On 429: the quota's N (rate) or M (pending), or the most worker processes "
                                     "online per key; on 409 for max-schedules: the most schedules."},
            "window_seconds": {"type": "integer", "minimum": 1, "description": "On 429 for the rate: its S."},
            "in_window": {"type": "integer", "minimum": 0,
                          "description": "On 429 for the rate: jobs the key enqueued in the last S seconds."},
            "pending": {"type": "integer", "minimum": 0,
                        "description": "On 429 for max-pending: the key's pending and waiting jobs (counted up to "
                                       "limit)."},
            "online": {"type": "integer", "minimum": 0,
                       "description": "On 429 for worker processes: the key's processes online."},
            "schedules": {"type": "integer", "minimum": 0,
                          "description": "On 409 for max-schedules: the schedules the server has."},
            "requested": {"type": "integer", "minimum": 1, "description": "On 429: the new jobs the request held."},
        },
    }


_DEDUPLICATED = {"type": "boolean", "const": True,
                 "description": "Present (true) when this is the job holding the dedupe window (unique_for) the "
                                "request fell in: nothing was created."}


def hidden_dedupe_hit() -> Schema:
    """A dedupe hit on a job the caller may not see: that there was one, nothing of the job."""
    return closed({"deduplicated": _DEDUPLICATED}, required=["deduplicated"],
                  description="The enqueue (or batch item) fell in a type's shared dedupe window (unique_scope "
                              "\"type\") held by a job this key may not see: nothing was created, and nothing of "
                              "that job is told (no id, no field, no Location header). A depends_on naming this "
                              "item's ref is refused (422, pointing at that depends_on entry).")


def _optional(schema: Schema, **extra: Schema) -> Schema:
    """``schema`` with optional extra properties (present only in some answers)."""
    return dict(schema, properties={**schema["properties"], **extra})


def components(job_types: list[str], max_payload_bytes: int) -> dict[str, Schema]:
    """Every named schema of the document."""
    from .openapi_schedules import components as schedule_components  # it builds on this module
    from .openapi_workers import components as worker_components

    max_lease = schemas.MAX_LEASE_SECONDS
    return {
        "Job": job(),
        "ClaimedJob": claimed_job(),
        "EnqueuedJob": _optional(job(), deduplicated=_DEDUPLICATED),
        "BatchJob": _optional(job(created={"type": "boolean",
                                           "description": "false when an idempotency key replayed an earlier job, "
                                                          "or the item fell in a dedupe window."}),
                              deduplicated=_DEDUPLICATED),
        "Event": event(),
        "Problem": problem(),
        "EnqueueRequest": enqueue_request(job_types, max_payload_bytes),
        "BatchEnqueueItem": enqueue_request(job_types, max_payload_bytes, in_batch=True),
        "BatchEnqueueRequest": batch_enqueue_request(),
        "ClaimRequest": claim_request(job_types, max_lease),
        "CompleteRequest": complete_request(),
        "FailRequest": fail_request(),
        "HeartbeatRequest": heartbeat_request(max_lease),
        "ReleaseRequest": token_request(),
        "BatchCompleteRequest": batch_complete_request(),
        "BatchCompleteResponse": batch_complete_response(),
        "EmptyRequest": closed({}, description="No fields: an empty body or {}."),
        "RateLimit": rate_limit(),
        "JobType": job_type(),
        "TypeChange": type_change(),
        "TypePatchRequest": type_patch_request(),
        "HiddenDedupeHit": hidden_dedupe_hit(),
        **schedule_components(job_types),
        **worker_components(job_types),
    }
