"""RFC 9457 problem details: the one way the API reports an error.

Below every layer that answers HTTP (the API, the pages' security headers, /metrics and the health checks,
the app-wide error handlers, gunicorn's own refusals), so each builds the same body and /metrics labels a
refusal with the same slug as its type.
"""

from __future__ import annotations

from flask import Response, json

PROBLEM_TYPE_BASE = "https://queuelog.dev/problems/"

TYPE_SLUGS = {
    400: "malformed-request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    409: "conflict",
    413: "payload-too-large",
    415: "unsupported-media-type",
    422: "validation-failed",
    429: "too-many-requests",
    500: "internal-error",
    503: "service-unavailable",
}


def problem(status: int, title: str, detail: str, headers: dict | None = None, **extra) -> Response:
    """Build an application/problem+json response; ``status`` in the body always equals the HTTP status."""
    body = {
        "type": PROBLEM_TYPE_BASE + TYPE_SLUGS.get(status, "error"),
        "title": title,
        "status": status,
        "detail": detail,
    }
    body.update({key: value for key, value in extra.items() if value is not None})
    response = Response(json.dumps(body), status=status, mimetype="application/problem+json")
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response
