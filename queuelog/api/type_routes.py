"""API views of job types (queues) and their flow control: admin keys only. Parse, one queue call, respond."""

from __future__ import annotations

from flask import jsonify

from ..models import Role
from ..queue import flow
from . import bp
from .auth import current_caller, require_role
from .body import parse_empty
from .serialize import type_json
from .type_bodies import parse_type_patch

ADMIN = Role.ADMIN.value


@bp.get("/types")
@require_role(ADMIN)
def list_types():
    """Every type of QUEUELOG_JOB_TYPES with its flow control and its pending and running jobs."""
    return jsonify({"types": [type_json(state) for state in flow.list_types()]})


@bp.get("/types/<job_type>")
@require_role(ADMIN)
def get_type(job_type: str):
    """One type (404 for a type not on QUEUELOG_JOB_TYPES)."""
    return jsonify(type_json(flow.get_type(job_type)))


@bp.patch("/types/<job_type>")
@require_role(ADMIN)
def update_type(job_type: str):
    """Pause or resume a type, set or clear its limits and its push target; answers the type as it now is
    (with ``push.secret`` when this change set a first push target: shown this once)."""
    wanted = parse_type_patch()
    return jsonify(type_json(flow.update_type(job_type, wanted, current_caller().actor)))


@bp.post("/types/<job_type>/push/rotate")
@require_role(ADMIN)
def rotate_push_secret(job_type: str):
    """A new signing secret for the type's push target, in this answer only (``push.secret``); the old one
    signs beside it for 24 h. 409 when the type has no push target."""
    parse_empty()
    return jsonify(type_json(flow.rotate_push_secret(job_type, current_caller().actor)))


@bp.get("/types/<job_type>/history")
@require_role(ADMIN)
def type_history(job_type: str):
    """Every change of the type's flow control, newest first: when, who, each field's old and new value."""
    return jsonify({"history": [flow.change_json(change) for change in flow.history(job_type)]})
