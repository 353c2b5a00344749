"""Browser-facing safety for the pages: security headers and a readable answer to a stale form."""

from __future__ import annotations

from flask import abort, render_template, request
from flask_wtf.csrf import CSRFError

from ..core.problems import problem
from ..http_errors import wants_page
from . import bp

# No inline script or style anywhere: the pages load one script and one stylesheet from /static, so an
# injected <script> or style attribute does nothing even if escaping ever failed.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)

PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # same-origin, not no-referrer: Flask-WTF checks the Referer of form posts made over HTTPS.
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=(), payment=()",
}


@bp.after_app_request
def add_security_headers(response):
    """Pages (and their assets and error pages) get the headers; the JSON API keeps its own."""
    if not wants_page():
        return response
    for name, value in PAGE_HEADERS.items():
        response.headers.setdefault(name, value)
    if not request.path.startswith("/static"):
        # Job data and key names must not linger in shared or back/forward caches.
        response.headers["Cache-Control"] = "no-store"
    return response


@bp.before_request
def refuse_nul_characters():
    """A NUL in a path, query or form value is a 400 page.

    PostgreSQL text cannot hold NUL, so such a value could never match a row, and binding it fails in the
    driver (a 500); refusing it on SQLite too keeps both databases answering alike.
    """
    values = [value for _, values in (*request.args.lists(), *request.form.lists()) for value in values]
    values += [value for value in (request.view_args or {}).values() if isinstance(value, str)]
    if any("\x00" in value for value in values):
        abort(400, description="Text in the address or a form may not contain NUL characters.")


@bp.app_errorhandler(CSRFError)
def csrf_refused(error: CSRFError):
    """A form without a valid token (forged, or left open too long): refuse it, and say what to do."""
    if not wants_page():
        return problem(400, "Bad request", error.description)
    detail = (
        "This form was refused because its security token is missing or has expired. "
        "Go back, reload the page and try again."
    )
    return render_template("error.html", code=400, title="Form expired or forged", detail=detail), 400
