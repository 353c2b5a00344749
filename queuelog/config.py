"""Configuration: defaults, then ``instance/config.py``, then ``QUEUELOG_*`` variables, then a test mapping.

Every setting is one row of DEFAULTS: its default and its kind. The kind reads a value however it
came (a Python value from ``instance/config.py`` or a test, JSON or plain text from the environment)
and refuses a bad one at start-up with an error that names its ``QUEUELOG_`` variable. Code reads
``app.config[NAME]`` already converted, and never supplies a default of its own.

A setting left unset, set to None or to an empty string takes its default.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flask import Flask
from sqlalchemy.engine import make_url

from .core.patterns import one_of


class SettingError(ValueError):
    """A setting's value cannot be used: the app does not start, and the message names the variable."""


@dataclass(frozen=True)
class Kind:
    """What a setting's value must be: ``expected`` says it in an error message, ``convert`` reads it.

    ``convert`` returns the value as the code uses it, or raises ValueError or TypeError.
    """

    expected: str
    convert: Callable[[Any], Any]


@dataclass(frozen=True)
class Setting:
    """One row of DEFAULTS: the value used when nothing sets it, and what a value must be."""

    default: Any
    kind: Kind


# --- kinds ----------------------------------------------------------------------------------------


def whole(low: int = 0) -> Kind:
    """A whole number of at least ``low``: 5, 5.0 or "5" (bool is not a number here)."""

    def convert(value: Any) -> int:
        if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
            value = int(value.strip())
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(value)
        return value

    return Kind(f"a whole number of at least {low}", convert)


def number(low: float = 0.0, above: bool = False) -> Kind:
    """A finite number of at least ``low`` (or above it, with ``above``)."""

    def convert(value: Any) -> float:
        if isinstance(value, bool):
            raise TypeError(value)
        result = float(value)
        if not math.isfinite(result) or result < low or (above and result == low):
            raise ValueError(value)
        return result

    return Kind(f"a number {'above' if above else 'of at least'} {low:g}", convert)


def flag() -> Kind:
    """true or false (also yes/no, on/off, 1/0, in any case)."""
    words = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}

    def convert(value: Any) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        return words[str(value).strip().lower()]

    return Kind("true or false", convert)


def choice(*names: str) -> Kind:
    """One of ``names``, in any case; the value becomes the name as written here."""
    by_folded = {name.casefold(): name for name in names}

    def convert(value: Any) -> str:
        return by_folded[str(value).strip().casefold()]

    return Kind(one_of(names), convert)


def text() -> Kind:
    """A string (a secret may also be bytes); a whole number read as JSON from the environment is its digits."""

    def convert(value: Any) -> str | bytes:
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)  # QUEUELOG_SECRET_KEY=12345 arrives as the number 12345
        if not isinstance(value, (str, bytes)):
            raise TypeError(value)
        return value

    return Kind("a string", convert)


def optional(kind: Kind) -> Kind:
    """``kind``, or None for "not set" (which an empty string also means)."""

    def convert(value: Any) -> Any:
        return None if _blank(value) else kind.convert(value)

    return Kind(f"{kind.expected}, or unset", convert)


def whole_or_auto(low: int = 0) -> Kind:
    """A whole number of at least ``low``, or None for "auto" (also spelled ``auto``)."""
    count = whole(low)

    def convert(value: Any) -> int | None:
        if _blank(value) or (isinstance(value, str) and value.strip().lower() == "auto"):
            return None
        return count.convert(value)

    return Kind(f"{count.expected}, or auto", convert)


def names() -> Kind:
    """A list of names: a JSON list, or a comma-separated string."""

    def convert(value: Any) -> list[str]:
        if isinstance(value, str):
            stripped = value.strip()
            value = json.loads(stripped) if stripped.startswith("[") else stripped.split(",")
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple, set, frozenset)):
            raise TypeError(value)
        return [str(item).strip() for item in value if str(item).strip()]

    return Kind("a JSON list of names or a comma-separated list", convert)


def mapping() -> Kind:
    """A JSON object (a dict in Python)."""

    def convert(value: Any) -> dict:
        if not isinstance(value, Mapping):
            raise TypeError(value)
        return dict(value)

    return Kind("a JSON object", convert)


