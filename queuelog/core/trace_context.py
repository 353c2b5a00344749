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

#: A traceparent, as the API's document and the server both check it: version 00 exactly, or a later version
#: (not ff) with any further fields after a '-'. Written without lookaheads, which not every JSON Schema tool
#: can generate from; so the all-zero trace and parent ids, which W3C also calls invalid, are checked apart.
_IDS = "-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}"
_LATER_VERSION = "(?:0[1-9a-f]|[1-9a-e][0-9a-f]|f[0-9a-e])"
TRACEPARENT_PATTERN = f"^(?:00{_IDS}|{_LATER_VERSION}{_IDS}(?:-[!-~]*)?)$"
TRACEPARENT = re.compile(TRACEPARENT_PATTERN)
_ALL_ZERO = re.compile(r"^[0-9a-f]{2}-(?:0{32}-[0-9a-f]{16}|[0-9a-f]{32}-0{16})-")
#: A tracestate: up to 32 comma-separated members (empty ones allowed, spaces around the commas), each
#: key=value: a key is lowercase (tenant@system for a multi-tenant one), a value printable ASCII without ',' or
#: '=' that does not end in a space. No space before the first member or after the last: a header cannot start
#: or end with one.
_KEY = "(?:[a-z][_0-9a-z*/-]{0,255}|[a-z0-9][_0-9a-z*/-]{0,240}@[a-z][_0-9a-z*/-]{0,13})"
_MEMBER = rf"{_KEY}=[ -+\--<>-~]{{0,255}}[!-+\--<>-~]"
TRACESTATE_PATTERN = f"^(?:{_MEMBER})?(?:[ \t]*,[ \t]*(?:{_MEMBER})?){{0,{TRACESTATE_MEMBERS - 1}}}$"
TRACESTATE = re.compile(TRACESTATE_PATTERN)

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
    if not TRACEPARENT.fullmatch(value):
        return TRACEPARENT_HINT
    if _ALL_ZERO.match(value):
        return "must not have an all-zero trace_id or parent_id (W3C: such a traceparent is invalid)"
    return None


def tracestate_problem(value: str) -> str | None:
    """Why ``value`` is not a tracestate queuelog can carry; None when it is one."""
    if len(value) > TRACESTATE_MAX or not TRACESTATE.fullmatch(value.strip(" \t")):
        return TRACESTATE_HINT
    keys = [member.split("=", 1)[0].strip(" \t") for member in value.split(",") if member.strip(" \t")]
    if len(keys) != len(set(keys)):
        return "must not name a key twice (W3C tracestate)"
    return None
