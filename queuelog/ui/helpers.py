"""Template filters and small view helpers shared by the admin pages."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from flask import current_app, make_response, render_template

from .. import states
from ..core.clock import rfc3339, utcnow
from ..models import Priority
from ..reads.queries import last_change
from . import bp
from .auth import is_partial_request, may_act
from .explain import Attempts, NotDue, attempts, is_quarantined, run_of, why_not_due


def render_live(template: str, partial: str, **context):
    """The full page, or only its self-refreshing part when the refresh script asks (``?partial=1``)."""
    if is_partial_request():
        response = make_response(render_template(partial, **context))
        # The script swaps content in only when this header says it got a fragment (not a sign-in page).
        response.headers["X-Queuelog-Partial"] = "1"
        return response
    return render_template(template, **context)


@bp.app_context_processor
def page_context() -> dict:
    """Values every page template may use."""
    # may_act is handed over uncalled: the error page must render without asking the database who is signed in.
    return {"refresh_seconds": current_app.config["UI_REFRESH_SECONDS"], "may_act": may_act}


@bp.app_context_processor
def state_machine() -> dict:
    """``states`` in every template, so pages ask the state machine (``states.allowed('retry', job.status)``)."""
    return {"states": states}


def span(delta: timedelta) -> str:
    """A duration as an operator reads it at a glance: 45s, 4m 12s, 3h 05m, 2d 4h."""
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"


@bp.app_template_filter("ago")
def ago(value: datetime | None) -> str:
    """'4m 12s ago', or 'in 3m 00s' for a time still ahead; '—' for none."""
    if value is None:
        return "—"
    delta = utcnow() - value
    if delta.total_seconds() < 0:
        return "in " + span(-delta)
    return span(delta) + " ago"


@bp.app_template_filter("age")
def age(value: datetime | None) -> str:
    """How long ago, without the word 'ago' (for 'waiting 4m 12s')."""
    return "—" if value is None else span(utcnow() - value)


@bp.app_template_filter("utc")
def utc(value: datetime | None) -> str:
    """A readable UTC timestamp to the second."""
    return "—" if value is None else f"{value:%Y-%m-%d %H:%M:%S} UTC"


@bp.app_template_filter("iso")
def iso(value: datetime | None) -> str:
    """RFC 3339, for <time datetime=...> and tooltips."""
    return rfc3339(value) or ""


@bp.app_template_filter("priority_label")
def priority_label(value: int) -> str:
    """low / medium / high / critical (or the number for a level in between)."""
    return Priority.label_of(value)


@bp.app_template_filter("pretty_json")
def pretty_json(text: str | None) -> str:
    """Stored JSON indented for reading; anything unparsable is shown as it is (autoescaped either way)."""
    if text is None:
        return ""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False, sort_keys=True)
    except ValueError:
        return text


@bp.app_template_filter("one_line")
def one_line(text: str | None, limit: int = 140) -> str:
    """The first line of ``text``, cut to ``limit`` characters, for table cells."""
    if not text:
        return ""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"


@bp.app_template_test("quarantined")
def quarantined(error: str | None) -> bool:
    """The reaper gave up on this job because its workers kept dying while holding it."""
    return is_quarantined(error)


@bp.app_template_filter("attempts")
def attempts_of(job) -> Attempts:
    """'1 of 4': the job's runs in its current budget, of the runs its retries allow."""
    return attempts(job)


@bp.app_template_filter("last_change")
def last_change_of(job) -> datetime:
    """When the job last changed: its last move, or its last heartbeat if that came later (as the API says)."""
    return last_change(job)


@bp.app_template_filter("run_number")
def run_number(event) -> int | None:
    """Which run an event row belongs to; None for events outside any run."""
    return run_of(event)


@bp.app_template_filter("not_due_reason")
def not_due_reason(job) -> NotDue:
    """'scheduled', 'backing off after failed run 1 of 4': why a pending job not due yet waits."""
    return why_not_due(job)
