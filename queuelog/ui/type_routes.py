"""The Types page: each job type's pause and limits, its wait and run times over the last hour, and who
changed its settings.

Every change goes through ``flow.update_type``, the function ``PATCH /types/{type}`` calls, so a page's
change is written to the type's history (as ``admin:<name>``) and wakes waiting claims exactly as the API's.
"""

from __future__ import annotations

from dataclasses import dataclass

from flask import abort, flash, redirect, render_template, request, url_for

from ..core.clock import utcnow
from ..core.timing_buckets import RESOLUTION
from ..queue import flow
from . import bp, rollup_stats
from .auth import actor_name
from .forms import ActionForm, TypeLimitsForm, UniqueScopeForm

#: How a history entry names each setting.
SETTING_LABELS = {
    "paused": "state",
    "concurrency_limit": "concurrency limit",
    "rate_limit": "rate limit",
    "key_concurrency_limit": "key concurrency limit",
    "unique_scope": "dedupe windows",
}
#: How the pages name each unique_scope.
SCOPE_TEXT = {"producer": "per producer", "type": "shared by every producer"}
#: The history a type's page shows; the API lists all of it.
HISTORY_SHOWN = 100


@dataclass(frozen=True)
class ChangeLine:
    """One setting's change in a history entry, as the page prints it: "rate limit: none → 20 per 2 s"."""

    setting: str
    old: str
    new: str


def describe(field: str, value) -> str:
    """A setting's value as the page shows it (the history keeps them as the API shows them)."""
    if field == "paused":
        return "paused" if value else "active"
    if field == "unique_scope":
        return SCOPE_TEXT.get(value, value)
    if value is None:
        return "none"
    if isinstance(value, dict):
        return f"{value['jobs']:,} per {value['per_seconds']:,} s"
    return f"{value:,}"


def change_lines(change: flow.Change) -> list[ChangeLine]:
    """The settings one history entry changed, in the order the API lists settings."""
    return [
        ChangeLine(
            SETTING_LABELS[field],
            describe(field, change.changes[field]["old"]),
            describe(field, change.changes[field]["new"]),
        )
        for field in flow.FIELDS
        if field in change.changes
    ]


def _state_or_404(job_type: str) -> flow.TypeState:
    try:
        return flow.get_type(job_type)
    except flow.TypeNotFound as error:
        abort(404, description=error.detail)


def _render_type(
    state: flow.TypeState, form: TypeLimitsForm, status: int = 200, scope_form: UniqueScopeForm | None = None
):
    entries = flow.history(state.type)
    scope_form = scope_form or UniqueScopeForm(formdata=None, unique_scope=state.settings.unique_scope)
    found, freshness = rollup_stats.last_hour(utcnow(), state.type)
    timings = found.get(state.type) or rollup_stats.TypeTimings(state.type)
    return render_template(
        "type.html",
        state=state,
        form=form,
        describe=describe,
        timings=timings,
        freshness=freshness,
        bound=rollup_stats.bound_text,
        resolution=RESOLUTION,
        history=[(entry, change_lines(entry)) for entry in entries[:HISTORY_SHOWN]],
        history_count=len(entries),
        action_form=ActionForm(),
        scope_form=scope_form,
    ), status


def _back(job_type: str):
    """Back to the page the button was on: the list, or the type's own page."""
    if request.args.get("from") == "list":
        return redirect(url_for("ui.types"))
    return redirect(url_for("ui.job_type", job_type=job_type))


@bp.get("/admin/types")
def types():
    """Every configured type: paused or not, its limits, its pending and running jobs; and each type's jobs of
    the last hour with their wait and run times (p50/p95, from the stored rollups)."""
    kinds = flow.list_types()
    timings, freshness = rollup_stats.last_hour(utcnow())
    return render_template(
        "types.html",
        types=kinds,
        describe=describe,
        action_form=ActionForm(),
        freshness=freshness,
        timings=[timings.get(state.type) or rollup_stats.TypeTimings(state.type) for state in kinds],
        bound=rollup_stats.bound_text,
        resolution=RESOLUTION,
    )


@bp.get("/admin/types/<job_type>")
def job_type(job_type: str):
    """One type: its figures and limits, the form to change them, and its history of changes."""
    state = _state_or_404(job_type)
    form = TypeLimitsForm(formdata=None)
    form.show(state.settings)
    return _render_type(state, form)


@bp.post("/admin/types/<job_type>/pause")
def pause_type(job_type: str):
    """Stop claims of the type; its jobs wait, running ones finish."""
    _state_or_404(job_type)
    if ActionForm().validate_on_submit():
        flow.update_type(job_type, {"paused": True}, actor_name())
        flash(
            f"Paused {job_type}: no worker will claim its jobs until it is resumed. "
            "Enqueueing still works, and running jobs finish.",
            "success",
        )
    return _back(job_type)


@bp.post("/admin/types/<job_type>/resume")
def resume_type(job_type: str):
    """Let the type's jobs be claimed again, at once (waiting claims wake)."""
    _state_or_404(job_type)
    if ActionForm().validate_on_submit():
        flow.update_type(job_type, {"paused": False}, actor_name())
        flash(f"Resumed {job_type}: its jobs can be claimed again.", "success")
    return _back(job_type)


@bp.post("/admin/types/<job_type>/limits")
def limit_type(job_type: str):
    """Set the type's three limits at once (an empty field removes that limit)."""
    state = _state_or_404(job_type)
    form = TypeLimitsForm()
    if not form.validate_on_submit():
        return _render_type(state, form, 400)
    state = flow.update_type(job_type, form.wanted(), actor_name())
    flash(f"Limits of {job_type} saved: {_limits_text(state.settings)}.", "success")
    return _back(job_type)


@bp.post("/admin/types/<job_type>/clear")
def clear_type_limits(job_type: str):
    """Remove all three limits of the type (a pause stays as it is)."""
    _state_or_404(job_type)
    if ActionForm().validate_on_submit():
        flow.update_type(
            job_type, dict.fromkeys(("concurrency_limit", "rate_limit", "key_concurrency_limit")), actor_name()
        )
        flash(f"Removed every limit of {job_type}.", "success")
    return _back(job_type)


@bp.post("/admin/types/<job_type>/unique-scope")
def scope_type(job_type: str):
    """Give each producer key its own dedupe windows of the type, or one window per key for them all."""
    state = _state_or_404(job_type)
    form = UniqueScopeForm()
    if not form.validate_on_submit():
        limits = TypeLimitsForm(formdata=None)
        limits.show(state.settings)
        return _render_type(state, limits, 400, scope_form=form)
    state = flow.update_type(job_type, {"unique_scope": form.unique_scope.data}, actor_name())
    flash(f"Dedupe windows of {job_type}: {describe('unique_scope', state.settings.unique_scope)}.", "success")
    return _back(job_type)


def _limits_text(settings: flow.Settings) -> str:
    return ", ".join(
        f"{SETTING_LABELS[field]} {describe(field, settings.value(field))}"
        for field in ("concurrency_limit", "rate_limit", "key_concurrency_limit")
    )
