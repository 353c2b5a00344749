"""Reading a request body: JSON only, strict, bounded in size and depth; and collecting every field's problems.

The parsers (job_bodies.py, worker_bodies.py, type_bodies.py, and the /workers and /schedules views) are
built from these pieces; ``parse_empty`` is the one for actions without a body.
"""

from __future__ import annotations

import re
from typing import Any

from flask import request
from werkzeug.exceptions import RequestEntityTooLarge

from ..core.errors import InvalidRequest
from . import strict_json

# Deeper documents would hit Python's recursion limit somewhere between parsing and answering (a 500).
MAX_JSON_DEPTH = 64


class MalformedJSON(Exception):
    """The body is not JSON at all (400), as opposed to JSON with wrong fields (422)."""

    def __init__(self, detail: str, errors: list[dict] | None = None):
        super().__init__(detail)
        self.errors = errors  # pointers to the offending values, when they can be named


class NotJSONMediaType(Exception):
    """A body sent as something other than JSON (415): it is refused, never guessed at."""


def _whole_body() -> bytes:
    """The request body, or RequestEntityTooLarge (413) when it is over MAX_CONTENT_LENGTH, however it was sent."""
    raw = request.get_data(cache=True)
    limit = request.max_content_length
    # Sent without a Content-Length (chunked), a body is read only up to the limit, and Werkzeug hands over
    # those bytes as if they were all: one byte more from the server's stream tells a body cut at the limit
    # from one of exactly that size.
    if (
        request.content_length is None
        and limit is not None
        and len(raw) >= limit
        and request.environ["wsgi.input"].read(1)
    ):
        raise RequestEntityTooLarge()
    return raw


def json_body(required: bool = True) -> dict:
    """The request body as a JSON object; an empty body (no bytes) counts as {} where that is allowed."""
    raw = _whole_body()
    # Only no bytes at all is no body. Whitespace alone is not a JSON text (RFC 8259: ws value ws), so a
    # body of a newline is malformed JSON (400) like any other, not an action taken as if nothing was sent.
    if not raw:
        if required:
            raise InvalidRequest([{"pointer": "", "detail": "a JSON object body is required"}])
        # Nothing to interpret, so no Content-Type is needed: `curl -X POST …/claim` sends none.
        return {}
    if not request.is_json:
        # application/json, with parameters such as charset, or an application/…+json type (Flask's rule).
        # A form or text body that happens to parse as JSON is refused rather than guessed at: its sender
        # said it was something else.
        sent = request.headers.get("Content-Type", "").strip()
        raise NotJSONMediaType(
            f"the body must be sent as Content-Type: application/json, not {sent!r}"
            if sent
            else "the body has no Content-Type; send it as Content-Type: application/json"
        )
    try:
        # NaN, Infinity and numbers beyond a double (1e400) would be echoed back as invalid JSON.
        body = strict_json.loads(raw)
    except strict_json.NotStrictJSON as exc:
        raise MalformedJSON(f"the body is not valid JSON: {exc}", exc.errors) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedJSON(f"the body is not valid JSON: {exc}") from None
    except RecursionError:
        raise MalformedJSON(f"the body is nested too deeply (the limit is {MAX_JSON_DEPTH} levels)") from None
    if not isinstance(body, dict):
        raise InvalidRequest([{"pointer": "", "detail": "the body must be a JSON object"}])
    return body


def _too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when objects/arrays nest more than ``limit`` levels (checked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


class Fields:
    """Collects field problems so a client learns about all of them in one response."""

    def __init__(self, body: dict, allowed: set[str], prefix: str = ""):
        self.body, self.prefix, self.errors = body, prefix, []
        for name in body:
            if name not in allowed:
                self.error(name, "unknown field")

    def error(self, name: str, detail: str) -> None:
        self.errors.append({"pointer": f"{self.prefix}/{name}", "detail": detail})

    def string(
        self, name: str, required=False, pattern: re.Pattern | None = None, hint: str = "", nul_ok: bool = False
    ) -> str | None:
        value = self.body.get(name)
        if value is None:
            if required:
                self.error(name, "is required")
            return None
        if not isinstance(value, str):
            self.error(name, "must be a string")
            return None
        if "\x00" in value and not nul_ok:
            # PostgreSQL text cannot hold NUL; refusing it here keeps both databases alike (not a 500).
            self.error(name, "must not contain NUL characters")
            return None
        if _lone_surrogates(value):
            # Half a UTF-16 pair (JSON "\ud800") cannot be encoded for either database: 422, not a 500.
            # A worker's error text is cleaned instead, like its NULs.
            if not nul_ok:
                self.error(name, "must not contain unpaired surrogates")
                return None
            value = value.encode("utf-8", "replace").decode("utf-8")
        # fullmatch, not match: "$" also matches before a trailing newline ("email\n" passed).
        if pattern is not None and not pattern.fullmatch(value):
            self.error(name, hint or "has an invalid format")
            return None
        return value

    def integer(self, name: str, default: int | None, low: int, high: int) -> int | None:
        value = self.body.get(name)
        if value is None:
            return default
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # JSON has one number type: 3.0 is the integer 3 (as JSON Schema says)
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(name, "must be an integer")
            return default
        if not low <= value <= high:
            self.error(name, f"must be between {low} and {high}")
            return default
        return value

    def number(self, name: str, default: float | None, low: float, high: float) -> float | None:
        value = self.body.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.error(name, "must be a number")
            return default
        if not low <= value <= high:
            self.error(name, f"must be between {low} and {high}")
            return default
        return float(value)

    def boolean(self, name: str, default: bool) -> bool:
        value = self.body.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.error(name, "must be true or false")
            return default
        return value

    def obj(self, name: str, default: Any) -> dict | None:
        value = self.body.get(name)
        if value is None:
            return default
        if not isinstance(value, dict):
            self.error(name, "must be a JSON object")
            return default
        if _too_deep(value):
            self.error(name, f"is nested more than {MAX_JSON_DEPTH} levels deep")
            return default
        return value

    def done(self) -> None:
        if self.errors:
            raise InvalidRequest(self.errors)


def _lone_surrogates(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def parse_empty() -> None:
    """Actions without parameters still refuse unknown fields rather than ignore them."""
    Fields(json_body(required=False), set()).done()
