"""Request bodies read as strict RFC 8259 JSON whose every number a client in any language can hold.

Python's json module reads ``NaN`` and ``Infinity`` (not JSON at all) and turns ``1e400`` into
float('inf'); stored, either comes back in every later answer as ``Infinity``, which the strict
parsers of JavaScript or Go reject, so a worker could not even read its claim. Numbers are therefore
held to IEEE 754 double's finite range, the range every JSON implementation shares.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

_DOUBLE_MAX = sys.float_info.max
_DIGITS_OF_DOUBLE_MAX = len(str(int(_DOUBLE_MAX)))
_SHOWN_DIGITS = 24


class NotStrictJSON(ValueError):
    """The body is not strict JSON; ``errors`` points at each offending value when it can."""

    def __init__(self, detail: str, errors: list[dict] | None = None):
        super().__init__(detail)
        self.errors = errors


class _OutOfRange:
    """Stands in for a number out of range while parsing, so its place in the document can be named."""

    def __init__(self, text: str):
        self.text = text


def loads(raw: bytes) -> Any:
    """Parse ``raw``; NaN/Infinity literals and numbers beyond ±1.7976931348623157e308 raise NotStrictJSON."""
    found: list[_OutOfRange] = []

    def finite_float(text: str):
        value = float(text)
        if math.isfinite(value):
            return value
        found.append(_OutOfRange(text))
        return found[-1]

    def bounded_int(text: str):
        digits = len(text.lstrip("-"))
        # More digits than the largest double is out of range, decided before int(), which refuses numbers
        # past 4300 digits itself (with a message about Python, not about JSON).
        if digits < _DIGITS_OF_DOUBLE_MAX or (digits == _DIGITS_OF_DOUBLE_MAX and abs(int(text)) <= _DOUBLE_MAX):
            return int(text)
        found.append(_OutOfRange(text))
        return found[-1]

    document = json.loads(raw, parse_constant=_refuse_constant, parse_float=finite_float, parse_int=bounded_int)
    if found:
        errors = [
            {"pointer": pointer, "detail": _out_of_range_detail(value.text)}
            for pointer, value in _out_of_range_values(document)
        ]
        raise NotStrictJSON("; ".join(f"{e['pointer'] or '/'}: {e['detail']}" for e in errors), errors)
    return document


def _refuse_constant(name: str):
    raise NotStrictJSON(f"{name} is not a JSON value")


def _out_of_range_detail(text: str) -> str:
    shown = text if len(text) <= _SHOWN_DIGITS else text[:_SHOWN_DIGITS] + f"… ({len(text)} characters)"
    return f"the number {shown} is outside the finite range of a double (±{_DOUBLE_MAX!r})"


def _out_of_range_values(document: Any) -> list[tuple[str, _OutOfRange]]:
    """Each stand-in with its JSON pointer (RFC 6901), in document order, found without recursion."""
    found = []
    stack = [("", document)]
    while stack:
        pointer, value = stack.pop()
        if isinstance(value, _OutOfRange):
            found.append((pointer, value))
        elif isinstance(value, dict):
            stack.extend((f"{pointer}/{_escape(key)}", child) for key, child in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((f"{pointer}/{index}", child) for index, child in reversed(list(enumerate(value))))
    return found


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
