"""The sign-in throttle: failures refuse the guessing address and (username, address) pair, never the
account everywhere; failures from many addresses only slow the account down."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from queuelog.extensions import db
from queuelog.models import LoginAttempt
from tests.support.ui import ADMIN_NAME, sign_in, text_of

# Each request runs in its own app context, as on a server (tests/support/ui.py).
pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")


def fail(client, username: str, address: str, times: int = 1) -> None:
    """Sign in with a wrong password ``times`` times from ``address``."""
    for _ in range(times):
        response = sign_in(client, username=username, password="wrong password!", environ_base={"REMOTE_ADDR": address})
        assert response.status_code == 200, text_of(response)


def sign_in_from(client, address: str, **kwargs):
    return sign_in(client, environ_base={"REMOTE_ADDR": address}, **kwargs)


def failures_stored() -> int:
    return db.session.execute(select(func.count()).select_from(LoginAttempt)).scalar_one()


# --- the lock-out attack -------------------------------------------------------------------------


def test_v_lockout_five_wrong_passwords_from_one_address_do_not_lock_the_admin_out_elsewhere(client, admin_user):
    fail(client, ADMIN_NAME, "10.0.0.1", 5)
    response = sign_in_from(client, "10.0.9.9")
    assert response.status_code == 302
    assert client.get("/admin").status_code == 200


@pytest.mark.parametrize("config_overrides", [{"LOGIN_SLOWDOWN_SECONDS": 8}])
def test_v_lockout_failures_from_many_addresses_only_slow_the_admin_down(app, admin_user, config_overrides):
    attacker = app.test_client()
    for n in range(4):
        fail(attacker, ADMIN_NAME, f"10.0.1.{n}")
    started = time.monotonic()
    assert sign_in_from(app.test_client(), "10.0.9.9").status_code == 302
    assert time.monotonic() - started < 8  # four failures: no slowdown yet

    fail(attacker, ADMIN_NAME, "10.0.1.4")
    started = time.monotonic()
    assert sign_in_from(app.test_client(), "10.0.9.9").status_code == 302
    assert time.monotonic() - started >= 8


@pytest.mark.parametrize("config_overrides", [{"LOGIN_MAX_FAILURES_PER_ADDRESS": 20}])
def test_v_lockout_a_shared_address_can_allow_more_failures_than_one_account(app, admin_user, config_overrides):
    # An office behind one NAT address: five colleagues each mistype once, and the admin may still sign in ...
    for n in range(5):
        fail(app.test_client(), f"colleague-{n}", "10.0.2.1")
    assert sign_in_from(app.test_client(), "10.0.2.1").status_code == 302
    # ... while five wrong passwords for one account from there still refuse that account from there.
    fail(app.test_client(), "colleague-0", "10.0.2.1", 4)
    assert sign_in_from(app.test_client(), "10.0.2.1", username="colleague-0").status_code == 429


# --- what is still refused -----------------------------------------------------------------------


def test_v_brute_force_five_failures_refuse_that_address_for_that_account(client, admin_user):
    fail(client, ADMIN_NAME, "10.0.3.1", 5)
    response = sign_in_from(client, "10.0.3.1")
    assert response.status_code == 429
    assert "Too many failed sign-ins" in text_of(response)
    assert 0 < int(response.headers["Retry-After"]) <= 15 * 60
    assert client.get("/admin").status_code == 302


def test_v_password_spraying_refuses_the_address_for_every_username(client, admin_user):
    for n in range(5):
        fail(client, f"guess-{n}", "10.0.4.1")
    refused = sign_in_from(client, "10.0.4.1")
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) > 0
    assert sign_in_from(client, "10.0.4.2").status_code == 302


@pytest.mark.parametrize("config_overrides", [{"LOGIN_MAX_FAILURES_PER_ADDRESS": 3}])
def test_the_per_address_limit_is_configurable(client, admin_user, config_overrides):
    for n in range(3):
        fail(client, f"guess-{n}", "10.0.5.1")
    assert sign_in_from(client, "10.0.5.1").status_code == 429


@pytest.mark.parametrize("config_overrides", [{"LOGIN_MAX_FAILURES": 2}])
def test_the_per_account_limit_is_configurable(client, admin_user, config_overrides):
    fail(client, ADMIN_NAME, "10.0.6.1", 2)
    assert sign_in_from(client, "10.0.6.1").status_code == 429


def test_refused_attempts_are_not_checked_or_counted(client, admin_user):
    fail(client, ADMIN_NAME, "10.0.7.1", 5)
    for _ in range(3):
        assert sign_in_from(client, "10.0.7.1").status_code == 429
    assert failures_stored() == 5


def test_the_refusal_lifts_when_the_failures_age_out_of_the_window(client, admin_user):
    fail(client, ADMIN_NAME, "10.0.8.1", 5)
    assert sign_in_from(client, "10.0.8.1").status_code == 429
    with db.engine.begin() as conn:
        for row in conn.execute(select(LoginAttempt.id, LoginAttempt.at)).all():
            conn.execute(
                update(LoginAttempt).where(LoginAttempt.id == row.id).values(at=row.at - timedelta(minutes=16))
            )
    assert sign_in_from(client, "10.0.8.1").status_code == 302


def test_a_success_clears_the_failures_of_that_account_from_that_address(app, admin_user):
    for _ in range(2):
        browser = app.test_client()
        fail(browser, ADMIN_NAME, "10.0.9.1", 4)
        assert sign_in_from(browser, "10.0.9.1").status_code == 302


def test_users_unlock_lets_the_account_in_again_from_the_refused_address(client, admin_user, runner):
    fail(client, ADMIN_NAME, "10.0.10.1", 5)
    assert sign_in_from(client, "10.0.10.1").status_code == 429
    assert runner.invoke(args=["users", "unlock", ADMIN_NAME]).exit_code == 0
    assert sign_in_from(client, "10.0.10.1").status_code == 302
