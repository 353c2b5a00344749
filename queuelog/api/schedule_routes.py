"""API views of schedules: admin keys only. Parse, one schedules call, respond."""

from __future__ import annotations

from flask import jsonify

from .. import schedules
from ..models import Role
from . import bp
from .auth import current_caller, require_role
from .body import json_body, parse_empty
from .query_params import parse_page_query
from .serialize import job_json, schedule_json

ADMIN = Role.ADMIN.value


@bp.get("/schedules")
@require_role(ADMIN)
def list_schedules():
    """A page of schedules, by name; ``next_cursor`` (null on the last page) asks for the next."""
    query = parse_page_query()
    states, next_cursor = schedules.page_of_schedules(query.limit, query.cursor)
    return jsonify({"schedules": [schedule_json(state) for state in states], "next_cursor": next_cursor})


@bp.post("/schedules")
@require_role(ADMIN)
def create_schedule():
    """A new schedule (201); 422 with a pointer for a bad field; 409 for a name in use or the schedules cap."""
    state = schedules.create_schedule(json_body())
    return jsonify(schedule_json(state)), 201


@bp.get("/schedules/<name>")
@require_role(ADMIN)
def get_schedule(name: str):
    return jsonify(schedule_json(schedules.get_schedule(name)))


@bp.patch("/schedules/<name>")
@require_role(ADMIN)
def update_schedule(name: str):
    """Change any fields; resuming or a new timing moves the next tick to the first after now."""
    return jsonify(schedule_json(schedules.update_schedule(name, json_body())))


@bp.delete("/schedules/<name>")
@require_role(ADMIN)
def delete_schedule(name: str):
    """Delete the schedule (204); the jobs it enqueued stay."""
    schedules.delete_schedule(name)
    return "", 204


@bp.post("/schedules/<name>/run")
@require_role(ADMIN)
def run_schedule(name: str):
    """Enqueue the schedule's job once, now (201 with the job); its ticks stay as they are."""
    parse_empty()
    job = schedules.run_now(name, current_caller().actor)
    return jsonify(job_json(job, current_caller())), 201
