"""Turning the queue's refusals into problem+json on API routes."""

from __future__ import annotations

from flask import abort

from ..core.errors import InvalidRequest, QueueError
from ..core.problems import PROBLEM_TYPE_BASE, problem
from ..reads.queries import max_job_id
from . import bp
from .body import MalformedJSON, NotJSONMediaType


@bp.errorhandler(QueueError)
def queue_refused(error: QueueError):
    extra = dict(error.extra)
    if isinstance(error, InvalidRequest):
        extra["errors"] = error.errors
    if error.problem is not None:
        # A type of its own per limit (long-polls-full, so a worker can tell "come back later" from a database
        # that is down; enqueue-rate-exceeded, max-pending-reached, ...); the numbers ride along as members.
        extra["type"] = PROBLEM_TYPE_BASE + error.problem
    headers = None if error.retry_after is None else {"Retry-After": str(error.retry_after)}
    return problem(error.status, error.title, error.detail, headers=headers, **extra)


@bp.url_value_preprocessor
def job_id_in_range(endpoint, values):
    """An id the id column cannot hold is a path that names nothing, like /jobs/abc: 404, not a driver error."""
    if values and values.get("job_id", 0) > max_job_id():
        abort(404)


@bp.errorhandler(MalformedJSON)
def malformed_json(error: MalformedJSON):
    return problem(400, "Malformed JSON", str(error), errors=error.errors)


@bp.errorhandler(NotJSONMediaType)
def not_json_media_type(error: NotJSONMediaType):
    return problem(415, "Unsupported Media Type", str(error))
