"""What a schedule is made of, and the one check of it that the API, the CLI and the pages share.

``check_spec(fields, current)`` takes the fields of a create (``current`` None) or of a change (``current``
the schedule as it is) as JSON-like values, and returns the whole schedule as it would be, or raises
InvalidRequest listing every problem with a JSON pointer to its field (``/job/priority``, ``/cron``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

from flask import current_app

from ..core.errors import InvalidRequest
from ..core.patterns import NAME_PATTERN, PRIORITY_BY_LABEL, PRIORITY_LABELS, Priority, one_of
from .timing import MAX_EVERY_SECONDS, Timing, TimingError, check_cron, check_zone

NAME = re.compile(NAME_PATTERN)
NAME_HINT = "1-100 characters: letters, digits, '_', '.', ':' or '-'"
#: What POST /jobs takes for max_retries (queuelog/api/limits.py): the same number for the same field.
MAX_RETRIES = 100
CATCH_UP = ("one", "none")
FIELDS = {"name", "cron", "every_seconds", "timezone", "job", "paused", "catch_up"}
JOB_FIELDS = {"type", "payload", "priority", "max_retries"}


@dataclass(frozen=True)
class JobTemplate:
    """The job each tick enqueues."""

    type: str
    payload: dict
    priority: int = Priority.LOW.value
    max_retries: int = 3

    def as_json(self) -> dict:
        return {
            "type": self.type,
            "payload": self.payload,
            "priority": Priority.label_of(self.priority),
            "max_retries": self.max_retries,
        }


@dataclass(frozen=True)
class Spec:
    """A schedule as its owner sets it: name, timing, the job, paused, and what to do after downtime."""

    name: str
    timing: Timing
    job: JobTemplate
    paused: bool = False
    catch_up: str = "one"  # after downtime: one job for the latest missed tick ("one"), or none ("none")


def check_spec(fields: dict[str, Any], current: Spec | None = None) -> Spec:
    """The schedule ``fields`` make (over ``current``, for a change), or InvalidRequest naming each bad field."""
    problems: list[dict] = []

    def problem(pointer: str, detail: str) -> None:
        problems.append({"pointer": pointer, "detail": detail})

    for name in sorted(set(fields) - FIELDS):
        problem(f"/{name}", "unknown field")
    name = _name(fields, current, problem)
    timing = _timing(fields, current, problem)
    job = _job(fields, current, problem)
    paused = _flag(fields, "paused", current.paused if current else False, problem)
    catch_up = fields.get("catch_up", current.catch_up if current else "one")
    if catch_up is None:
        catch_up = "one"
    if catch_up not in CATCH_UP:
        problem("/catch_up", "must be " + one_of(f'"{choice}"' for choice in CATCH_UP))
    if problems:
        raise InvalidRequest(problems)
    return Spec(name=name, timing=timing, job=job, paused=paused, catch_up=catch_up)


def _name(fields, current, problem) -> str:
    if "name" not in fields and current is not None:
        return current.name
    value = fields.get("name")
    if value is None:
        problem("/name", "is required")
    elif not isinstance(value, str) or not NAME.fullmatch(value):
        problem("/name", NAME_HINT)
    else:
        return value
    return ""


def _timing(fields, current, problem) -> Timing:
    """Exactly one of cron and every_seconds; on a change, naming one replaces the other."""
    cron, every = fields.get("cron"), fields.get("every_seconds")
    timezone = fields.get("timezone", current.timing.timezone if current else "UTC")
    if timezone is None:
        timezone = "UTC"
    if not isinstance(timezone, str) or not timezone.strip() or len(timezone) > 64:
        problem("/timezone", "must be an IANA timezone name such as Europe/Berlin or UTC")
        timezone = "UTC"
    elif current is None or timezone != current.timing.timezone:
        # A schedule stored before the check was strict keeps its timezone until it is changed.
        try:
            check_zone(timezone)
        except TimingError as error:
            problem("/timezone", str(error))
            timezone = "UTC"
    if cron is not None and every is not None:
        problem("/cron", "give either cron or every_seconds, not both")
        return Timing(None, 1, timezone)
    if cron is None and every is None:
        if current is not None:
            return replace(current.timing, timezone=timezone)
        problem("/cron", "give either cron (a cron expression) or every_seconds (an interval)")
        return Timing(None, 1, timezone)
    if cron is not None:
        if not isinstance(cron, str) or len(cron) > 200:
            problem("/cron", "must be a cron expression of at most 200 characters")
            return Timing(None, 1, timezone)
        try:
            return Timing(check_cron(cron, timezone), None, timezone)
        except TimingError as error:
            problem("/cron", str(error))
            return Timing(None, 1, timezone)
    every = _whole(every)
    if every is None or not 1 <= every <= MAX_EVERY_SECONDS:
        problem("/every_seconds", f"must be an integer from 1 to {MAX_EVERY_SECONDS:,}")
        return Timing(None, 1, timezone)
    return Timing(None, every, timezone)


def _job(fields, current, problem) -> JobTemplate:
    """The job: on a change, the fields given replace those of the current job, the others stay."""
    base = current.job if current is not None else None
    value = fields.get("job")
    if value is None:
        if base is None:
            problem("/job", 'is required: {"type": …, "payload": {…}, "priority": …, "max_retries": …}')
            return JobTemplate("", {})
        return base
    if not isinstance(value, dict):
        problem("/job", "must be a JSON object")
        return JobTemplate("", {})
    for name in sorted(set(value) - JOB_FIELDS):
        problem(f"/job/{name}", "unknown field")
    job_type = value.get("type", base.type if base else None)
    allowed = current_app.config["JOB_TYPES"]
    if job_type is None:
        problem("/job/type", "is required")
    elif not isinstance(job_type, str) or job_type not in allowed:
        problem("/job/type", f"must be a job type on this server's QUEUELOG_JOB_TYPES ({', '.join(allowed)})")
    payload = value.get("payload", base.payload if base else {})
    if payload is None:
        payload = {}
    if not isinstance(payload, dict):
        problem("/job/payload", "must be a JSON object")
    else:
        size = len(json.dumps(payload, separators=(",", ":")).encode())
        limit = current_app.config["MAX_PAYLOAD_BYTES"]
        if size > limit:
            problem("/job/payload", f"is {size} bytes as JSON; the limit is {limit}")
    priority, max_retries = _job_numbers(value, base, problem)
    return JobTemplate(
        job_type if isinstance(job_type, str) else "",
        payload if isinstance(payload, dict) else {},
        priority,
        max_retries,
    )


def _job_numbers(value: dict, base: JobTemplate | None, problem) -> tuple[int, int]:
    """The job's priority (a label) and max_retries: given, or as before, or the enqueue's defaults."""
    priority = base.priority if base else Priority.LOW.value
    if value.get("priority") is not None:
        label = value["priority"]
        if not isinstance(label, str) or label.lower() not in PRIORITY_BY_LABEL:
            problem("/job/priority", "must be " + one_of(PRIORITY_LABELS))
        else:
            priority = PRIORITY_BY_LABEL[label.lower()]
    max_retries = base.max_retries if base else 3
    if value.get("max_retries") is not None:
        retries = _whole(value["max_retries"])
        if retries is None or not 0 <= retries <= MAX_RETRIES:
            problem("/job/max_retries", f"must be an integer from 0 to {MAX_RETRIES}")
        else:
            max_retries = retries
    return priority, max_retries


def _flag(fields, name, default, problem) -> bool:
    value = fields.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        problem(f"/{name}", "must be true or false")
        return default
    return value


def _whole(value: Any) -> int | None:
    """A JSON whole number (3 or 3.0), else None."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value
