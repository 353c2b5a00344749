"""The admin web pages under /admin: sign-in, dashboard, jobs, top errors, scheduled jobs, job types, workers,
schedules, API keys.

Pages only read (``stats``, ``listing``) and call the queue's operations; they never write job state.
"""

from flask import Blueprint

bp = Blueprint("ui", __name__)

# Imported for their side effect of registering views, hooks and filters on ``bp``.
from . import (  # noqa: E402,F401
    auth,
    bulk_routes,
    error_routes,
    helpers,
    job_routes,
    key_routes,
    routes,
    schedule_routes,
    scheduled_routes,
    security,
    type_routes,
    worker_routes,
)
