"""Who may see the admin pages and who may act on them: server-side sessions, signing in through the
throttle, the viewer role's read-only guard, safe ``next`` redirects."""

from __future__ import annotations

import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from flask import abort, flash, redirect, request, session, url_for
from flask_login import current_user

from ..auth import admin_sessions, login_throttle
from ..auth.users import verify_password
from ..extensions import db, login_manager
from ..models import User, UserRole
from . import bp

# Reachable without a session: the sign-in page itself and the bare "/" redirect.
PUBLIC_ENDPOINTS = {"ui.login", "ui.root"}
# What a viewer may still send: signing in and out changes no job, key or setting. Every other
# request that is not a plain read is an action, and only admins act (deny by default, so a route
# added later is guarded without anyone remembering to).
VIEWER_MAY_POST = {"ui.login", "ui.logout"}
READ_METHODS = {"GET", "HEAD", "OPTIONS"}
# Where the signed cookie keeps the token of the server-side session (see queuelog/auth/admin_sessions.py).
SESSION_TOKEN_KEY = "_session_token"


@login_manager.user_loader
def load_user(user_id: str) -> User | None:
    """The signed-in admin, only while the server-side session the cookie names is live.

    The cookie alone proves nothing: a copy taken before sign-out, or a remember-me cookie, names no
    live session. Pages the admin asks for restart the idle time; the auto-refresh of an open tab does not.
    """
    session_user_id = admin_sessions.resume(session.get(SESSION_TOKEN_KEY), activity=not is_partial_request())
    if session_user_id is None or str(session_user_id) != user_id:
        return None
    user = db.session.get(User, session_user_id)
    if user is not None:
        db.session.expunge(user)
    # End the read at once: on SQLite (WAL) an open read keeps this request on a snapshot taken now,
    # and a page that writes and then lists (a new API key) would not see its own write. A commit, which ends a
    # read as a rollback would: on PostgreSQL a rollback also makes psycopg forget the connection's prepared
    # statements (database/transactions.py, read_connection).
    db.session.commit()
    return user


def is_partial_request() -> bool:
    """True for the fragment requests the auto-refresh script makes (``?partial=1``)."""
    return request.args.get("partial") == "1"


@login_manager.unauthorized_handler
def send_to_login():
    """Pages go to the sign-in form (remembering where they were); fragments just say 401."""
    if is_partial_request():
        return "Your session has ended; reload the page to sign in again.", 401, {"Content-Type": "text/plain"}
    if session.get(SESSION_TOKEN_KEY):
        # The cookie named a session that has ended (signed out elsewhere, expired, password changed).
        session.clear()
        flash("Your session has ended; sign in again.", "info")
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


@bp.before_request
def refuse_viewers_actions():
    """A viewer's action is 403 whatever it carries (a valid CSRF token too): viewers look, admins act."""
    if request.method in READ_METHODS or request.endpoint in VIEWER_MAY_POST:
        return None
    if not may_act():
        abort(403, description="Your account may look at these pages but not change anything. Ask an admin to do this.")
    return None


def may_act() -> bool:
    """Whether the signed-in user may change things through the pages: admins may, viewers may not."""
    return bool(current_user.is_authenticated) and current_user.role == UserRole.ADMIN.value


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


# --- signing in ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SignIn:
    """The outcome of one sign-in attempt: a user and their new session's token, a refusal, or neither."""

    user: User | None = None
    session_token: str | None = None
    retry_after: int = 0  # refused by the throttle: seconds until this address may try this username again


def attempt_sign_in(username: str, password: str, remote_addr: str) -> SignIn:
    """Check a sign-in against the throttle, then the password; on success open a server-side session."""
    verdict = login_throttle.verdict(username, remote_addr)
    if verdict.retry_after:
        return SignIn(retry_after=verdict.retry_after)
    if verdict.slowdown_seconds:
        # The account has failures from many addresses: slow every try at it, never refuse the right password.
        time.sleep(verdict.slowdown_seconds)
    user = verify_password(username, password)
    if user is None:
        login_throttle.record_failure(username, remote_addr)
        return SignIn()
    login_throttle.forget_failures(username, remote_addr)
    return SignIn(user=user, session_token=admin_sessions.start(user.id))
