"""Admin users of the web pages: creation, password checks, and unlocking them."""
from __future__ import annotations

import re

from sqlalchemy import select
from sqlalchemy.engine import Connection
from werkzeug.security import check_password_hash, generate_password_hash

from . import login_throttle
from .clock import utcnow
from .database import write_transaction
from .errors import InvalidRequest, QueueError
from .extensions import db
from .models import User

users = User.__table__

_USERNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}$")
MIN_PASSWORD_LENGTH = 12
# Computed once so an unknown username costs as much as a wrong password (no user enumeration by timing).
_DUMMY_HASH = generate_password_hash("queuelog-timing-equaliser", method="scrypt")


def create_user(username: str, password: str) -> User:
    """Create an admin; passwords are stored as scrypt hashes only."""
    problems = []
    if not _USERNAME.match(username or ""):
        problems.append({"pointer": "/username", "detail": "use 1-100 letters, digits, '.', '_', '@' or '-'"})
    if len(password or "") < MIN_PASSWORD_LENGTH:
        problems.append({"pointer": "/password", "detail": f"use at least {MIN_PASSWORD_LENGTH} characters"})
    if problems:
        raise InvalidRequest(problems)
    if db.session.execute(db.select(User).filter_by(username=username)).scalar_one_or_none():
        raise QueueError(f"a user named {username!r} already exists")
    user = User(username=username, password_hash=generate_password_hash(password, method="scrypt"),
                created_at=utcnow())
    db.session.add(user)
    db.session.commit()
    return user


def verify_password(username: str, password: str) -> User | None:
    """The user if the password matches, else None, in about the same time either way."""
    user = db.session.execute(db.select(User).filter_by(username=username)).scalar_one_or_none()
    if user is None:
        check_password_hash(_DUMMY_HASH, password)
        return None
    return user if check_password_hash(user.password_hash, password) else None


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
