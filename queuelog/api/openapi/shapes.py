"""The building blocks of the document's JSON Schemas: the names and patterns the server matches, and small
constructors (a NUL-free text, a nullable, a closed object, a time).

A leaf of this package: it imports nothing of it, and every other module of it builds on this one.
"""

from __future__ import annotations

from typing import Any

from ...core import patterns
from ...states import EVENT_NAMES, STATUS_NAMES
from .. import limits

Schema = dict[str, Any]

STATUSES = list(STATUS_NAMES)
PRIORITY_LABELS = list(patterns.PRIORITY_LABELS)
# The event names a job's log may hold, one per kind of state change (states.Event).
EVENTS = list(EVENT_NAMES)
MAX_JOB_ID = limits.MAX_JOB_ID

# The very patterns the parsers match (queuelog/patterns.py writes them so ECMA-262 reads them alike).
TYPE_PATTERN = patterns.JOB_TYPE_PATTERN
IDEMPOTENCY_KEY_PATTERN = patterns.IDEMPOTENCY_KEY_PATTERN
PRIORITY_PATTERN = patterns.PRIORITY_LABEL_PATTERN  # the labels in any case: "high", "High", "HIGH"
REF_PATTERN = limits.REF.pattern
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


def integer(low: int, high: int, description: str) -> Schema:
    return {"type": "integer", "minimum": low, "maximum": high, "description": description}
