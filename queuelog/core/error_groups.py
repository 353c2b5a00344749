"""An error's group: its first line with the parts that change from job to job masked, so that
``Timeout after 30s talking to 10.0.0.7`` and ``Timeout after 12s talking to 10.0.0.9`` are one cause.

The line: the first non-blank line of the error, but for a Python traceback (whose first line is always
``Traceback (most recent call last):``) its last non-blank line, the exception. The rules, in this order:

1. UUIDs (``123e4567-e89b-12d3-a456-426614174000``) → ``<uuid>``
2. e-mail addresses, with the angle brackets around them if any (``<bob@example.com>``) → ``<email>``
3. IPv4 addresses, with a port if any (``10.0.0.7:5432``) → ``<ip>``
4. hex numbers: ``0x`` followed by hex digits, or 8 or more hex digits holding a digit and a letter
   (``deadbeef01``, a git sha) → ``<hex>``
5. quoted values, in single, double or back quotes (``'customer_42'``, ``"abc"``) → ``<str>``
6. numbers, whole, decimal or dotted, not glued to a letter before them (``30`` in ``30s``, ``-2.5``,
   ``5.1.1``; not the ``8`` of ``utf8`` nor the ``2`` of ``HTTP2``) → ``<n>``
7. runs of spaces become one space; the result is cut to ERROR_GROUP_CHARS characters.

A job with no error text is in the group ``(no error message)``. The group is worked out once, when a
failure is written (``queuelog.sql.values.Leave``), and stored in ``jobs.error_group``, indexed, so the
Top errors page groups stored values instead of reading every error.
"""

from __future__ import annotations

import re

ERROR_GROUP_CHARS = 200
NO_MESSAGE = "(no error message)"
_TRACEBACK = "Traceback (most recent call last)"

_RULES = (
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"), "<uuid>"),
    (re.compile(r"<[\w.+-]+@[\w-]+(?:\.[\w-]+)+>|\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b"), "<email>"),
    (re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?\b"), "<ip>"),
    (re.compile(r"\b0[xX][0-9a-fA-F]+\b|\b(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b"), "<hex>"),
    (re.compile(r"'[^']*'|\"[^\"]*\"|`[^`]*`"), "<str>"),
    (re.compile(r"(?<![A-Za-z0-9_<])-?\d+(?:\.\d+)*"), "<n>"),
    (re.compile(r"\s+"), " "),
)


def error_group(error: str | None) -> str:
    """The group of ``error``: its first line, masked by the rules above."""
    lines = [line.strip() for line in (error or "").splitlines() if line.strip()]
    line = lines[-1] if lines and lines[0].startswith(_TRACEBACK) else (lines[0] if lines else "")
    if not line:
        return NO_MESSAGE
    for pattern, mask in _RULES:
        line = pattern.sub(mask, line)
    line = line.strip()
    return line if len(line) <= ERROR_GROUP_CHARS else line[: ERROR_GROUP_CHARS - 1] + "…"
