"""Finding jobs by a value in their payload: a JSON path and a JSON value, compared as JSON values.

A path is keys joined by dots, each key optionally followed by array indexes: ``customer_id``,
``order.customer.id``, ``items[0].sku`` (a leading ``$.`` is allowed too). A key is letters, digits,
``_`` and ``-``. The value is JSON: ``42``, ``"abc"``, ``true``, ``false``, ``null``; text that is not JSON
is taken as a string, so ``abc`` finds ``"abc"``. ``42`` finds 42 and 42.0 but not ``"42"``.

Payloads are stored as JSON text; each dialect reads them with its own JSON functions (SQLite's
``json_type``/``json_extract``, PostgreSQL's ``jsonb`` ``->``), named here side by side. Neither can use an
index: the other filters narrow the jobs a payload filter reads.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from sqlalchemy import text

MAX_PATH_CHARS = 200
MAX_DEPTH = 16

_KEY = r"[A-Za-z0-9_-]+"
_STEP = re.compile(rf"({_KEY})((?:\[[0-9]{{1,6}}\])*)")
_INDEX = re.compile(r"\[([0-9]+)\]")

# SQLite: json_type says what the path holds ('integer', 'real', 'text', 'true', 'false', 'null', …; NULL
# when nothing is there), so 42 and "42", or true and 1, are told apart; json_extract gives its SQL value.
SQLITE_NULL_OR_BOOL = "json_type(payload, :payload_path) = :payload_kind"
SQLITE_NUMBER = (
    "json_type(payload, :payload_path) IN ('integer', 'real') AND json_extract(payload, :payload_path) = :payload_value"
)
SQLITE_TEXT = "json_type(payload, :payload_path) = 'text' AND json_extract(payload, :payload_path) = :payload_value"
# PostgreSQL: jsonb equality compares JSON values (numbers by value, strings exactly); ``->`` takes a key
# (text) or an array index (integer), so each step is cast to the one it is.
POSTGRESQL_EQUALS = "(CAST(payload AS jsonb){steps}) = CAST(:payload_json AS jsonb)"


@dataclass(frozen=True)
class PayloadMatch:
    """Jobs whose payload holds ``value`` at ``steps`` (keys as str, array indexes as int)."""

    steps: tuple[str | int, ...]
    value: object

    @classmethod
    def parse(cls, path: str, value: str) -> PayloadMatch:
        """Both halves of the filter, or ValueError with a message an operator can act on."""
        return cls(parse_path(path), parse_value(value))

    def condition(self, dialect: str):
        """The WHERE clause for ``dialect`` ('sqlite' or 'postgresql')."""
        if dialect == "postgresql":
            steps, values = "", {"payload_json": json.dumps(self.value)}
            for n, step in enumerate(self.steps):
                kind = "integer" if isinstance(step, int) else "text"
                steps += f" -> CAST(:payload_step_{n} AS {kind})"
                values[f"payload_step_{n}"] = step
            return text(POSTGRESQL_EQUALS.format(steps=steps)).bindparams(**values)
        path = "$" + "".join(f"[{step}]" if isinstance(step, int) else f'."{step}"' for step in self.steps)
        if self.value is None or isinstance(self.value, bool):
            kind = "null" if self.value is None else ("true" if self.value else "false")
            return text(SQLITE_NULL_OR_BOOL).bindparams(payload_path=path, payload_kind=kind)
        statement = SQLITE_TEXT if isinstance(self.value, str) else SQLITE_NUMBER
        return text(statement).bindparams(payload_path=path, payload_value=self.value)


def parse_path(path: str) -> tuple[str | int, ...]:
    """``order.items[0].sku`` → ('order', 'items', 0, 'sku'); ValueError saying what is wrong."""
    source = path.strip()
    if source.startswith("$."):
        source = source[2:]
    if not source:
        raise ValueError("give a path, e.g. customer_id or order.customer.id")
    if len(source) > MAX_PATH_CHARS:
        raise ValueError(f"a path has at most {MAX_PATH_CHARS} characters")
    steps: list[str | int] = []
    for part in source.split("."):
        match = _STEP.fullmatch(part)
        if not match:
            raise ValueError(
                f"{part!r} is not a path step: write keys of letters, digits, '_' or '-', joined by "
                "dots, with array indexes as [0] (e.g. order.items[0].sku)"
            )
        steps.append(match.group(1))
        steps += [int(index) for index in _INDEX.findall(match.group(2))]
    if len(steps) > MAX_DEPTH:
        raise ValueError(f"a path goes at most {MAX_DEPTH} steps deep")
    return tuple(steps)


def parse_value(value: str) -> object:
    """The JSON value to compare with: a number, a string, true, false or null; text that is not JSON is a string."""
    try:
        parsed = json.loads(value, parse_constant=_refuse_constant)
    except ValueError:
        return value
    if isinstance(parsed, dict | list):
        raise ValueError("compare with one value (a number, a string, true, false or null), not an object or a list")
    if isinstance(parsed, float) and not math.isfinite(parsed):
        raise ValueError("a number must be finite")
    if isinstance(parsed, int) and not isinstance(parsed, bool) and not -(2**63) <= parsed < 2**63:
        raise ValueError("that number is too large to compare (at most 19 digits)")
    return parsed


def _refuse_constant(name: str):
    raise ValueError(name)
