"""Every JSON answer the test app gives is checked with a strict parser, as a JavaScript or Go client reads it.

``StrictJSONAnswers`` wraps the app's WSGI callable in the ``app`` fixture, so it sees the answers to
every test client (whatever its class) and fails the request that received an answer which is not
strict RFC 8259 JSON: not UTF-8, ``NaN``/``Infinity``, or a number no IEEE 754 double can hold
(``1e400``, which JavaScript turns into Infinity and Go refuses).
"""

from __future__ import annotations

import json
import math
import sys

_DOUBLE_MAX = sys.float_info.max


class NotStrictJSONAnswer(AssertionError):
    """An answer labelled JSON that a strict parser refuses."""


def _refuse_constant(name: str):
    raise NotStrictJSONAnswer(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotStrictJSONAnswer(f"the number {text[:40]} is beyond a double's range")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > 309 or abs(int(text)) > _DOUBLE_MAX:
        raise NotStrictJSONAnswer(f"the number {text[:40]}… is beyond a double's range")
    return int(text)


def is_json_media_type(content_type: str) -> bool:
    mimetype = content_type.split(";", 1)[0].strip().lower()
    return mimetype == "application/json" or (mimetype.startswith("application/") and mimetype.endswith("+json"))


def parse_strictly(body: bytes):
    """The document in ``body``, or NotStrictJSONAnswer saying why a strict client would refuse it."""
    try:
        text = body.decode("utf-8")  # RFC 8259 §8.1: JSON between systems is UTF-8, without a BOM
    except UnicodeDecodeError as error:
        raise NotStrictJSONAnswer(f"not UTF-8: {error}") from None
    if text.startswith("\ufeff"):
        raise NotStrictJSONAnswer("starts with a byte order mark")
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float, parse_int=_bounded_int)
    except NotStrictJSONAnswer:
        raise
    except ValueError as error:
        raise NotStrictJSONAnswer(str(error)) from None


class StrictJSONAnswers:
    """WSGI middleware for tests: an answer with a JSON content type must parse strictly, or the request fails."""

    def __init__(self, wsgi_app):
        self.wsgi_app = wsgi_app

    def __call__(self, environ, start_response):
        answer = {}

        def remember(status, headers, exc_info=None):
            answer["status"], answer["headers"] = status, headers
            return start_response(status, headers, exc_info)

        chunks = self.wsgi_app(environ, remember)
        try:
            body = b"".join(chunks)
        finally:
            if hasattr(chunks, "close"):
                chunks.close()
        content_type = next((value for name, value in answer.get("headers", ()) if name.lower() == "content-type"), "")
        if environ["REQUEST_METHOD"] != "HEAD" and is_json_media_type(content_type):
            try:
                parse_strictly(body)
            except NotStrictJSONAnswer as error:
                raise NotStrictJSONAnswer(
                    f"{environ['REQUEST_METHOD']} {environ.get('PATH_INFO')} answered {answer['status']} with "
                    f"{content_type} that a strict JSON parser refuses ({error}): {body[:300]!r}"
                ) from None
        return [body]
