"""The JSON API: producers enqueue, workers claim and finish, admins oversee."""

from flask import Blueprint

bp = Blueprint("api", __name__)

from . import errors, openapi, routes, schedule_routes, type_routes, worker_routes  # noqa: E402,F401  (routes register themselves)
