"""Turning the queue's refusals into problem+json on API routes."""
from __future__ import annotations

from ..errors import InvalidRequest, QueueError
from . import bp
from .problems import problem
from .schemas import MalformedJSON


@bp.errorhandler(QueueError)
def queue_refused(error: QueueError):
    extra = dict(error.extra)
    if isinstance(error, InvalidRequest):
        extra["errors"] = error.errors
    return problem(error.status, error.title, error.detail, **extra)


@bp.errorhandler(MalformedJSON)
def malformed_json(error: MalformedJSON):
    return problem(400, "Malformed JSON", str(error))
