"""The people who sign in to the pages: users, their server-side sessions, and failed sign-ins."""

from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import ForeignKey, Index, Integer, String, text
from sqlalchemy.orm import Mapped, mapped_column

from ..extensions import db
from .columns import UTCDateTime


class UserRole(enum.StrEnum):
    """What a person signed in to the pages may do: an admin looks and acts, a viewer only looks."""

    ADMIN = "admin"
    VIEWER = "viewer"


class User(db.Model):
    """A person who signs in to the web pages: an admin, or a viewer who may look but not act."""

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    username: Mapped[str] = mapped_column(String(100), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # Users made before roles existed were all admins, so the column's default keeps them admins.
    role: Mapped[str] = mapped_column(
        String(16), default=UserRole.ADMIN.value, server_default=text(f"'{UserRole.ADMIN.value}'")
    )

    # Flask-Login's protocol, kept here rather than inheriting UserMixin's extras.
    is_active = True
    is_authenticated = True
    is_anonymous = False

    def get_id(self) -> str:
        return str(self.id)


class AdminSession(db.Model):
    """A signed-in admin's session, kept on the server so that it can be ended.

    The signed cookie carries a random token; only its SHA-256 digest is stored. Deleting the row ends
    the session in every browser that holds a copy of the cookie.
    """

    __tablename__ = "admin_sessions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)  # the absolute lifetime counts from here
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime)  # the idle time counts from here

    __table_args__ = (Index("ix_admin_sessions_user_id", "user_id"),)


class LoginAttempt(db.Model):
    """A failed sign-in, kept briefly to throttle guessing per address and per (username, address)."""

    __tablename__ = "login_attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    username: Mapped[str] = mapped_column(String(100))
    remote_addr: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        Index("ix_login_attempts_username_at", "username", "at"),
        Index("ix_login_attempts_addr_at", "remote_addr", "at"),
        # One guessing address's failures for one account, however many addresses share the account's.
        Index("ix_login_attempts_username_addr_at", "username", "remote_addr", "at"),
    )
