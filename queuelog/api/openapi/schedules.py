"""The OpenAPI description of /schedules: its schemas and its paths (the package's __init__ takes them in).
Built from the same constants the schedules' check uses (queuelog/schedules/spec.py)."""

from __future__ import annotations

from typing import Any

from ...schedules import spec, timing
from . import operations as o
from . import shapes as s

Schema = dict[str, Any]

_TIMING = (
    "Exactly one of cron and every_seconds. cron: 5 fields (minute hour day month weekday), or 6 with the "
    "seconds first, or an alias (" + ", ".join(timing.ALIASES) + "), in the schedule's timezone, DST "
    "included (a time the spring-forward gap skips runs once just after it; a time the fall-back repeats "
    "runs once). every_seconds: 1-86,400, ticking at the multiples of N seconds since the Unix epoch."
)


_TIMEZONE = (
    "The IANA timezone cron is read in (default, and null: UTC): a canonical zone name of the IANA "
    "database the server ships (the tzdata package), such as Europe/Berlin or UTC. Names whose meaning "
    "depends on the server's host are refused (422, pointer /timezone): "
    + ", ".join(sorted(timing.HOST_NAMES))
    + ", and the "
    + " and ".join(timing.HOST_TREES)
    + " trees. A change "
    "that leaves the timezone as it is keeps it, even one stored before this rule."
)
_CAP = (
    "At most QUEUELOG_MAX_SCHEDULES schedules (default 1,000) exist at once, paused ones included: creating one "
    "more answers 409 (type .../max-schedules-reached) and creates nothing. Changing a schedule is never "
    "refused for it."
)


def _schedule_job(job_types: list[str], patch: bool) -> Schema:
    """The job a schedule enqueues (in a change, each field given replaces the current one)."""
    return s.closed(
        {
            "type": {
                "type": "string",
                "pattern": s.TYPE_PATTERN,
                "enum": list(job_types),
                "description": "A job type on this server's QUEUELOG_JOB_TYPES (else 422).",
            },
            "payload": s.nullable(s.json_object(description="Any JSON object (null or left out: {}).")),
            "priority": s.nullable(
                {
                    "type": "string",
                    "pattern": s.PRIORITY_PATTERN,
                    "description": "low (default), medium, high or critical.",
                }
            ),
            "max_retries": s.nullable(
                {"type": "integer", "minimum": 0, "maximum": spec.MAX_RETRIES, "description": "Default 3."}
            ),
        },
        required=() if patch else ["type"],
    )


def _request_properties(job_types: list[str], patch: bool) -> dict[str, Schema]:
    return {
        "name": {"type": "string", "pattern": spec.NAME_PATTERN, "description": spec.NAME_HINT + "; unique (409)."},
        "cron": s.nullable(
            {
                "type": "string",
                "maxLength": 200,
                "pattern": timing.CRON_PATTERN,
                "description": _TIMING + " The pattern says the shape; values out of range (minute 60, "
                "month 13) or that match no time are a 422 too (/cron).",
            }
        ),
        "every_seconds": s.nullable(
            {
                "type": "integer",
                "minimum": 1,
                "maximum": timing.MAX_EVERY_SECONDS,
                "description": "Seconds between ticks (instead of cron).",
            }
        ),
        "timezone": s.nullable({"type": "string", "minLength": 1, "maxLength": 64, "description": _TIMEZONE}),
        "job": s.nullable(_schedule_job(job_types, patch)) if patch else _schedule_job(job_types, patch),
        "paused": s.nullable(
            {
                "type": "boolean",
                "description": "A paused schedule does not tick; resuming does not replay the ticks missed meanwhile.",
            }
        ),
        "catch_up": s.nullable(
            {
                "type": "string",
                "enum": list(spec.CATCH_UP),
                "description": "After downtime: one job for the latest missed tick (one, the default), or none.",
            }
        ),
    }


