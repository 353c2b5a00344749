"""Admin sessions kept on the server: opened at sign-in; ended by sign-out, a new password or deleting
the user; expired after an idle time and an absolute lifetime.

The signed session cookie carries only a random token. The server keeps the token's SHA-256 digest
with the session's times and checks them on every request, so ending a session (deleting its row)
ends it in every browser holding a copy of the cookie, and no timestamp in the cookie is trusted.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from flask import current_app
from sqlalchemy import ColumnElement, and_, delete, func, insert, not_, select, update
from sqlalchemy.engine import Connection

from ..core.clock import utcnow
from ..database.transactions import read_connection, write_transaction
from ..models import AdminSession

sessions = AdminSession.__table__


@dataclass(frozen=True)
class Lifetimes:
    """How long a session lasts: without a page request (idle), and at most from sign-in (absolute)."""

    idle: timedelta
    absolute: timedelta


def lifetimes() -> Lifetimes:
    """The configured lifetimes (QUEUELOG_SESSION_IDLE_MINUTES, QUEUELOG_SESSION_MAX_HOURS)."""
    config = current_app.config
    return Lifetimes(
        idle=timedelta(minutes=config["SESSION_IDLE_MINUTES"]), absolute=timedelta(hours=config["SESSION_MAX_HOURS"])
    )


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _is_live(now: datetime, limits: Lifetimes) -> ColumnElement[bool]:
    """A session that has neither sat idle too long nor outlived its absolute lifetime."""
    return and_(sessions.c.last_seen_at > now - limits.idle, sessions.c.created_at > now - limits.absolute)


def start(user_id: int) -> str:
    """Open a session for the user; returns the token for the cookie (the server stores its digest only)."""
    token = secrets.token_urlsafe(32)
    now = utcnow()
    with write_transaction() as conn:
        # Sessions that ran out can never be used again: sweep them when anyone signs in.
        conn.execute(delete(sessions).where(not_(_is_live(now, lifetimes()))))
        conn.execute(insert(sessions).values(user_id=user_id, digest=_digest(token), created_at=now, last_seen_at=now))
    return token


def resume(token: str | None, *, activity: bool) -> int | None:
    """The user id of the live session this token opens, or None if it has ended or never existed.

    ``activity`` (a page the admin asked for, not the automatic refresh of an open tab) restarts the
    idle time. Most page requests only read: the idle time is renewed once it is older than a small step
    (``_renewal_step``), so a session may end up to that step early, never late. The renewal re-checks
    that the session is live in its own UPDATE, so a session that has just run out cannot be renewed
    by a request racing its expiry.
    """
    if not token:
        return None
    now = utcnow()
    limits = lifetimes()
    this_live_session = and_(sessions.c.digest == _digest(token), _is_live(now, limits))
    with read_connection() as conn:
        found = conn.execute(select(sessions.c.user_id, sessions.c.last_seen_at).where(this_live_session)).first()
    if found is None or not activity or found.last_seen_at > now - _renewal_step(limits):
        return None if found is None else found.user_id
    with write_transaction() as conn:
        return conn.execute(
            update(sessions).where(this_live_session).values(last_seen_at=now).returning(sessions.c.user_id)
        ).scalar()


def _renewal_step(limits: Lifetimes) -> timedelta:
    """How stale the idle time may get before a page request writes it again: a write per page request
    costs an fsync on SQLite at synchronous=FULL, and a minute is nothing against a 30-minute idle time."""
    return min(timedelta(minutes=1), limits.idle / 10)


def end(token: str | None) -> None:
    """End the one session this token opens (signing in again in the same browser replaces it)."""
    if token:
        with write_transaction() as conn:
            conn.execute(delete(sessions).where(sessions.c.digest == _digest(token)))


def end_all(conn: Connection, user_id: int) -> int:
    """End every session of the user, inside the caller's transaction; returns how many were still live."""
    of_user = sessions.c.user_id == user_id
    live = conn.execute(select(func.count()).where(of_user, _is_live(utcnow(), lifetimes()))).scalar_one()
    conn.execute(delete(sessions).where(of_user))
    return live


def sign_out_everywhere(user_id: int) -> int:
    """Sign-out: end every session of the user, in every browser; returns how many there were."""
    with write_transaction() as conn:
        return end_all(conn, user_id)


def live_counts(conn: Connection) -> dict[int, int]:
    """How many live sessions each user has (users without one are absent)."""
    rows = conn.execute(
        select(sessions.c.user_id, func.count()).where(_is_live(utcnow(), lifetimes())).group_by(sessions.c.user_id)
    )
    return {user_id: count for user_id, count in rows}
