"""The operators' endpoints: Prometheus metrics, liveness and readiness. Each view is tiny."""

from __future__ import annotations

import hmac
import logging

from flask import Blueprint, Response, current_app, g, jsonify, request
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from sqlalchemy.exc import SQLAlchemyError

from ..auth.keys import authenticate
from ..core.problems import problem
from ..database.schema_upgrade import schema_is_current
from ..models import Role
from . import db_health, metrics

bp = Blueprint("ops", __name__)
log = logging.getLogger("queuelog.ops")

_NO_STORE = {"Cache-Control": "no-store"}


@bp.get("/metrics")
def metrics_view():
    """Every metric in the Prometheus text format, for an admin key or the configured metrics token."""
    refusal = _refuse_scraper()
    if refusal is not None:
        return refusal
    try:
        body = metrics.exposition()
    except metrics.CountersUnreadable as error:
        log.warning("metrics: the workers' counter files could not be read (%s)", error)
        return problem(
            503,
            "Service unavailable",
            "the workers' counters could not be read just now; retry shortly",
            headers={"Retry-After": "1", **_NO_STORE},
        )
    return Response(body, content_type=CONTENT_TYPE_PLAIN_0_0_4, headers=_NO_STORE)


@bp.get("/healthz")
def healthz():
    """Liveness: the process answers. Touches no database, so a database outage never restarts the server."""
    return jsonify(status="ok"), 200, _NO_STORE


@bp.get("/readyz")
def readyz():
    """Readiness: the database answers and its schema is at the newest migration; else 503.

    A transaction holding back vacuum past DB_XACT_WARN_SECONDS is said in ``warnings``, and the answer stays
    200: this server still serves well, and taking it out of its load balancer would not end that transaction.
    """
    try:
        current = schema_is_current()
        held = db_health.long_transaction() if current else None
    except SQLAlchemyError as error:
        log.warning("readyz: the database is not answering (%s)", error.__class__.__name__)
        return problem(
            503, "Service unavailable", "the database is not answering", headers={"Retry-After": "5", **_NO_STORE}
        )
    if not current:
        return problem(
            503,
            "Service unavailable",
            "the database schema is not at the newest migration; run 'flask db upgrade'",
            headers={"Retry-After": "5", **_NO_STORE},
        )
    if held is not None:
        return jsonify(status="ok", warnings=[db_health.readiness_warning(held)]), 200, _NO_STORE
    return jsonify(status="ok"), 200, _NO_STORE


def _refuse_scraper() -> Response | None:
    """None when the bearer token is the metrics token or an admin key; else the 401/403 problem."""
    scheme, _, secret = request.headers.get("Authorization", "").partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret:
        return problem(
            401,
            "Unauthenticated",
            "send an admin API key or the metrics token as 'Authorization: Bearer …'",
            headers={"WWW-Authenticate": 'Bearer realm="queuelog"'},
        )
    token = current_app.config["METRICS_TOKEN"]
    # Constant-time comparison, so response timing tells a guesser nothing about the token.
    if token and hmac.compare_digest(secret.encode(), str(token).encode()):
        return None
    caller = authenticate(secret)
    if caller is None:
        return problem(
            401,
            "Unauthenticated",
            "the API key or metrics token is unknown or revoked",
            headers={"WWW-Authenticate": 'Bearer realm="queuelog", error="invalid_token"'},
        )
    g.caller = caller  # so the request's log line names the key
    if caller.role != Role.ADMIN.value:
        return problem(
            403, "Forbidden", f"a {caller.role} key cannot read metrics; it needs an admin key or the metrics token"
        )
    return None
