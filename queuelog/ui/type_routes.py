"""The Types page: each job type's pause, limits and push target, its wait and run times over the last hour, and
who changed its settings.

Every change goes through ``flow.update_type``, the function ``PATCH /types/{type}`` calls, so a page's
change is written to the type's history (as ``admin:<name>``) and wakes waiting claims exactly as the API's.

A push target's signing secret is shown once, in the page that answers the change that issued it (setting a
first target, or rotating): rendered into that response, never flashed, because a flash travels in the session
cookie, which is signed but readable, and would come back with the next request.
"""

from __future__ import annotations

from dataclasses import dataclass

from flask import abort, flash, redirect, render_template, request, url_for

from ..core.clock import utcnow
from ..core.timing_buckets import RESOLUTION
from ..queue import flow
from ..queue.push_targets import ROTATION_OVERLAP
from . import bp, rollup_stats
from .auth import actor_name
from .forms import ActionForm, PushTargetForm, TypeLimitsForm, UniqueScopeForm

#: How a history entry names each setting.
SETTING_LABELS = {
    "paused": "state",
    "concurrency_limit": "concurrency limit",
    "rate_limit": "rate limit",
    "key_concurrency_limit": "key concurrency limit",
    "unique_scope": "dedupe windows",
    "push": "push target",
    "push_secret": "push signing secret",
}
#: What a history entry may name, in the order the page lists it: the settings, then a secret's rotation (its
#: entry says when the old secret retires, never a secret).
HISTORY_FIELDS = (*flow.FIELDS, "push_secret")
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
    if field == "push":
        if value is None:
            return "none (workers claim its jobs)"
        return f"{value['url']} ({value['mode']}, timeout {value['timeout_seconds']:,} s)"
    if field == "push_secret":
        return {"issued": "new one issued"}.get(value, f"old one {value}")  # "retires <time>"
    if value is None:
        return "none"
    if isinstance(value, dict):
        return f"{value['jobs']:,} per {value['per_seconds']:,} s"
    return f"{value:,}"


def change_lines(change: flow.Change) -> list[ChangeLine]:
    """The settings one history entry changed, in the order the API lists settings."""
    return [
        ChangeLine(
            SETTING_LABELS.get(field, field),
            describe(field, change.changes[field]["old"]),
            describe(field, change.changes[field]["new"]),
        )
        for field in HISTORY_FIELDS
        if field in change.changes
    ]


def _state_or_404(job_type: str) -> flow.TypeState:
    try:
        return flow.get_type(job_type)
    except flow.TypeNotFound as error:
        abort(404, description=error.detail)


def _limits_form(state: flow.TypeState) -> TypeLimitsForm:
    form = TypeLimitsForm(formdata=None)
    form.show(state.settings)
    return form


def _render_type(
    state: flow.TypeState,
    form: TypeLimitsForm,
    status: int = 200,
    scope_form: UniqueScopeForm | None = None,
    push_form: PushTargetForm | None = None,
    secret: str | None = None,
):
    """The type's page; ``secret``: a push signing secret just issued, shown in this one answer."""
    entries = flow.history(state.type)
    scope_form = scope_form or UniqueScopeForm(formdata=None, unique_scope=state.settings.unique_scope)
    if push_form is None:
        push_form = PushTargetForm(formdata=None)
        push_form.show(state.settings.push)
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
        push_form=push_form,
        secret=secret,
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
    return _render_type(state, _limits_form(state))


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
        return _render_type(state, _limits_form(state), 400, scope_form=form)
    state = flow.update_type(job_type, {"unique_scope": form.unique_scope.data}, actor_name())
    flash(f"Dedupe windows of {job_type}: {describe('unique_scope', state.settings.unique_scope)}.", "success")
    return _back(job_type)


@bp.post("/admin/types/<job_type>/push")
def push_type(job_type: str):
    """Set the type's push target (URL, mode, timeout) as a whole; a first target's secret is shown in this
    answer only."""
    state = _state_or_404(job_type)
    form = PushTargetForm()
    if not form.validate_on_submit():
        return _render_type(state, _limits_form(state), 400, push_form=form)
    state = flow.update_type(job_type, {"push": form.target()}, actor_name())
    target = describe("push", state.settings.value("push"))
    if state.new_secret is None:
        flash(f"Push target of {job_type} saved: {target}. Its signing secret is unchanged.", "success")
        return _back(job_type)
    flash(
        f"Push target of {job_type} saved: {target}. Copy its signing secret now: it will not be shown again.",
        "success",
    )
    return _render_type(state, _limits_form(state), secret=state.new_secret)


@bp.post("/admin/types/<job_type>/push/clear")
def clear_push(job_type: str):
    """Remove the type's push target: workers claim its jobs again, and its signing secrets are forgotten."""
    _state_or_404(job_type)
    if ActionForm().validate_on_submit():
        flow.update_type(job_type, {"push": None}, actor_name())
        flash(
            f"Removed the push target of {job_type}: workers claim its jobs again, and its signing secrets are "
            "forgotten (a new target gets a new one).",
            "success",
        )
    return _back(job_type)


@bp.post("/admin/types/<job_type>/push/rotate")
def rotate_push_secret(job_type: str):
    """A new signing secret for the type's push target, shown in this answer only; the old one keeps signing
    beside it for a while, so the target can move over unhurried."""
    _state_or_404(job_type)
    if not ActionForm().validate_on_submit():
        return _back(job_type)
    try:
        state = flow.rotate_push_secret(job_type, actor_name())
    except flow.NoPushTarget as error:
        flash(error.detail[:1].upper() + error.detail[1:] + ".", "error")
        return _back(job_type)
    hours = int(ROTATION_OVERLAP.total_seconds() // 3600)
    flash(
        f"New signing secret for {job_type}: copy it now, it will not be shown again. The previous one keeps "
        f"signing beside it for {hours} hours.",
        "success",
    )
    return _render_type(state, _limits_form(state), secret=state.new_secret)


def _limits_text(settings: flow.Settings) -> str:
    return ", ".join(
        f"{SETTING_LABELS[field]} {describe(field, settings.value(field))}"
        for field in ("concurrency_limit", "rate_limit", "key_concurrency_limit")
    )
