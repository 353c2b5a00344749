"""Who may see the admin pages: sessions, the sign-in throttle and safe ``next`` redirects."""
from __future__ import annotations

import math
from datetime import timedelta
from urllib.parse import urlsplit

from flask import current_app, redirect, request, url_for
from flask_login import current_user
from sqlalchemy import delete, insert, or_, select

from ..clock import utcnow
from ..database import read_connection, write_transaction
from ..extensions import db, login_manager
from ..models import LoginAttempt, User
from . import bp

attempts = LoginAttempt.__table__

# Reachable without a session: the sign-in page itself and the bare "/" redirect.
PUBLIC_ENDPOINTS = {"ui.login", "ui.root"}
DEFAULT_MAX_FAILURES = 5
DEFAULT_WINDOW_SECONDS = 15 * 60


@login_manager.user_loader
def load_user(user_id: str) -> User | None:
    """The signed-in admin, from the id kept in the session cookie."""
    try:
        user = db.session.get(User, int(user_id))
    except ValueError:
        return None
    if user is not None:
        db.session.expunge(user)
    # End the read at once: on SQLite (WAL) an open read keeps this request on a snapshot taken now,
    # and a page that writes and then lists (a new API key) would not see its own write.
    db.session.rollback()
    return user


def is_partial_request() -> bool:
    """True for the fragment requests the auto-refresh script makes (``?partial=1``)."""
    return request.args.get("partial") == "1"


@login_manager.unauthorized_handler
def send_to_login():
    """Pages go to the sign-in form (remembering where they were); fragments just say 401."""
    if is_partial_request():
        return "Your session has ended; reload the page to sign in again.", 401, {"Content-Type": "text/plain"}
    target = None
    if request.method == "GET":
        target = safe_next(request.full_path.rstrip("?"))
    return redirect(url_for("ui.login", next=target))


@bp.before_request
def require_admin():
    """Every admin page but the sign-in form needs a signed-in admin."""
    if request.endpoint in PUBLIC_ENDPOINTS:
        return None
    if not current_user.is_authenticated:
        return login_manager.unauthorized()
    return None


def actor_name() -> str:
    """How the event log names the signed-in admin."""
    return f"admin:{current_user.username}"


def safe_next(target: str | None) -> str | None:
    """``target`` if it is a path inside this app, else None: ``next`` must never leave the site.

    Browsers treat ``//host``, ``/\\host`` and paths with tabs or newlines in them (which they strip)
    as other sites, so only a plain absolute path with no scheme, no host and no backslash passes.
    """
    if not target or len(target) > 2000:
        return None
    if any(ch == "\\" or ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in target):
        return None
    if not target.startswith("/") or target.startswith("//"):
        return None
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return None
    # Only pages of the admin blueprint: never back to the sign-in form or to an API path.
    if not (parts.path == "/admin" or parts.path.startswith("/admin/")) or parts.path.startswith("/admin/login"):
        return None
    return target


# --- sign-in throttle ----------------------------------------------------------------------------

def _limits() -> tuple[int, timedelta]:
    config = current_app.config
    failures = int(config.get("LOGIN_MAX_FAILURES", DEFAULT_MAX_FAILURES))
    window = timedelta(seconds=int(config.get("LOGIN_WINDOW_SECONDS", DEFAULT_WINDOW_SECONDS)))
    return failures, window


def throttle_wait(username: str, remote_addr: str) -> int:
    """Seconds until this username and this address may try again; 0 when they may now.

    Counted separately per username (a guessed account) and per address (one client spraying many
    usernames): either reaching the limit refuses, whatever the password, until its oldest failure in
    the window has aged out.
    """
    max_failures, window = _limits()
    now = utcnow()
    since = now - window
    waits = []
    with read_connection() as conn:
        for column, value in ((attempts.c.username, username[:100]), (attempts.c.remote_addr, remote_addr[:64])):
            times = conn.execute(
                select(attempts.c.at).where(column == value, attempts.c.at > since)
                .order_by(attempts.c.at.desc()).limit(max_failures)
            ).scalars().all()
            if len(times) >= max_failures:
                # The oldest of the last N failures must leave the window before one more try.
                waits.append((times[-1] + window - now).total_seconds())
    return max(0, math.ceil(max(waits))) if waits else 0


def record_failure(username: str, remote_addr: str) -> None:
    """Remember a failed sign-in, and forget this key's failures too old to matter."""
    _, window = _limits()
    now = utcnow()
    with write_transaction() as conn:
        conn.execute(delete(attempts).where(
            or_(attempts.c.username == username[:100], attempts.c.remote_addr == remote_addr[:64]),
            attempts.c.at < now - window))
        conn.execute(insert(attempts).values(username=username[:100], remote_addr=remote_addr[:64], at=now))


def forget_failures(username: str) -> None:
    """A successful sign-in starts the account's count afresh (the address's count stays)."""
    with write_transaction() as conn:
        conn.execute(delete(attempts).where(attempts.c.username == username[:100]))

