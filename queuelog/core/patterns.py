"""The names every side of the queue checks alike: job type names, idempotency keys, priorities.

The API's parsers, the OpenAPI document, the worker runner, ``flask keys`` and the pages import them
from here. Each pattern is written once, in a form Python's ``re`` (always with ``fullmatch``) and
ECMA-262 (the regex dialect of JSON Schema) read alike, so the document quotes the very text the
parsers match. Status names come from the state machine (``queuelog.states.STATUS_NAMES``).
Nothing here touches the database or Flask: the worker runner imports it too.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable

__all__ = [
    "IDEMPOTENCY_KEY",
    "IDEMPOTENCY_KEY_HINT",
    "IDEMPOTENCY_KEY_PATTERN",
    "JOB_TYPE",
    "JOB_TYPE_HINT",
    "JOB_TYPE_PATTERN",
    "JSON_NUMBER",
    "JSON_NUMBER_PATTERN",
    "NO_NUL_PATTERN",
    "PRIORITY_BY_LABEL",
    "PRIORITY_LABELS",
    "PRIORITY_LABEL_PATTERN",
    "Priority",
    "one_of",
]


def one_of(names: Iterable[str]) -> str:
    """'low, medium, high or critical': choices as a message lists them."""
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


#: The characters of every name queuelog takes in a URL or a list: job types, schedules, a batch's refs.
NAME_CHARS = "A-Za-z0-9_.:-"
#: A name of 1-100 of those (a schedule's, a batch item's ref).
NAME_PATTERN = f"^[{NAME_CHARS}]{{1,100}}$"
#: A job type name (V-02): what QUEUELOG_JOB_TYPES, enqueue, claim, key limits and handlers accept.
JOB_TYPE_PATTERN = f"^[A-Za-z0-9][{NAME_CHARS}]{{0,99}}$"
JOB_TYPE = re.compile(JOB_TYPE_PATTERN)
JOB_TYPE_HINT = "1-100 characters: letters, digits, '_', '.', ':' or '-'"

#: Printable ASCII, space included: the IETF Idempotency-Key header's value is a structured-field
#: String, which allows exactly 0x20-0x7E (`[ -~]` is that range).
IDEMPOTENCY_KEY_PATTERN = "^[ -~]{1,200}$"
IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)
IDEMPOTENCY_KEY_HINT = "1-200 printable ASCII characters (0x20-0x7E, space included)"

#: A number as JSON (RFC 8259) writes one: what a client in any language prints for a double ("2.5", "1e1",
#: "1E-4", "0.0001"), and not what only Python's float() reads ("nan", "inf", " 5", "1_0", "+5", ".5").
JSON_NUMBER_PATTERN = r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?$"
JSON_NUMBER = re.compile(JSON_NUMBER_PATTERN)
#: A string without NUL, which PostgreSQL text cannot hold: the API refuses NUL in the strings it stores or
#: compares (422), on both databases alike.
NO_NUL_PATTERN = "^[^\\u0000]*$"


class Priority(enum.IntEnum):
    """Priority labels and the integers stored (gaps leave room for levels in between)."""

    LOW = 0
    MEDIUM = 10
    HIGH = 20
    CRITICAL = 30

    @classmethod
    def from_label(cls, label: str) -> Priority:
        return cls[label.strip().upper()]

    @classmethod
    def label_of(cls, value: int) -> str:
        try:
            return cls(value).name.lower()
        except ValueError:
            return str(value)


PRIORITY_LABELS: tuple[str, ...] = tuple(priority.name.lower() for priority in Priority)
#: Exactly the labels, in any case, through ``.lower()``: " high " or "hıgh" (which str.upper() turns
#: into HIGH) are not labels.
PRIORITY_BY_LABEL: dict[str, int] = {priority.name.lower(): priority.value for priority in Priority}
#: The labels in any case, for JSON Schema (which has no case-insensitive flag): "high", "High", "HIGH".
PRIORITY_LABEL_PATTERN = (
    "^(" + "|".join("".join(f"[{c.lower()}{c.upper()}]" for c in label) for label in PRIORITY_LABELS) + ")$"
)
