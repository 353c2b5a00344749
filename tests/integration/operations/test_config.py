"""Settings: one table (queuelog/config.py DEFAULTS) with a default and a kind each, one parse that
converts every value and stops the start with the QUEUELOG_ variable's name on a bad one."""

from __future__ import annotations

import re

import pytest

from queuelog import create_app
from queuelog.config import DEFAULTS, SettingError, parse_settings
from queuelog.extensions import db
from tests.support.database import app_config
from tests.support.paths import PACKAGE

# Set by load_config itself (from DATABASE_URL) or owned by Flask: read, but not a QUEUELOG_ setting.
DERIVED = {"SQLALCHEMY_DATABASE_URI"}


def test_every_default_is_a_value_of_its_own_kind():
    parsed = parse_settings({})
    for name, setting in DEFAULTS.items():
        expected = setting.default
        if name == "LOGIN_MAX_FAILURES_PER_ADDRESS":
            expected = DEFAULTS["LOGIN_MAX_FAILURES"].default  # unset: the same as LOGIN_MAX_FAILURES
        assert parsed[name] == expected, name


def test_every_setting_the_code_reads_is_in_the_table_and_read_without_a_default_of_its_own():
    read, with_default = set(), []
    for path in PACKAGE.rglob("*.py"):
        source = path.read_text()
        read |= set(re.findall(r"config\[['\"]([A-Z_]+)['\"]\]", source))
        with_default += [f"{path.name}: {m}" for m in re.findall(r"config\.get\(['\"][A-Z_]+['\"], [^)]+\)", source)]
    assert read - DERIVED <= set(DEFAULTS), sorted(read - DERIVED - set(DEFAULTS))
    assert not with_default


@pytest.mark.parametrize(
    "name, raw, value",
    [
        ("LEASE_SECONDS", "45", 45),  # QUEUELOG_LEASE_SECONDS=45 read as text
        ("LEASE_SECONDS", 45.0, 45),  # … or as JSON
        ("RETRY_BACKOFF_BASE", 0, 0.0),
        ("SESSION_IDLE_MINUTES", "0.02", 0.02),
        ("AUTO_MIGRATE", "false", False),
        ("AUTO_MIGRATE", "No", False),
        ("SESSION_COOKIE_SECURE", True, True),
        ("SQLITE_SYNCHRONOUS", "normal", "NORMAL"),
        ("LOG_FORMAT", "JSON", "json"),
        ("JOB_TYPES", "send-invoice, resize-image", ["send-invoice", "resize-image"]),
        ("JOB_TYPES", '["a", "b"]', ["a", "b"]),
        ("LONGPOLL_MAX_WAITING", "auto", None),
        ("LONGPOLL_MAX_WAITING", 0, 0),
        ("TRUSTED_PROXIES", "", 0),  # empty: the default
        ("TRUSTED_PROXIES", None, 0),
        ("LOGIN_MAX_FAILURES_PER_ADDRESS", 20, 20),
        ("METRICS_TOKEN", "", None),
        ("SECRET_KEY", 12345, "12345"),  # QUEUELOG_SECRET_KEY=12345 arrives as a JSON number
        ("RETENTION", "12h", "12h"),
        ("UI_REFRESH_SECONDS", "1", 1),
        ("MAX_SCHEDULES", "3", 3),
        ("MAX_WORKER_PROCESSES_PER_KEY", 2.0, 2),
    ],
)
def test_a_value_is_converted_to_its_kind(name, raw, value):
    assert parse_settings({name: raw})[name] == value


def test_the_per_address_limit_follows_the_per_pair_limit_unless_set():
    assert parse_settings({"LOGIN_MAX_FAILURES": 2})["LOGIN_MAX_FAILURES_PER_ADDRESS"] == 2
    assert (
        parse_settings({"LOGIN_MAX_FAILURES": 2, "LOGIN_MAX_FAILURES_PER_ADDRESS": 9})["LOGIN_MAX_FAILURES_PER_ADDRESS"]
        == 9
    )


@pytest.mark.parametrize(
    "name, raw",
    [
        ("LEASE_SECONDS", "soon"),
        ("LEASE_SECONDS", 0),
        ("LEASE_SECONDS", 2.5),
        ("LEASE_SECONDS", True),
        ("MAX_PAYLOAD_BYTES", -1),
        ("RETRY_BACKOFF_MAX", "nan"),
        ("RETRY_BACKOFF_BASE", -1),
        ("SESSION_MAX_HOURS", "inf"),
        ("AUTO_MIGRATE", "maybe"),
        ("AUTO_MIGRATE", 2),
        ("SQLITE_SYNCHRONOUS", "OFF"),
        ("LOG_FORMAT", "xml"),
        ("JOB_TYPES", {"a": 1}),
        ("RETENTION", "forever"),
        ("LONGPOLL_MAX_WAITING", "lots"),
        ("TRUSTED_PROXIES", -1),
        ("LOGIN_MAX_FAILURES", "five"),
        ("LOGIN_WINDOW_SECONDS", 0),
        ("LOGIN_SLOWDOWN_SECONDS", "a while"),
        ("UI_REFRESH_SECONDS", 0),
        ("SQLALCHEMY_ENGINE_OPTIONS", "pool_size=3"),
        ("SESSION_COOKIE_SAMESITE", "sometimes"),
        ("MAX_SCHEDULES", 0),
        ("MAX_SCHEDULES", "lots"),
        ("MAX_WORKER_PROCESSES_PER_KEY", -1),
        ("MAX_WORKER_PROCESSES_PER_KEY", "1.5"),
    ],
)
def test_a_bad_value_is_refused_naming_its_variable_and_what_it_must_be(name, raw):
    with pytest.raises(SettingError, match=rf"^QUEUELOG_{name} must be .+, not {re.escape(repr(raw))}$"):
        parse_settings({name: raw})


def test_settings_from_the_environment_reach_their_users_converted(database_url, monkeypatch):
    monkeypatch.setenv("QUEUELOG_LOGIN_WINDOW_SECONDS", "60")
    monkeypatch.setenv("QUEUELOG_UI_REFRESH_SECONDS", "3")
    monkeypatch.setenv("QUEUELOG_TRUSTED_PROXIES", "1")
    app = create_app(app_config(database_url))
    try:
        assert (
            app.config["LOGIN_WINDOW_SECONDS"],
            app.config["UI_REFRESH_SECONDS"],
            app.config["TRUSTED_PROXIES"],
        ) == (60, 3, 1)
        with app.test_request_context():
            from queuelog.auth.login_throttle import limits

            assert limits().window.total_seconds() == 60
    finally:
        with app.app_context():
            db.engine.dispose()


def test_a_bad_setting_in_the_environment_stops_the_start(database_url, monkeypatch):
    monkeypatch.setenv("QUEUELOG_UI_REFRESH_SECONDS", "often")
    with pytest.raises(ValueError, match="QUEUELOG_UI_REFRESH_SECONDS must be a whole number of at least 1"):
        create_app(app_config(database_url))


def test_the_caps_default_to_1000_schedules_and_256_worker_processes_per_key():
    parsed = parse_settings({})
    assert (parsed["MAX_SCHEDULES"], parsed["MAX_WORKER_PROCESSES_PER_KEY"]) == (1000, 256)


def test_a_bad_cap_in_the_environment_stops_the_start(database_url, monkeypatch):
    monkeypatch.setenv("QUEUELOG_MAX_SCHEDULES", "none")
    with pytest.raises(ValueError, match="QUEUELOG_MAX_SCHEDULES must be a whole number of at least 1, not 'none'"):
        create_app(app_config(database_url))
