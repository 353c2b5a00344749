"""Users of the web pages (admins, and viewers who may look but not act): creating, listing and deleting
them, their passwords, and unlocking them.

A new password or deleting a user ends every session of that user (``admin_sessions``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, select, update
from sqlalchemy.engine import Connection
from werkzeug.security import check_password_hash, generate_password_hash

from ..core.clock import utcnow
from ..core.errors import InvalidRequest, QueueError
from ..database.transactions import read_connection, write_transaction
from ..extensions import db
from ..models import User, UserRole
from . import admin_sessions, login_throttle

users = User.__table__

_USERNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}$")
MIN_PASSWORD_LENGTH = 12


@functools.cache
def _dummy_hash() -> str:
    """What an unknown username's password is checked against, so that it costs as much as a wrong password (no
    user enumeration by timing). Made by a process's first sign-in, known user or not, rather than at import:
    a scrypt hash is slow by design, and every server process and CLI command would pay it at start-up."""
    return generate_password_hash("queuelog-timing-equaliser", method="scrypt")


def create_user(username: str, password: str, role: str = UserRole.ADMIN.value) -> User:
    """Create a user (an admin unless ``role`` says viewer); passwords are stored as scrypt hashes only."""
    problems = []
    if not _USERNAME.match(username or ""):
        problems.append({"pointer": "/username", "detail": "use 1-100 letters, digits, '.', '_', '@' or '-'"})
    if role not in [r.value for r in UserRole]:
        problems.append({"pointer": "/role", "detail": f"use {' or '.join(UserRole)}"})
    problems += _password_problems(password)
    if problems:
        raise InvalidRequest(problems)
    if db.session.execute(db.select(User).filter_by(username=username)).scalar_one_or_none():
        raise QueueError(f"a user named {username!r} already exists")
    user = User(username=username, password_hash=_hash(password), created_at=utcnow(), role=role)
    db.session.add(user)
    db.session.commit()
    return user


def verify_password(username: str, password: str) -> User | None:
    """The user if the password matches, else None, in about the same time either way."""
    dummy = _dummy_hash()
    user = db.session.execute(db.select(User).filter_by(username=username)).scalar_one_or_none()
    if user is None:
        check_password_hash(dummy, password)
        return None
    return user if check_password_hash(user.password_hash, password) else None


@dataclass(frozen=True)
class UserSummary:
    """One user as ``flask users list`` shows it."""

    username: str
    role: str
    created_at: datetime
    sessions: int  # live sessions
    failed_sign_ins: int  # within the throttle's window, from any address


def list_users() -> list[UserSummary]:
    """Every user, by username, with their role, live sessions and recent failed sign-ins."""
    with read_connection() as conn:
        rows = conn.execute(
            select(users.c.id, users.c.username, users.c.role, users.c.created_at).order_by(users.c.username)
        ).all()
        sessions = admin_sessions.live_counts(conn)
        failures = login_throttle.recent_failure_counts(conn)
    return [
        UserSummary(row.username, row.role, row.created_at, sessions.get(row.id, 0), failures.get(row.username, 0))
        for row in rows
    ]


def set_password(username: str, password: str) -> int:
    """Give the user a new password and end all their sessions; returns how many sessions were ended."""
    problems = _password_problems(password)
    if problems:
        raise InvalidRequest(problems)
    password_hash = _hash(password)  # slow on purpose: before the write lock, not inside it
    with write_transaction() as conn:
        user_id = _id_of(conn, username)
        conn.execute(update(users).where(users.c.id == user_id).values(password_hash=password_hash))
        return admin_sessions.end_all(conn, user_id)


def delete_user(username: str) -> tuple[str, int]:
    """Delete the user and end all their sessions; returns the user's role and how many sessions ended."""
    with write_transaction() as conn:
        user_id = _id_of(conn, username)
        role = conn.execute(select(users.c.role).where(users.c.id == user_id)).scalar_one()
        ended = admin_sessions.end_all(conn, user_id)
        conn.execute(delete(users).where(users.c.id == user_id))
        return role, ended


def unlock(username: str) -> int:
    """Forget the user's failed sign-ins from every address; returns how many were forgotten."""
    with write_transaction() as conn:
        _id_of(conn, username)
        return login_throttle.clear_username(conn, username)


def _id_of(conn: Connection, username: str) -> int:
    user_id = conn.execute(select(users.c.id).where(users.c.username == username)).scalar()
    if user_id is None:
        raise QueueError(f"no user named {username!r}")
    return user_id


def _password_problems(password: str | None) -> list[dict]:
    if len(password or "") < MIN_PASSWORD_LENGTH:
        return [{"pointer": "/password", "detail": f"use at least {MIN_PASSWORD_LENGTH} characters"}]
    return []


def _hash(password: str) -> str:
    return generate_password_hash(password, method="scrypt")
