"""Configuration: defaults, then ``instance/config.py``, then ``QUEUELOG_*`` variables, then a test mapping."""
from __future__ import annotations

import json
import math
import os
import secrets
import time
from pathlib import Path

from flask import Flask
from sqlalchemy.engine import make_url

DEFAULTS = {
    "DATABASE_URL": None,  # None = SQLite file in the instance folder
    "JOB_TYPES": ["default"],
    "LEASE_SECONDS": 300,
    "MAX_PAYLOAD_BYTES": 65536,
    "MAX_CONTENT_LENGTH": 1024 * 1024,
    "RETRY_BACKOFF_BASE": 10.0,
    "RETRY_BACKOFF_MAX": 3600.0,
    "MAX_STALLS": 3,
    "MAX_ERROR_CHARS": 4000,
    "SQLITE_BUSY_TIMEOUT_MS": 30000,
    "SQLITE_SYNCHRONOUS": "FULL",
    "SESSION_COOKIE_HTTPONLY": True,
    "SESSION_COOKIE_SAMESITE": "Lax",
    "SESSION_COOKIE_SECURE": False,
    "AUTO_MIGRATE": True,
    "LOG_FORMAT": "text",  # text | json (queuelog/ops/logging_setup.py)
    "METRICS_TOKEN": None,  # a bearer token that may read /metrics besides admin keys
    "RETENTION": "7d",  # how old a finished job must be before `flask purge` deletes it
    # An admin's session ends after this long without a page request, and this long after sign-in.
    "SESSION_IDLE_MINUTES": 30,
    "SESSION_MAX_HOURS": 12,
    "SQLALCHEMY_TRACK_MODIFICATIONS": False,
    # Connections per server process. A request holds one at a time, so a sync gunicorn worker uses
    # one and a gthread worker at most one per thread (plus a LISTEN connection on PostgreSQL when
    # claims wait). The cap protects PostgreSQL's max_connections; a request that finds the pool
    # exhausted waits DATABASE_POOL_TIMEOUT seconds, then gets a 503 (well before gunicorn's 30 s
    # worker timeout would kill it).
    "DATABASE_POOL_SIZE": 5,
    "DATABASE_MAX_OVERFLOW": 10,
    "DATABASE_POOL_TIMEOUT": 10,
    # A pooled connection that sat unused this many seconds is tested before a request gets it (0: every
    # time): after a database restart, requests then get fresh connections instead of dead ones (503s).
    # Connections in constant use skip the test, a round trip on every request otherwise.
    "DATABASE_PING_AFTER_IDLE_SECONDS": 1.0,
    # Claims that may wait (long-poll) at once in one server process; a claim beyond it is answered
    # at once (503 + Retry-After) instead of holding a thread producers need. None ("auto"): a
    # gunicorn worker keeps a quarter of its threads, at least 2, free of waiting claims
    # (queuelog/longpoll.py). 0: claims never wait.
    "LONGPOLL_MAX_WAITING": None,
    "SQLALCHEMY_ENGINE_OPTIONS": {},
}


def load_config(app: Flask, overrides: dict | None) -> None:
    """Fill ``app.config`` in the documented order and normalise the values."""
    app.config.from_mapping(DEFAULTS)
    app.config.from_pyfile("config.py", silent=True)
    app.config.from_prefixed_env("QUEUELOG")
    if overrides:
        app.config.from_mapping(overrides)

    app.config["JOB_TYPES"] = _as_list(app.config["JOB_TYPES"])
    for name in ("LEASE_SECONDS", "MAX_PAYLOAD_BYTES", "MAX_CONTENT_LENGTH", "MAX_STALLS",
                 "MAX_ERROR_CHARS", "SQLITE_BUSY_TIMEOUT_MS"):
        app.config[name] = int(app.config[name])
    for name in ("RETRY_BACKOFF_BASE", "RETRY_BACKOFF_MAX", "DATABASE_PING_AFTER_IDLE_SECONDS"):
        app.config[name] = float(app.config[name])
    app.config["LONGPOLL_MAX_WAITING"] = _count_or_auto("LONGPOLL_MAX_WAITING", app.config["LONGPOLL_MAX_WAITING"])
    for name in ("SESSION_IDLE_MINUTES", "SESSION_MAX_HOURS"):
        app.config[name] = _positive_number(name, app.config[name])

    if not (overrides and overrides.get("SQLALCHEMY_DATABASE_URI")):
        url = app.config.get("DATABASE_URL") or _default_sqlite_url(app)
        app.config["SQLALCHEMY_DATABASE_URI"] = _normalise_url(url)
    app.config["SQLALCHEMY_ENGINE_OPTIONS"] = _engine_options(app.config)
    if not app.config.get("SECRET_KEY"):
        app.config["SECRET_KEY"] = _instance_secret(app)


def _engine_options(config) -> dict:
    """SQLAlchemy engine options: the configured ones, plus the pool limits where there is a pool."""
    options = dict(config.get("SQLALCHEMY_ENGINE_OPTIONS") or {})
    url = make_url(config["SQLALCHEMY_DATABASE_URI"])
    # An in-memory SQLite database is one connection, not a pool: pool limits do not apply.
    in_memory = url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")
    if not in_memory:
        options.setdefault("pool_size", int(config["DATABASE_POOL_SIZE"]))
        options.setdefault("max_overflow", int(config["DATABASE_MAX_OVERFLOW"]))
        options.setdefault("pool_timeout", float(config["DATABASE_POOL_TIMEOUT"]))
        if options["pool_size"] + options["max_overflow"] < 2:
            # Start-up holds PostgreSQL's migration lock on one connection while it reads the schema
            # version on another.
            raise ValueError("QUEUELOG_DATABASE_POOL_SIZE + QUEUELOG_DATABASE_MAX_OVERFLOW must be at least 2")
    return options


def _positive_number(name: str, value) -> float:
    """A setting that must be a finite number above 0; anything else stops the start, naming it."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not 0 < number < math.inf:
        raise ValueError(f"QUEUELOG_{name} must be a number above 0, not {value!r}")
    return number


def _count_or_auto(name: str, value) -> int | None:
    """A whole number of at least 0, or None for "auto" (also spelled "auto" or left empty)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "auto")):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"QUEUELOG_{name} must be a whole number of at least 0, or auto; not {value!r}")
    return value


def _as_list(value) -> list[str]:
    """Accept a JSON list (already decoded by Flask) or a comma-separated string."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            value = json.loads(text)
        else:
            value = text.split(",")
    return [str(item).strip() for item in value if str(item).strip()]


def _default_sqlite_url(app: Flask) -> str:
    os.makedirs(app.instance_path, exist_ok=True)
    return "sqlite:///" + str(Path(app.instance_path) / "queuelog.db")


def _normalise_url(url: str) -> str:
    # Plain postgres URLs would pick psycopg2, which we do not ship; psycopg 3 is the driver.
    for plain in ("postgres://", "postgresql://"):
        if url.startswith(plain):
            return "postgresql+psycopg://" + url[len(plain):]
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
        raise RuntimeError(f"{path} is empty; delete it and start again")
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_hex(32))
    return path.read_text().strip()