def duration() -> Kind:
    """A duration as ``flask purge`` reads it (30s, 15m, 12h, 7d, 2w); kept as written."""

    def convert(value: Any) -> str:
        from .ops.purge import parse_duration  # the one reader of durations

        parse_duration(str(value))
        return str(value).strip()

    return Kind("a whole number and a unit (s, m, h, d or w), e.g. 7d", convert)


# --- the settings -----------------------------------------------------------------------------------

DEFAULTS: dict[str, Setting] = {
    "DATABASE_URL": Setting(None, optional(text())),  # None = SQLite file in the instance folder
    "SECRET_KEY": Setting(None, optional(text())),  # None = generated once into instance/secret_key
    "JOB_TYPES": Setting(["default"], names()),
    "LEASE_SECONDS": Setting(300, whole(1)),
    "MAX_PAYLOAD_BYTES": Setting(65536, whole(1)),
    "MAX_CONTENT_LENGTH": Setting(1024 * 1024, whole(1)),
    # The n-th retry waits BASE × 2ⁿ⁻¹ seconds (with jitter), at most MAX; 0 = at once.
    "RETRY_BACKOFF_BASE": Setting(10.0, number(0)),
    "RETRY_BACKOFF_MAX": Setting(3600.0, number(0)),
    "MAX_STALLS": Setting(3, whole(1)),
    "MAX_ERROR_CHARS": Setting(4000, whole(1)),
    "SQLITE_BUSY_TIMEOUT_MS": Setting(30000, whole(0)),
    "SQLITE_SYNCHRONOUS": Setting("FULL", choice("FULL", "NORMAL", "EXTRA")),
    # Write transactions of one server process's threads that arrive together share one COMMIT, and on
    # SQLite at FULL one fsync of the WAL made after the writers' turn; each is answered only once it is on
    # disk (queuelog/database/group_commit.py, wal_sync.py). auto: on for SQLite, off for PostgreSQL.
    "GROUP_COMMIT": Setting("auto", choice("auto", "on", "off")),
    # At most this many writes in one shared COMMIT: the first of them waits for all the others' work.
    "GROUP_COMMIT_MAX_MEMBERS": Setting(16, whole(1)),
    "SESSION_COOKIE_HTTPONLY": Setting(True, flag()),
    "SESSION_COOKIE_SAMESITE": Setting("Lax", choice("Strict", "Lax", "None")),
    "SESSION_COOKIE_SECURE": Setting(False, flag()),
    # Flask-WTF's name for the CSRF field; the pages drop a token cached under it (ui/routes.py).
    "WTF_CSRF_FIELD_NAME": Setting("csrf_token", text()),
    "AUTO_MIGRATE": Setting(True, flag()),
    "LOG_FORMAT": Setting("text", choice("text", "json")),  # queuelog/ops/logging_setup.py
    "METRICS_TOKEN": Setting(None, optional(text())),  # a bearer token that may read /metrics besides admin keys
    "RETENTION": Setting("7d", duration()),  # how old a finished job must be before `flask purge` deletes it
    # Reverse proxies in front whose X-Forwarded-* headers are believed (client address for login throttling).
    "TRUSTED_PROXIES": Setting(0, whole(0)),
    # Sign-in throttle (queuelog/auth/login_throttle.py): failures of one username from one address before that
    # address is refused for it, and how many from anywhere slow the username down ...
    "LOGIN_MAX_FAILURES": Setting(5, whole(1)),
    # ... failures from one address, whatever the usernames, before it is refused (None: LOGIN_MAX_FAILURES) ...
    "LOGIN_MAX_FAILURES_PER_ADDRESS": Setting(None, optional(whole(1))),
    # ... the window they are counted in, and the wait before each sign-in to a username under attack.
    "LOGIN_WINDOW_SECONDS": Setting(15 * 60, whole(1)),
    "LOGIN_SLOWDOWN_SECONDS": Setting(1.0, number(0)),
    # An admin's session ends after this long without a page request, and this long after sign-in.
    "SESSION_IDLE_MINUTES": Setting(30.0, number(0, above=True)),
    "SESSION_MAX_HOURS": Setting(12.0, number(0, above=True)),
    "UI_REFRESH_SECONDS": Setting(10, whole(1)),  # how often the pages refresh their figures
    "SQLALCHEMY_TRACK_MODIFICATIONS": Setting(False, flag()),
    # Connections per server process. A request holds one at a time, so a sync gunicorn worker uses
    # one (its schedule ticker takes turns with its requests: database/turns.py) and a gthread worker at
    # most one per thread plus one when a tick overlaps them all. Plus a LISTEN connection on PostgreSQL
    # when claims wait. The cap protects PostgreSQL's max_connections; a request that finds the pool
    # exhausted waits DATABASE_POOL_TIMEOUT seconds, then gets a 503 (well before gunicorn's 30 s
    # worker timeout would kill it).
    "DATABASE_POOL_SIZE": Setting(5, whole(0)),
    "DATABASE_MAX_OVERFLOW": Setting(10, whole(0)),
    "DATABASE_POOL_TIMEOUT": Setting(10.0, number(0)),
    # A pooled connection that sat unused this many seconds is tested before a request gets it (0: every
    # time): after a database restart, requests then get fresh connections instead of dead ones (503s).
    # Connections in constant use skip the test, a round trip on every request otherwise, unless their
    # socket shows that the server closed them (database/engine.py).
    "DATABASE_PING_AFTER_IDLE_SECONDS": Setting(1.0, number(0)),
    # PostgreSQL: the claim and the admin pages' reads over history are prepared statements, planned once per
    # connection (sql/postgresql.py CLAIM, database/transactions.py). Off for a connection pooler that cannot
    # keep them (PgBouncer in transaction mode before 1.21): every statement is then planned at each use.
    "DATABASE_PREPARED_STATEMENTS": Setting(True, flag()),
    # Claims that may wait (long-poll) at once in one server process, counted with producers' ?wait; a
    # request beyond it is answered at once (503 + Retry-After) instead of holding a thread producers need.
    # None ("auto"): a gunicorn worker keeps a quarter of its threads, at least 2, free of waiting requests
    # (queuelog/waiting/waiting_places.py). 0: nothing waits.
    "LONGPOLL_MAX_WAITING": Setting(None, whole_or_auto(0)),
    "SQLALCHEMY_ENGINE_OPTIONS": Setting({}, mapping()),
    # At most this many schedules; creating one more answers 409 (changing one never does). Every server
    # process's ticker reads the due ones a few times a second, so an unbounded number makes every tick late.
    "MAX_SCHEDULES": Setting(1000, whole(1)),
    # At most this many online worker processes (registered, beating) per worker key; registering one more
    # answers 429 until one deregisters or goes gone. Beating a registered process is never refused.
    "MAX_WORKER_PROCESSES_PER_KEY": Setting(256, whole(1)),
    # Does a server process (a gunicorn worker, flask run) fire due schedules? Every one may: exactly one
    # enqueues each tick's job (queuelog/schedules/ticker.py). Off: this process leaves it to the others.
    "SCHEDULER": Setting(True, flag()),
    # PostgreSQL: a transaction holding back vacuum for longer than this many seconds is warned about on the
    # dashboard and in /readyz's answer (queuelog/ops/db_health.py).
    "DB_XACT_WARN_SECONDS": Setting(300, whole(1)),
    # Push delivery (queuelog/push/): does a server process claim and POST the jobs of types with a push
    # target? Every one may, each claim is atomic. Off: this process leaves it to the others.
    "PUSH": Setting(True, flag()),
    # May a push target be a loopback, private or link-local address? Off: the server could be made to reach
    # services that trust its network (server-side request forgery). On only where every target is trusted.
    "PUSH_ALLOW_PRIVATE": Setting(False, flag()),
    # Deliveries one server process makes at once (its delivery threads), over every pushed type; a type's
    # concurrency limit bounds its deliveries across every process.
    "PUSH_CONCURRENCY": Setting(16, whole(1)),
}


