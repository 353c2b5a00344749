"""Signing in and out, the dashboard and the workers page."""

from __future__ import annotations

from datetime import timedelta

from flask import abort, current_app, flash, g, redirect, render_template, request, session, url_for
from flask_login import current_user, login_user, logout_user

from .. import queue
from ..auth import admin_sessions
from ..core.clock import utcnow
from ..ops import db_health
from ..queue import worker_processes
from . import bp, rollup_stats, stats
from .auth import SESSION_TOKEN_KEY, actor_name, attempt_sign_in, safe_next
from .chart import NARROW_HEIGHT, NARROW_WIDTH, build_chart
from .forms import ActionForm, LoginForm
from .helpers import render_live, span


def _fresh_session() -> None:
    """Empty the session, and forget the CSRF token cached for this request, which belonged to the old one."""
    session.clear()
    g.pop(current_app.config["WTF_CSRF_FIELD_NAME"], None)


@bp.get("/")
def root():
    """Send people to the admin pages."""
    return redirect(url_for("ui.dashboard"))


@bp.route("/admin/login", methods=["GET", "POST"])
def login():
    """The sign-in form; refuses (429) an address after repeated failures from it, or for this username from it."""
    form = LoginForm()
    next_url = safe_next(request.args.get("next") or form.next.data)
    if current_user.is_authenticated and request.method == "GET":
        return redirect(next_url or url_for("ui.dashboard"))
    form.next.data = next_url or ""
    if not form.validate_on_submit():
        return render_template("login.html", form=form), 200 if request.method == "GET" else 400
    outcome = attempt_sign_in(form.username.data, form.password.data, request.remote_addr or "unknown")
    if outcome.retry_after:
        minutes = max(1, (outcome.retry_after + 59) // 60)
        message = (
            f"Too many failed sign-ins from this address. Try again in {minutes} minute{'s' if minutes != 1 else ''}."
        )
        return render_template("login.html", form=form, error=message), 429, {"Retry-After": str(outcome.retry_after)}
    if outcome.user is None:
        return render_template("login.html", form=form, error="Wrong username or password."), 200
    # A fresh session on sign-in: nothing set before it (by anyone) survives into the admin's session,
    # and the session this browser held before, if any, ends on the server (no copy of it stays live).
    admin_sessions.end(session.get(SESSION_TOKEN_KEY))
    _fresh_session()
    login_user(outcome.user)
    session[SESSION_TOKEN_KEY] = outcome.session_token
    flash(f"Signed in as {outcome.user.username}.", "success")
    return redirect(next_url or url_for("ui.dashboard"))


@bp.post("/admin/logout")
def logout():
    """Sign out everywhere: every session of this admin ends on the server, in every browser.

    A POST with a CSRF token, so no other site can sign an admin out.
    """
    form = ActionForm()
    if form.validate_on_submit():
        admin_sessions.sign_out_everywhere(current_user.id)
        logout_user()
        _fresh_session()
        flash("Signed out everywhere.", "success")
    return redirect(url_for("ui.login"))


@bp.get("/admin", strict_slashes=False)
def dashboard():
    """What is stuck and what failed, at a glance: counts, stalled jobs, recent failures, and the chart of the
    last hour, 24 hours or 7 days (``?range=1h|24h|7d``, plain links, so the switch works without JavaScript);
    on PostgreSQL, a warning when a transaction has held back vacuum longer than DB_XACT_WARN_SECONDS."""
    chart_range = _chart_range(request.args.get("range"))
    now = utcnow()
    paused = stats.paused_types() & set(current_app.config["JOB_TYPES"])
    counts = stats.with_paused(stats.job_counts(), paused)
    stalled_count, stalled = stats.stalled_jobs(now)
    oldest = stats.oldest_due(now, counts)
    periods, freshness = rollup_stats.throughput(now, chart_range)
    held = db_health.long_transaction()
    return render_live(
        "dashboard.html",
        "_dashboard_live.html",
        counts=counts,
        paused=paused,
        pending=stats.pending_split(now),
        stalled_count=stalled_count,
        stalled=stalled,
        oldest=oldest,
        oldest_age=span(oldest.age(now)) if oldest else None,
        failures=stats.recent_failures(),
        chart=build_chart(periods, chart_range),
        narrow_chart=build_chart(periods, chart_range, NARROW_WIDTH, NARROW_HEIGHT, narrow=True),
        chart_range=chart_range,
        ranges=rollup_stats.RANGES.values(),
        freshness=freshness,
        held=held,
        held_age=span(timedelta(seconds=held.seconds)) if held else None,
        action_form=ActionForm(),
        now=now,
    )


def _chart_range(asked: str | None) -> rollup_stats.ChartRange:
    """The chart's range from ``?range=``; absent: the last hour; anything else is a 400 that lists the choices."""
    if asked is None:
        return rollup_stats.RANGES[rollup_stats.DEFAULT_RANGE]
    chart_range = rollup_stats.RANGES.get(asked)
    if chart_range is None:
        abort(
            400,
            description=f"The chart's range must be one of {', '.join(rollup_stats.RANGES)}; "
            f"{asked[:20]!r} is not one of them.",
        )
    return chart_range


@bp.post("/admin/reap")
def reap_now():
    """Give back the stalled running jobs now, instead of waiting for the cron reaper."""
    if ActionForm().validate_on_submit():
        report = queue.reap(actor=actor_name())
        if report.total:
            flash(
                f"Reaped {report.total} stalled job{'s' if report.total != 1 else ''}: "
                f"{len(report.requeued)} back in the queue, {len(report.failed)} failed "
                f"(no retries left), {len(report.quarantined)} quarantined.",
                "success",
            )
        elif not report.expired:
            flash("No running job had an expired lease; nothing was reaped.", "info")
        if report.timed_out:
            flash(f"{len(report.timed_out)} of them outlived their timeout_seconds.", "info")
        if report.expired:
            flash(
                f"Cancelled {len(report.expired)} pending job{'s' if len(report.expired) != 1 else ''} "
                "no worker claimed before its expires_at.",
                "success",
            )
    return redirect(url_for("ui.dashboard"))


@bp.get("/admin/workers")
def workers():
    """Each worker process (online, then gone): what it holds, what it finished, Quiet and Stop; then each worker
    key: the jobs it holds now, when it was last seen, how many it completed and failed."""
    listed = worker_processes.with_work(worker_processes.list_for(None))
    return render_live(
        "workers.html",
        "_workers_live.html",
        workers=stats.workers(),
        now=utcnow(),
        online=[p for p in listed if p.online],
        gone=[p for p in listed if not p.online],
        held_shown=worker_processes.HELD_SHOWN,
        gone_seconds=int(worker_processes.GONE_AFTER.total_seconds()),
    )
