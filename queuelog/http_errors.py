"""App-wide HTTP errors: problem+json for API clients, a readable page for people."""

from __future__ import annotations

import logging

from flask import Flask, render_template, request
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from werkzeug.exceptions import HTTPException

from .core.problems import problem

log = logging.getLogger("queuelog")

_PAGE_PREFIXES = ("/admin", "/static")
# How much of a refused body is read and dropped before answering 413 (see _discard_unread_body).
MAX_DISCARDED_BODY_BYTES = 16 * 1024 * 1024
_DISCARD_BLOCK = 64 * 1024


def wants_page() -> bool:
    """Pages live under /admin (and / redirects there); every other path is the API."""
    return request.path == "/" or request.path.startswith(_PAGE_PREFIXES)


def _discard_unread_body() -> None:
    """Read and drop what is left of a body refused as too large, up to MAX_DISCARDED_BODY_BYTES.

    A client still sending when the server closes the connection gets a reset (EPIPE) instead of the 413;
    draining lets it finish and read the answer. Past the bound, closing is cheaper than reading on.
    """
    stream = request.environ.get("wsgi.input")
    length = request.content_length
    chunked = "chunked" in request.headers.get("Transfer-Encoding", "").lower()
    if stream is None or (length is None and not chunked):
        return  # no framing: reading on could wait for a client that has nothing more to send
    budget = MAX_DISCARDED_BODY_BYTES if length is None else min(length, MAX_DISCARDED_BODY_BYTES)
    try:
        while budget > 0:
            block = stream.read(min(_DISCARD_BLOCK, budget))
            if not block:
                return
            budget -= len(block)
    except (OSError, ValueError):
        return  # the client went away: nothing left to protect


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException):
        if error.code == 413:
            _discard_unread_body()
        if wants_page():
            return render_template(
                "error.html", code=error.code, title=error.name, detail=error.description
            ), error.code
        headers = {}
        if error.code == 405 and error.valid_methods:
            headers["Allow"] = ", ".join(sorted(error.valid_methods))
        detail = {
            404: f"there is nothing at {request.path}",
            405: f"{request.method} is not allowed on {request.path}",
            413: f"the request body is larger than {app.config['MAX_CONTENT_LENGTH']} bytes",
        }.get(error.code, error.description)
        return problem(error.code, error.name, detail, headers=headers)

    @app.errorhandler(OperationalError)
    @app.errorhandler(InterfaceError)
    @app.errorhandler(PoolTimeout)
    def database_unavailable(error):
        # A database that is restarting or locked, or a connection pool that is exhausted, is a
        # temporary condition: 503, try again.
        log.warning("database error on %s %s: %s", request.method, request.path, error.__class__.__name__)
        if wants_page():
            return render_template(
                "error.html",
                code=503,
                title="Database unavailable",
                detail="The database is not answering. Try again shortly.",
            ), 503
        return problem(
            503, "Service unavailable", "the database is not answering; retry shortly", headers={"Retry-After": "2"}
        )

    @app.errorhandler(Exception)
    def unexpected(error: Exception):
        # Log the traceback here, never in a response body.
        log.exception("unhandled error on %s %s", request.method, request.path)
        if wants_page():
            return render_template(
                "error.html", code=500, title="Internal error", detail="Something went wrong on our side."
            ), 500
        return problem(500, "Internal Server Error", "an unexpected error occurred; it has been logged")
