"""Schemathesis hooks for tests/acceptance/http/test_schemathesis.py, loaded by its CLI run (SCHEMATHESIS_HOOKS).

Two things the document cannot say, said here per operation:

- ``RULES_NO_SCHEMA_CAN_SAY``: a request can match the document and still break a rule that only the server can
  check (a time in the past, a cursor it did not issue, the caller's own key name). Each is documented as a 422
  in the operation's text. positive_data_acceptance is told to let 422 pass on exactly these operations
  (``operation_settings``), and ``refused_only_for_rules_no_schema_can_say`` makes sure such a 422 names nothing
  but these rules: a schema-valid request refused for any other field still fails the run.
- ``keep_long_polls_short``: a valid ``wait`` may hold a request 30 s; the answer's shape is the same sooner.
"""

from __future__ import annotations

import re

import schemathesis
from schemathesis.core.failures import Failure

from queuelog.core.patterns import JSON_NUMBER

_JOB = r"(/jobs/\d+)?"  # a batch item's fields sit under /jobs/<index>
_ENQUEUE = {
    rf"{_JOB}/run_at": "within the years 1 to 9999 once in UTC: an offset can carry year 1 or 9999 past them",
    rf"{_JOB}/expires_at": "in the future and after run_at: the server's clock and another field decide",
    rf"{_JOB}/idempotency_key": "a key already used by this producer for a different request (or another header)",
    rf"{_JOB}/depends_on/\d+": "a parent must be a job the caller may see (or, in a batch, a ref with no cycle)",
    rf"{_JOB}/payload": "at most QUEUELOG_MAX_PAYLOAD_BYTES as compact JSON: no JSON Schema keyword counts bytes",
    rf"{_JOB}/traceparent": "no all-zero trace or parent id: said without a lookahead, which not every tool reads",
    rf"{_JOB}/tracestate": "no key twice: a pattern cannot compare one member with another",
}
_SCHEDULE = {
    "/cron": "the pattern gives the shape; values out of range, or an expression matching no time, only cronsim knows",
    "/timezone": "a canonical IANA name: the server's zoneinfo database decides",
    "/job/payload": "at most QUEUELOG_MAX_PAYLOAD_BYTES as compact JSON",
}
#: Operation → {JSON pointer (regex) → why no schema can say it}. Only these may refuse schema-valid data with 422.
RULES_NO_SCHEMA_CAN_SAY: dict[str, dict[str, str]] = {
    "GET /jobs": {"/query/cursor": "opaque: only a next_cursor this server issued is one"},
    "GET /schedules": {"/query/cursor": "opaque: only a next_cursor this server issued is one"},
    "POST /jobs": _ENQUEUE,
    "POST /jobs/batch": {**_ENQUEUE, r"/jobs/\d+/ref": "unique within the batch"},
    "POST /jobs/claim": {"/worker_id": "the calling key's own name, which the document cannot know"},
    "POST /jobs/{job_id}/heartbeat": {"/progress": "at most 4096 bytes as compact JSON"},
    "POST /schedules": _SCHEDULE,
    "PATCH /schedules/{name}": _SCHEDULE,
    "PATCH /types/{job_type}": {
        "/push/url": "a host that is, or resolves to, a public address, with a valid port: a lookup at the time decides"
    },
}


#: What the two data checks take for an answer, by default, and 414 besides: a request line over the production
#: server's 4094 bytes is refused with the 414 every operation documents, whatever its parameters' schemas say (a
#: limit on the whole URL, which no one parameter's schema can state). Fuzzing reaches it with long query arrays.
_ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "414", "429", "5xx"]
_REJECTED = ["400", "401", "403", "404", "405", "406", "409", "414", "415", "422", "428", "429", "5xx"]


def operation_settings() -> str:
    """schemathesis.toml: the checks' statuses above, and 422 allowed to positive_data_acceptance on exactly the
    operations of RULES_NO_SCHEMA_CAN_SAY."""
    checks = (
        f"[checks.positive_data_acceptance]\nexpected-statuses = {_ACCEPTED!r}\n"
        f"[checks.negative_data_rejection]\nexpected-statuses = {_REJECTED!r}\n"
    )
    operations = (
        f'[[operations]]\ninclude-name = "{name}"\n'
        f"checks.positive_data_acceptance.expected-statuses = {[*_ACCEPTED, '422']!r}\n"
        for name in RULES_NO_SCHEMA_CAN_SAY
    )
    return "\n".join([checks, *operations]).replace("'", '"')


class RefusedForAnotherReason(Failure):
    """A schema-valid request was refused with 422 for a field no documented server-side rule covers."""

    kind_title = "Schema-valid request refused for a field the document allows"

    def __init__(self, operation: str, pointers: list[str]):
        super().__init__(
            operation=operation,
            message=f"422 pointing at {', '.join(pointers)}: not one of the rules the operation "
            "documents as beyond its schema (tests/support/schemathesis_hooks.py)",
        )


@schemathesis.check
def refused_only_for_rules_no_schema_can_say(ctx, response, case):
    """A positive case refused with 422 on an operation above: every error points at one of its rules."""
    rules = RULES_NO_SCHEMA_CAN_SAY.get(case.operation.label)
    if rules is None or response.status_code != 422 or case.meta is None:
        return None
    if not case.meta.generation.mode.is_positive:
        return None
    errors = (response.json() or {}).get("errors") or [{"pointer": "(none)"}]
    others = [error["pointer"] for error in errors if not any(re.fullmatch(rule, error["pointer"]) for rule in rules)]
    if others:
        raise RefusedForAnotherReason(case.operation.label, others)
    return None


def _short(value) -> bool:
    """A valid wait that would hold the request: a number (or its text) above 0 and at most 30."""
    if isinstance(value, str) and JSON_NUMBER.fullmatch(value):
        value = float(value)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 30


@schemathesis.hook
def before_call(context, case, kwargs):
    """A claim's valid wait becomes 0 (answer at once); GET /jobs/{id}'s a hundredth of a second (it must be > 0)."""
    if case.operation.label == "POST /jobs/claim" and isinstance(case.body, dict) and _short(case.body.get("wait")):
        case.body["wait"] = 0
    if case.operation.label == "GET /jobs/{job_id}" and isinstance(case.query, dict) and _short(case.query.get("wait")):
        case.query["wait"] = 0.01
