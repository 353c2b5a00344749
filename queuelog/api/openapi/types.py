"""The OpenAPI description of /types (job types and their flow control): its schemas and its paths, as
api/type_bodies.py parses a change and api/serialize.py shows a type."""

from __future__ import annotations

from typing import Any

from ...queue import push_targets
from ...queue.flow import FIELDS, UNIQUE_SCOPES
from .. import limits
from . import shapes as s
from .operations import ADMIN, ADMIN_TAG, WITH_BODY, body, json_response, operation
from .shapes import Schema, closed, integer, nullable, ref, time


def _limit(description: str) -> Schema:
    return nullable(integer(1, limits.MAX_FLOW_LIMIT, description))


def rate_limit() -> Schema:
    """A rate limit: at most ``jobs`` claims in any window of ``per_seconds`` seconds."""
    return closed(
        {
            "jobs": integer(1, limits.MAX_FLOW_LIMIT, "Claims allowed in any window."),
            "per_seconds": integer(1, limits.MAX_RATE_WINDOW_SECONDS, "The window, in seconds."),
        },
        required=["jobs", "per_seconds"],
    )


def type_patch_request() -> Schema:
    """PATCH /types/{type}: any of the five settings; null clears a limit."""
    return closed(
        {
            "paused": {
                "type": "boolean",
                "description": "true: no job of the type is claimed (enqueue still works, "
                "running jobs finish); false: claimable again at once.",
            },
            "concurrency_limit": _limit(
                "At most this many jobs of the type running at once, across every worker "
                "and server (null: no limit). A running job whose lease ran out counts "
                "until it is reaped."
            ),
            "rate_limit": {
                "anyOf": [ref("RateLimit"), {"type": "null"}],
                "description": "At most jobs claims of the type in any window of per_seconds seconds (null: no limit).",
            },
            "key_concurrency_limit": _limit(
                "At most this many running jobs per concurrency key of the type (null: no limit)."
            ),
            "unique_scope": unique_scope(),
            "push": {
                "anyOf": [ref("PushTargetRequest"), {"type": "null"}],
                "description": "Deliver the type's jobs to this URL instead of to workers (null: clear it, and "
                "forget its secrets). The change that sets a first target answers push.secret, once.",
            },
        },
        minProperties=1,
    )


def push_target_request() -> Schema:
    """A push target as PATCH /types/{type} sets it."""
    return closed(
        {
            "url": {
                "type": "string",
                "maxLength": push_targets.MAX_URL_CHARS,
                "pattern": push_targets.URL_PATTERN,
                "description": "An http(s) URL with no user name or password. A host that is, or resolves to, a "
                "loopback, private or link-local address is refused (422, /push/url) unless the server runs with "
                "QUEUELOG_PUSH_ALLOW_PRIVATE=1; the address is checked again at each delivery.",
            },
            "mode": {
                "type": "string",
                "enum": list(push_targets.MODES),
                "default": push_targets.DEFAULT_MODE,
                "description": "sync: the answer decides (2xx completes, 429/503 come back after Retry-After, "
                "anything else fails the attempt); async: a 2xx accepts, and the target later completes, fails "
                "or heartbeats the job with its claim token.",
            },
            "timeout_seconds": integer(
                push_targets.MIN_TIMEOUT_SECONDS,
                push_targets.MAX_TIMEOUT_SECONDS,
                "How long a delivery may take to be answered.",
            )
            | {"default": push_targets.DEFAULT_TIMEOUT_SECONDS},
        },
        required=["url"],
    )


def push_target() -> Schema:
    """A type's push target as /types shows it."""
    last = closed(
        {
            "at": time("When it was made."),
            "job_id": nullable(integer(1, limits.MAX_JOB_ID, "The job delivered.")),
            "http_status": nullable(integer(100, 599, "The answer's status (null: no answer).")),
            "error": nullable({"type": "string", "description": "Why it failed (null: it did not)."}),
        },
        required=["at", "job_id", "http_status", "error"],
    )
    properties = {
        "url": {"type": "string"},
        "mode": {"type": "string", "enum": list(push_targets.MODES)},
        "timeout_seconds": integer(push_targets.MIN_TIMEOUT_SECONDS, push_targets.MAX_TIMEOUT_SECONDS, "Seconds."),
        "last_delivery": {"anyOf": [last, {"type": "null"}], "description": "The type's latest delivery."},
    }
    return closed(
        {
            **properties,
            "secret": {
                "type": "string",
                "pattern": "^whsec_[A-Za-z0-9+/]+=*$",
                "description": "The Standard Webhooks signing secret: only in the answer that issued it (the first "
                "target set, or a rotation), never again.",
            },
        },
        required=list(properties),
    )


