"""The Scheduled page: pending jobs that are not due yet, and an admin's "Run now" (through ``queuelog.queue``)."""

from __future__ import annotations

from flask import flash, redirect, url_for

from .. import queue
from ..core.clock import utcnow
from ..core.errors import QueueError
from . import bp, stats
from .auth import actor_name
from .forms import ActionForm
from .helpers import render_live
from .job_routes import _abort_unless_storable

SHOWN = 200


@bp.get("/admin/scheduled")
def scheduled():
    """Pending jobs whose run_at is still ahead (scheduled, or waiting out a retry's backoff), soonest first."""
    now = utcnow()
    count, rows = stats.scheduled_jobs(now, SHOWN)
    return render_live(
        "scheduled.html", "_scheduled_live.html", rows=rows, count=count, shown=SHOWN, action_form=ActionForm(), now=now
    )


@bp.post("/admin/jobs/<int:job_id>/run-now")
def run_job_now(job_id: int):
    """A pending job scheduled for later becomes due now; written to its event log as the admin."""
    _abort_unless_storable(job_id)
    if ActionForm().validate_on_submit():
        try:
            queue.run_now(job_id, actor_name())
        except QueueError as error:
            flash(error.detail[:1].upper() + error.detail[1:] + ".", "error")
        else:
            flash(f"Job {job_id} is due now; the next free worker takes it.", "success")
    return redirect(url_for("ui.scheduled"))
