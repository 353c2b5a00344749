"""The API keys page: list, issue (secret shown once), revoke — all through ``queuelog.auth.keys``."""

from __future__ import annotations

import json

from flask import flash, redirect, render_template, url_for

from ..auth import keys
from ..auth.quotas import Quota
from ..core.errors import InvalidRequest, QueueError
from . import bp
from .forms import ActionForm, ConfirmForm, KeyCreateForm


def _render(form: KeyCreateForm, status: int = 200, secret: str | None = None, created: str | None = None):
    rows = keys.list_keys()
    types = {row.id: (json.loads(row.allowed_types) if row.allowed_types else None) for row in rows}
    quotas = {row.id: Quota.of(row) for row in rows}
    return render_template(
        "keys.html",
        keys=rows,
        types=types,
        quotas=quotas,
        form=form,
        action_form=ActionForm(),
        secret=secret,
        created=created,
    ), status


@bp.get("/admin/keys")
def api_keys():
    """Every key, newest first, revoked ones included, and the form to issue one."""
    return _render(KeyCreateForm())


@bp.post("/admin/keys")
def create_api_key():
    """Issue a key and show its secret on this one response only (it is never stored, never shown again)."""
    form = KeyCreateForm()
    if not form.validate_on_submit():
        return _render(form, 400)
    types = [t for t in (form.types.data or "").split(",") if t.strip()]
    try:
        # An empty quota field means no limit here (the form always sends every field).
        secret = keys.create_key(
            form.name.data,
            form.role.data,
            form.max_priority.data or None,
            types or None,
            enqueue_rate=form.enqueue_rate.data or None,
            max_pending=form.max_pending.data or None,
        )
    except InvalidRequest as error:
        for problem in error.errors:
            name = problem["pointer"].strip("/")
            field = form[name] if name in form else form.name  # noqa: SIM401 - a wtforms Form has no .get()
            field.errors = [*field.errors, problem["detail"]]
        return _render(form, 400)
    except QueueError as error:
        form.name.errors = [*form.name.errors, error.detail]
        return _render(form, 409)
    flash(f"Key {form.name.data} created. Copy its secret now: it will not be shown again.", "success")
    return _render(KeyCreateForm(formdata=None), 200, secret=secret, created=form.name.data)


@bp.post("/admin/keys/<name>/revoke")
def revoke_api_key(name: str):
    """Revoke a key, once confirmed (a page naming the key asks first): its next request is refused."""
    form = ConfirmForm()
    if form.validate_on_submit():
        if form.confirmed.data != "yes":
            if not any(key.name == name and key.revoked_at is None for key in keys.list_keys()):
                flash(f"There is no active key named {name}; nothing was revoked.", "error")
                return redirect(url_for("ui.api_keys"))
            return render_template(
                "confirm.html",
                question=f"Revoke key {name}?",
                fields=[],
                button=f"Revoke {name}",
                button_class="button-danger",
                action=url_for("ui.revoke_api_key", name=name),
                back=url_for("ui.api_keys"),
                lines=[
                    "Its next request will be refused, and this cannot be undone: "
                    "a client that still needs access needs a new key."
                ],
            )
        if keys.revoke_key(name):
            flash(f"Key {name} is revoked; its next request will be refused.", "success")
        else:
            flash(f"There is no active key named {name}; nothing was revoked.", "error")
    return redirect(url_for("ui.api_keys"))