def unique_scope() -> Schema:
    """Whose dedupe windows a type keeps."""
    return {
        "type": "string",
        "enum": list(UNIQUE_SCOPES),
        "description": "Whose dedupe windows (unique_for) the type keeps: producer (the default): each key its "
        "own, as its idempotency keys; type: one window per unique key for every producer. "
        "In a shared window a producer whose enqueue meets a job it may not see is answered "
        'only {"deduplicated": true}: it learns that a job with that key exists in the '
        "window, nothing else (no id, no field, no Location), and cannot depend on it.",
    }


def job_type() -> Schema:
    """A job type (a queue) as /types shows it."""
    properties = {
        "type": {"type": "string", "description": "A type of QUEUELOG_JOB_TYPES."},
        "paused": {"type": "boolean"},
        "concurrency_limit": _limit("Most jobs of the type running at once (null: no limit)."),
        "rate_limit": {"anyOf": [ref("RateLimit"), {"type": "null"}]},
        "key_concurrency_limit": _limit("Most running jobs per concurrency key (null: no limit)."),
        "unique_scope": unique_scope(),
        "push": {"anyOf": [ref("PushTarget"), {"type": "null"}], "description": "Its push target (null: none)."},
        "pending": {"type": "integer", "minimum": 0, "description": "Jobs of the type waiting (due or not)."},
        "running": {"type": "integer", "minimum": 0, "description": "Jobs of the type running now."},
    }
    return closed(properties, required=list(properties))


def type_change() -> Schema:
    """One entry of a type's history."""
    change = closed(
        {
            "old": {"description": "The value before (null: none)."},
            "new": {"description": "The value after (null: none)."},
        },
        required=["old", "new"],
    )
    return closed(
        {
            "at": time("When the change was made."),
            "actor": {
                "type": "string",
                "description": "Who made it: key:NAME for an admin key, cli:USER for flask types.",
            },
            "changes": {
                "type": "object",
                "additionalProperties": change,
                "propertyNames": {"enum": [*FIELDS, "push_secret"]},
                "description": "Each changed field, with its old and new value.",
            },
        },
        required=["at", "actor", "changes"],
    )


def components() -> dict[str, Schema]:
    """The named schemas of /types."""
    return {
        "RateLimit": rate_limit(),
        "JobType": job_type(),
        "TypeChange": type_change(),
        "TypePatchRequest": type_patch_request(),
        "PushTargetRequest": push_target_request(),
        "PushTarget": push_target(),
    }


def paths() -> dict[str, Any]:
    """The /types routes: job types (queues) and their flow control, for admin keys."""
    type_name = {
        "name": "job_type",
        "in": "path",
        "required": True,
        "description": "A job type of this server's QUEUELOG_JOB_TYPES (else 404).",
        "schema": {"type": "string", "pattern": s.TYPE_PATTERN},
    }
    one_type = json_response("The type.", s.ref("JobType"))
    return {
        "/types": {
            "get": operation(
                ADMIN_TAG,
                "listTypes",
                "Every job type, with its flow control.",
                (ADMIN,),
                {
                    200: json_response(
                        "Every type of QUEUELOG_JOB_TYPES, in its order.",
                        s.closed({"types": {"type": "array", "items": s.ref("JobType")}}, required=["types"]),
                    )
                },
                errors=(),
            )
        },
        "/types/{job_type}": {
            "get": operation(
                ADMIN_TAG,
                "getType",
                "One job type, with its flow control.",
                (ADMIN,),
                {200: one_type},
                errors=(404,),
                parameters=[type_name],
            ),
            "patch": operation(
                ADMIN_TAG,
                "updateType",
                "Pause or resume a type; set or clear its limits and its push target.",
                (ADMIN,),
                {200: json_response("The type as it now is.", s.ref("JobType"))},
                errors=(*WITH_BODY, 404),
                request=body("TypePatchRequest"),
                parameters=[type_name],
                description="Send any of the fields; null clears a limit. A paused type's jobs are not claimed "
                "(enqueue works, running jobs finish); limits hold across every worker and server. "
                "Every change is written to the type's history with who made it.",
            ),
        },
        "/types/{job_type}/push/rotate": {
            "post": operation(
                ADMIN_TAG,
                "rotatePushSecret",
                "A new signing secret for the type's push target.",
                (ADMIN,),
                {200: json_response("The type, with push.secret shown this once.", s.ref("JobType"))},
                errors=(*WITH_BODY, 404, 409),
                request=body("EmptyRequest", required=False),
                parameters=[type_name],
                description="Deliveries are signed with both the new and the old secret for 24 hours, then with "
                "the new one only. 409 when the type has no push target.",
            )
        },
        "/types/{job_type}/history": {
            "get": operation(
                ADMIN_TAG,
                "typeHistory",
                "Every change of the type's flow control, newest first.",
                (ADMIN,),
                {
                    200: json_response(
                        "The changes.",
                        s.closed({"history": {"type": "array", "items": s.ref("TypeChange")}}, required=["history"]),
                    )
                },
                errors=(404,),
                parameters=[type_name],
            )
        },
    }
