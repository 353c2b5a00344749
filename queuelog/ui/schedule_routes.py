"""The schedules pages: the list, one schedule with its edit form, and the admin's actions (pause, resume,
run now, delete), all through ``queuelog.schedules``. Viewers see the pages without any action (403 on POST)."""

from __future__ import annotations

import json

from flask import current_app, flash, redirect, render_template, url_for

from .. import schedules
from ..core.errors import InvalidRequest, QueueError
from ..core.patterns import Priority
from ..schedules import ScheduleState
from . import bp
from .auth import actor_name
from .forms import ActionForm, ScheduleForm

#: Which form field shows the problem a pointer of ``check_spec`` names.
_FIELD_OF = {
    "/name": "name",
    "/cron": "cron",
    "/every_seconds": "every_seconds",
    "/timezone": "timezone",
    "/job/type": "job_type",
    "/job/payload": "payload",
    "/job/priority": "priority",
    "/job/max_retries": "max_retries",
    "/catch_up": "catch_up",
    "/paused": "paused",
}


def _form(state: ScheduleState | None = None) -> ScheduleForm:
    """The schedule form: on a POST as sent, else empty or (editing) filled from ``state``."""
    data = {}
    if state is not None:
        spec = state.spec
        data = {
            "name": spec.name,
            "cron": spec.timing.cron or "",
            "every_seconds": spec.timing.every_seconds,
            "timezone": spec.timing.timezone,
            "job_type": spec.job.type,
            "payload": json.dumps(spec.job.payload, indent=2),
            "priority": Priority.label_of(spec.job.priority),
            "max_retries": spec.job.max_retries,
            "catch_up": spec.catch_up,
            "paused": spec.paused,
        }
    form = ScheduleForm(data=data) if data else ScheduleForm()
    form.job_type.choices = list(current_app.config["JOB_TYPES"])
    return form


def _fields(form: ScheduleForm) -> dict | None:
    """The form as check_spec's fields, or None (errors set on the form) when the payload is not JSON."""
    try:
        payload = json.loads(form.payload.data or "{}")
    except ValueError as error:
        form.payload.errors = [*form.payload.errors, f"not valid JSON: {error}"]
        return None
    return {
        "name": form.name.data,
        "cron": form.cron.data or None,
        "every_seconds": form.every_seconds.data,
        "timezone": form.timezone.data,
        "paused": form.paused.data,
        "catch_up": form.catch_up.data,
        "job": {
            "type": form.job_type.data,
            "payload": payload,
            "priority": form.priority.data,
            "max_retries": form.max_retries.data,
        },
    }


def _show_problems(form: ScheduleForm, error: QueueError) -> None:
    problems = error.errors if isinstance(error, InvalidRequest) else [{"pointer": "/name", "detail": error.detail}]
    for problem in problems:
        field = form[_FIELD_OF.get(problem["pointer"], "name")]
        field.errors = [*field.errors, problem["detail"]]


def _list_page(form: ScheduleForm, status: int = 200):
    states = schedules.list_schedules()
    return render_template(
        "schedules.html", schedules=states, last_jobs=schedules.last_jobs(states), form=form, action_form=ActionForm()
    ), status


@bp.get("/admin/schedules")
def schedules_page():
    """Every schedule: timing, next run, last job and its status, paused or not; and the form to create one."""
    return _list_page(_form())


@bp.post("/admin/schedules")
def create_schedule():
    """Create a schedule from the form; its problems are shown beside their fields (400)."""
    form = _form()
    fields = _fields(form) if form.validate_on_submit() else None
    if fields is None:
        return _list_page(form, 400)
    try:
        state = schedules.create_schedule(fields)
    except QueueError as error:
        _show_problems(form, error)
        return _list_page(form, 400 if isinstance(error, InvalidRequest) else 409)
    flash(f"Schedule {state.spec.name} created.", "success")
    return redirect(url_for("ui.schedule_page", name=state.spec.name))


def _schedule_page(state: ScheduleState, form: ScheduleForm, status: int = 200):
    last = schedules.last_jobs([state]).get(state.last_job_id)
    return render_template("schedule.html", schedule=state, last_job=last, form=form, action_form=ActionForm()), status


@bp.get("/admin/schedules/<name>")
def schedule_page(name: str):
    """One schedule, its last job, and (for admins) its edit form and actions."""
    state = schedules.get_schedule(name)
    return _schedule_page(state, _form(state))


@bp.post("/admin/schedules/<name>")
def edit_schedule(name: str):
    """Save the edit form: every field is checked as on create; resuming starts from the next tick after now."""
    state = schedules.get_schedule(name)
    form = _form()
    fields = _fields(form) if form.validate_on_submit() else None
    if fields is None:
        return _schedule_page(state, form, 400)
    try:
        state = schedules.update_schedule(name, fields)
    except QueueError as error:
        _show_problems(form, error)
        return _schedule_page(state, form, 400 if isinstance(error, InvalidRequest) else 409)
    flash(f"Schedule {state.spec.name} saved.", "success")
    return redirect(url_for("ui.schedule_page", name=state.spec.name))


@bp.post("/admin/schedules/<name>/pause")
def pause_schedule(name: str):
    return _set_paused(name, True)


@bp.post("/admin/schedules/<name>/resume")
def resume_schedule(name: str):
    return _set_paused(name, False)


def _set_paused(name: str, paused: bool):
    if ActionForm().validate_on_submit():
        schedules.update_schedule(name, {"paused": paused})
        flash(f"Schedule {name} {'paused' if paused else 'resumed: missed ticks are not replayed'}.", "success")
    return redirect(url_for("ui.schedules_page"))


@bp.post("/admin/schedules/<name>/run")
def run_schedule(name: str):
    """Enqueue the schedule's job once, now."""
    if ActionForm().validate_on_submit():
        job = schedules.run_now(name, actor_name())
        flash(f"Job {job.id} enqueued for schedule {name}.", "success")
    return redirect(url_for("ui.schedules_page"))


@bp.post("/admin/schedules/<name>/delete")
def delete_schedule(name: str):
    """Delete a schedule; its jobs stay."""
    if ActionForm().validate_on_submit():
        schedules.delete_schedule(name)
        flash(f"Schedule {name} deleted; the jobs it enqueued stay.", "success")
    return redirect(url_for("ui.schedules_page"))


@bp.errorhandler(schedules.ScheduleNotFound)
def schedule_not_found(error: schedules.ScheduleNotFound):
    return render_template("error.html", code=404, title="Not Found", detail=error.detail), 404
