"""W3C Trace Context (https://www.w3.org/TR/trace-context/): the ``traceparent`` and ``tracestate`` a producer
sends with a job, checked here before the job stores them and hands them to its workers.

``traceparent`` is ``version-trace_id-parent_id-flags`` in lowercase hex. Version ``00`` is exactly that (55
characters); a later version may add fields after a ``-`` and is kept as sent, as the recommendation asks of a
receiver that knows only ``00``; version ``ff``, an all-zero trace or parent id, or uppercase hex is malformed.
``tracestate`` is a list of up to 32 ``key=value`` members, separated by commas, at most 512 characters: what
the recommendation asks a receiver to pass on whole. It means something only beside a ``traceparent``.
"""

from __future__ import annotations

import re

TRACEPARENT_MAX = 256
TRACESTATE_MAX = 512
TRACESTATE_MEMBERS = 32

_TRACEPARENT = re.compile(r"(?P<version>[0-9a-f]{2})-(?P<trace>[0-9a-f]{32})-(?P<parent>[0-9a-f]{16})-[0-9a-f]{2}")
_KEY = re.compile(r"[a-z0-9][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13}")
_VALUE = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")

TRACEPARENT_HINT = (
    "must be a W3C traceparent: version-trace_id-parent_id-flags in lowercase hex, "
    "e.g. 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
)
TRACESTATE_HINT = (
    f"must be a W3C tracestate: up to {TRACESTATE_MEMBERS} key=value members separated by commas, "
    f"at most {TRACESTATE_MAX} characters"
)


def traceparent_problem(value: str) -> str | None:
    """Why ``value`` is not a traceparent queuelog can carry; None when it is one."""
    if len(value) > TRACEPARENT_MAX:
        return f"{TRACEPARENT_HINT} (at most {TRACEPARENT_MAX} characters)"
    found = _TRACEPARENT.match(value)
    if found is None or found["version"] == "ff":
        return TRACEPARENT_HINT
    if found["version"] == "00" and len(value) != 55:
        return TRACEPARENT_HINT
    if len(value) > 55 and value[55] != "-":  # a later version's further fields follow a '-'
        return TRACEPARENT_HINT
    if set(found["trace"]) == {"0"} or set(found["parent"]) == {"0"}:
        return "must not have an all-zero trace_id or parent_id (W3C: such a traceparent is invalid)"
    return None


def tracestate_problem(value: str) -> str | None:
    """Why ``value`` is not a tracestate queuelog can carry; None when it is one."""
    if len(value) > TRACESTATE_MAX:
        return TRACESTATE_HINT
    members = [member.strip(" \t") for member in value.split(",")]
    members = [member for member in members if member]  # empty members are allowed, and dropped
    if len(members) > TRACESTATE_MEMBERS:
        return TRACESTATE_HINT
    keys = []
    for member in members:
        key, equals, member_value = member.partition("=")
        if not equals or not _KEY.fullmatch(key) or not _VALUE.fullmatch(member_value):
            return TRACESTATE_HINT
        keys.append(key)
    if len(keys) != len(set(keys)):
        return "must not name a key twice (W3C tracestate)"
    return None
