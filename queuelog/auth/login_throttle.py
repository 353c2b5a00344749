"""The sign-in throttle: failed sign-ins refuse the guessing address, and the guessing (username,
address) pair, for a while; failures for one username from many addresses only slow it down.

Refusing a username outright would hand anyone a lock-out: five wrong passwords for a named admin,
renewed every window, and the right password is refused from everywhere. So the account itself is
never refused; a distributed guess at it meets a short delay on every try instead, while each
address it comes from runs into its own limits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from flask import current_app
from sqlalchemy import ColumnElement, and_, delete, func, insert, or_, select
from sqlalchemy.engine import Connection

from ..core.clock import utcnow
from ..database.transactions import read_connection, write_transaction
from ..models import LoginAttempt

attempts = LoginAttempt.__table__


@dataclass(frozen=True)
class Limits:
    per_pair: int  # per (username, address): one address guessing one account's password
    per_address: int  # per address, whatever the usernames (spraying)
    window: timedelta
    slowdown_seconds: float  # per try, once a username has ``per_pair`` failures from anywhere


@dataclass(frozen=True)
class Verdict:
    """What the throttle says about one sign-in attempt, before the password is checked."""

    retry_after: int = 0  # seconds until this address may try this username again; 0: it may now
    slowdown_seconds: float = 0.0  # wait this long before checking the password (the account is under attack)


def limits() -> Limits:
    """The configured limits (QUEUELOG_LOGIN_MAX_FAILURES and friends, queuelog/config.py)."""
    config = current_app.config
    return Limits(
        per_pair=config["LOGIN_MAX_FAILURES"],
        per_address=config["LOGIN_MAX_FAILURES_PER_ADDRESS"],
        window=timedelta(seconds=config["LOGIN_WINDOW_SECONDS"]),
        slowdown_seconds=config["LOGIN_SLOWDOWN_SECONDS"],
    )


def _key(username: str, remote_addr: str) -> tuple[str, str]:
    # Stored as the columns' widths allow; longer values cannot be usernames (or addresses) anyway.
    return username[:100], remote_addr[:64]


def verdict(username: str, remote_addr: str) -> Verdict:
    """Whether this address may try this username now, and how long the try must wait."""
    username, remote_addr = _key(username, remote_addr)
    chosen, now = limits(), utcnow()
    since = now - chosen.window
    in_window = attempts.c.at > since
    with read_connection() as conn:
        waits = [
            _wait(
                conn,
                and_(attempts.c.username == username, attempts.c.remote_addr == remote_addr, in_window),
                chosen.per_pair,
                chosen.window,
                now,
            ),
            _wait(conn, and_(attempts.c.remote_addr == remote_addr, in_window), chosen.per_address, chosen.window, now),
        ]
        if max(waits):
            return Verdict(retry_after=max(waits))
        under_attack = _recent(conn, and_(attempts.c.username == username, in_window), chosen.per_pair)
    return Verdict(slowdown_seconds=chosen.slowdown_seconds if len(under_attack) >= chosen.per_pair else 0.0)


def _recent(conn: Connection, where: ColumnElement[bool], limit: int) -> list[datetime]:
    """The times of the newest ``limit`` failures matching ``where``, newest first."""
    return conn.execute(select(attempts.c.at).where(where).order_by(attempts.c.at.desc()).limit(limit)).scalars().all()


def _wait(conn: Connection, where: ColumnElement[bool], limit: int, window: timedelta, now: datetime) -> int:
    """Seconds until fewer than ``limit`` failures matching ``where`` are in the window; 0 if already."""
    times = _recent(conn, where, limit)
    if len(times) < limit:
        return 0
    # The oldest of the newest ``limit`` failures must leave the window before one more try.
    return max(1, math.ceil((times[-1] + window - now).total_seconds()))


def record_failure(username: str, remote_addr: str) -> None:
    """Remember a failed sign-in, and forget this address's and username's failures too old to matter."""
    username, remote_addr = _key(username, remote_addr)
    now = utcnow()
    with write_transaction() as conn:
        conn.execute(
            delete(attempts).where(
                or_(attempts.c.username == username, attempts.c.remote_addr == remote_addr),
                attempts.c.at < now - limits().window,
            )
        )
        conn.execute(insert(attempts).values(username=username, remote_addr=remote_addr, at=now))


def forget_failures(username: str, remote_addr: str) -> None:
    """A successful sign-in forgets its own address's failures for the account (typos, not an attack).

    Failures from other addresses stay: they are someone else's guesses.
    """
    username, remote_addr = _key(username, remote_addr)
    with write_transaction() as conn:
        conn.execute(delete(attempts).where(attempts.c.username == username, attempts.c.remote_addr == remote_addr))


def clear_username(conn: Connection, username: str) -> int:
    """Forget every failed sign-in for the username, from every address; returns how many."""
    return conn.execute(delete(attempts).where(attempts.c.username == username[:100])).rowcount


def recent_failure_counts(conn: Connection) -> dict[str, int]:
    """Failed sign-ins per username within the window (usernames without any are absent)."""
    rows = conn.execute(
        select(attempts.c.username, func.count())
        .where(attempts.c.at > utcnow() - limits().window)
        .group_by(attempts.c.username)
    )
    return {username: count for username, count in rows}