def load_config(app: Flask, overrides: dict | None) -> None:
    """Fill ``app.config`` in the documented order, then convert and check every setting."""
    app.config.from_mapping({name: setting.default for name, setting in DEFAULTS.items()})
    app.config.from_pyfile("config.py", silent=True)
    app.config.from_prefixed_env("QUEUELOG")
    if overrides:
        app.config.from_mapping(overrides)
    app.config.update(parse_settings(app.config))

    if not (overrides and overrides.get("SQLALCHEMY_DATABASE_URI")):
        url = app.config["DATABASE_URL"] or _default_sqlite_url(app)
        app.config["SQLALCHEMY_DATABASE_URI"] = _normalise_url(url)
    app.config["SQLALCHEMY_ENGINE_OPTIONS"] = _engine_options(app.config)
    if not app.config["SECRET_KEY"]:
        app.config["SECRET_KEY"] = _instance_secret(app)


def parse_settings(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Every setting of DEFAULTS, converted by its kind; SettingError names the first bad one."""
    values = {}
    for name, setting in DEFAULTS.items():
        value = raw.get(name)
        if _blank(value):
            value = setting.default
        try:
            values[name] = setting.kind.convert(value)
        except (ValueError, TypeError, LookupError):
            raise SettingError(f"QUEUELOG_{name} must be {setting.kind.expected}, not {value!r}") from None
    if values["LOGIN_MAX_FAILURES_PER_ADDRESS"] is None:
        # Per address, whatever the usernames (spraying): the same number unless set higher where many
        # people share one address (a NAT), so that their typos together do not refuse it.
        values["LOGIN_MAX_FAILURES_PER_ADDRESS"] = values["LOGIN_MAX_FAILURES"]
    return values


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _engine_options(config) -> dict:
    """SQLAlchemy engine options: the configured ones, plus the pool limits where there is a pool."""
    options = dict(config["SQLALCHEMY_ENGINE_OPTIONS"])
    url = make_url(config["SQLALCHEMY_DATABASE_URI"])
    # An in-memory SQLite database is one connection, not a pool: pool limits do not apply.
    in_memory = url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")
    if not in_memory:
        options.setdefault("pool_size", config["DATABASE_POOL_SIZE"])
        options.setdefault("max_overflow", config["DATABASE_MAX_OVERFLOW"])
        options.setdefault("pool_timeout", config["DATABASE_POOL_TIMEOUT"])
        # The connection returned last is handed out first. Oldest-first (SQLAlchemy's default) rotates a
        # quiet process through all its connections, so each sits idle long enough to be pinged before use
        # (a round trip, on PostgreSQL) and to find its server process cold: after an idle spell, a woken
        # long-poll's claim came measurably later (PostgreSQL, measured in turns against newest-first).
        options.setdefault("pool_use_lifo", True)
        if options["pool_size"] + options["max_overflow"] < 2:
            # Start-up holds PostgreSQL's migration lock on one connection while it reads the schema
            # version on another.
            raise SettingError("QUEUELOG_DATABASE_POOL_SIZE + QUEUELOG_DATABASE_MAX_OVERFLOW must be at least 2")
    return options


def _default_sqlite_url(app: Flask) -> str:
    os.makedirs(app.instance_path, exist_ok=True)
    return "sqlite:///" + str(Path(app.instance_path) / "queuelog.db")


def _normalise_url(url: str) -> str:
    # Plain postgres URLs would pick psycopg2, which we do not ship; psycopg 3 is the driver.
    for plain in ("postgres://", "postgresql://"):
        if url.startswith(plain):
            return "postgresql+psycopg://" + url[len(plain) :]
    return url


def _instance_secret(app: Flask) -> str:
    """A secret kept in the instance folder, so every server process and restart shares it."""
    os.makedirs(app.instance_path, exist_ok=True)
    path = Path(app.instance_path) / "secret_key"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        # Another process may be between creating and writing the file: wait for its secret.
        for _ in range(100):
            secret = path.read_text().strip()
            if secret:
                return secret
            time.sleep(0.01)
        raise RuntimeError(f"{path} is empty; delete it and start again") from None
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_hex(32))
    return path.read_text().strip()