def schedule() -> Schema:
    """A schedule as serialize.schedule_json shows it."""
    job = s.closed(
        {
            "type": {"type": "string"},
            "payload": s.json_object(),
            "priority": {"type": "string", "enum": list(s.PRIORITY_LABELS)},
            "max_retries": {"type": "integer", "minimum": 0},
        },
        required=["type", "payload", "priority", "max_retries"],
    )
    properties = {
        "name": {"type": "string"},
        "cron": s.nullable({"type": "string"}),
        "every_seconds": s.nullable({"type": "integer", "minimum": 1}),
        "timezone": {"type": "string"},
        "job": job,
        "paused": {"type": "boolean"},
        "catch_up": {"type": "string", "enum": list(spec.CATCH_UP)},
        "next_run_at": s.time("The next tick, in UTC (null while paused).", null=True),
        "last_run_at": s.time("The tick of the last job a tick enqueued.", null=True),
        "last_job_id": s.nullable(
            {"type": "integer", "minimum": 1, "description": "The last job enqueued (by a tick or Run now)."}
        ),
        "created_at": s.time("When the schedule was created."),
        "updated_at": s.time("The schedule's last change (a tick moves it on too)."),
    }
    return s.closed(properties, required=list(properties))


def _one_timing(required: bool) -> list[Schema]:
    """cron and every_seconds: never both (422, /cron); a create needs one of them."""
    given = {"not": {"type": "null"}}
    rules: list[Schema] = [
        {"not": {"properties": {"cron": given, "every_seconds": given}, "required": ["cron", "every_seconds"]}}
    ]
    if required:
        rules.append(
            {
                "anyOf": [
                    {"properties": {"cron": given}, "required": ["cron"]},
                    {"properties": {"every_seconds": given}, "required": ["every_seconds"]},
                ]
            }
        )
    return rules


def components(job_types: list[str]) -> dict[str, Schema]:
    return {
        "Schedule": schedule(),
        "ScheduleRequest": s.closed(
            _request_properties(job_types, False), required=["name", "job"], allOf=_one_timing(required=True)
        ),
        "SchedulePatchRequest": s.closed(
            _request_properties(job_types, True), minProperties=1, allOf=_one_timing(required=False)
        ),
    }


def paths() -> dict[str, Any]:
    """The /schedules routes, for admin keys."""
    name = {
        "name": "name",
        "in": "path",
        "required": True,
        "description": "The schedule's name.",
        "schema": {"type": "string"},
    }
    one = o.json_response("The schedule.", s.ref("Schedule"))
    admin, tag = (o.ADMIN,), o.ADMIN_TAG
    return {
        "/schedules": {
            "get": o.operation(
                tag,
                "listSchedules",
                "A page of schedules, by name.",
                admin,
                {200: o.json_response("A page of schedules.", o.page_of("schedules", s.ref("Schedule")))},
                errors=(422,),
                parameters=o.PAGE_PARAMETERS,
                description="Paginated as GET /jobs is: limit and cursor, next_cursor null on the last page.",
            ),
            "post": o.operation(
                tag,
                "createSchedule",
                "Create a schedule: a job enqueued on a cron expression or an interval.",
                admin,
                {201: o.json_response("The schedule, with its first tick.", s.ref("Schedule"))},
                errors=(*o.WITH_BODY, 409),
                request=o.body("ScheduleRequest"),
                description="Each tick enqueues exactly one job, whatever the number of server processes, "
                "marked with schedule and scheduled_for. " + _TIMING + " " + _CAP,
            ),
        },
        "/schedules/{name}": {
            "get": o.operation(
                tag, "getSchedule", "One schedule.", admin, {200: one}, errors=(404,), parameters=[name]
            ),
            "patch": o.operation(
                tag,
                "updateSchedule",
                "Change any fields of a schedule.",
                admin,
                {200: o.json_response("The schedule as it now is.", s.ref("Schedule"))},
                errors=(*o.WITH_BODY, 404, 409),
                request=o.body("SchedulePatchRequest"),
                parameters=[name],
                description="Checked like a create. Naming cron replaces every_seconds and the other way round; "
                "the job's fields given replace those of its job. Pausing stops the ticks; resuming, "
                "or a new timing, ticks next at the first tick after now (missed ticks are not "
                "replayed).",
            ),
            "delete": o.operation(
                tag,
                "deleteSchedule",
                "Delete a schedule; the jobs it enqueued stay.",
                admin,
                {204: {"description": "Deleted."}},
                errors=(404,),
                parameters=[name],
            ),
        },
        "/schedules/{name}/run": {
            "post": o.operation(
                tag,
                "runSchedule",
                "Enqueue the schedule's job once, now.",
                admin,
                {201: o.job_response("The job, marked with the schedule (scheduled_for: now).")},
                errors=(*o.WITH_BODY, 404),
                request=o.body("EmptyRequest", required=False),
                parameters=[name],
                description="Its ticks stay as they are.",
            )
        },
    }
