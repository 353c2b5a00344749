"""Admin sessions end on the server: sign-out, a new password or a deleted user end every copy of the
cookie, and a session expires after an idle time and after an absolute lifetime, however busy."""

from __future__ import annotations

import hashlib
import time
from datetime import timedelta

import pytest
from flask_login.utils import encode_cookie
from sqlalchemy import func, select, update

from queuelog import create_app
from queuelog.extensions import db
from queuelog.models import AdminSession, ApiKey, User
from queuelog.ui.auth import SESSION_TOKEN_KEY
from tests.support.database import app_config
from tests.support.ui import ADMIN_NAME, ADMIN_PASSWORD, csrf_token, flashes, post_form, sign_in, text_of

# Each request runs in its own app context, as on a server (tests/support/ui.py).
pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")

NEW_PASSWORD = "a brand new passphrase"


def signed_in_browser(app, username: str = ADMIN_NAME, password: str = ADMIN_PASSWORD):
    """A new browser that signed in through the form."""
    browser = app.test_client()
    assert sign_in(browser, username=username, password=password).status_code == 302
    return browser


def copy_of_the_cookie(app, browser):
    """Another browser holding a copy of ``browser``'s session cookie, as someone who stole it would."""
    thief = app.test_client()
    thief.set_cookie("session", browser.get_cookie("session").value)
    return thief


def sign_out(browser) -> None:
    response = post_form(browser, "/admin/logout", page="/admin")
    assert response.status_code == 302 and response.headers["Location"] == "/admin/login"


def is_sent_to_sign_in(response) -> bool:
    return response.status_code == 302 and response.headers["Location"].startswith("/admin/login")


def age_sessions(**by):
    """Move every stored session's times back, as if that much time had passed."""
    with db.engine.begin() as conn:
        for row in conn.execute(select(AdminSession.id, AdminSession.created_at, AdminSession.last_seen_at)).all():
            conn.execute(
                update(AdminSession)
                .where(AdminSession.id == row.id)
                .values(
                    created_at=row.created_at - by.get("created", timedelta()),
                    last_seen_at=row.last_seen_at - by.get("last_seen", timedelta()),
                )
            )


# --- sign-out ------------------------------------------------------------------------------------


def test_v_cookie_replay_a_copy_taken_before_sign_out_no_longer_opens_the_keys_page(app, admin_user):
    admin = signed_in_browser(app)
    thief = copy_of_the_cookie(app, admin)
    assert thief.get("/admin/keys").status_code == 200  # the copy is as good as the original while it lasts
    sign_out(admin)
    assert is_sent_to_sign_in(thief.get("/admin/keys"))
    # Signing in again opens a new session; it does not bring the copied one back.
    assert sign_in(admin).status_code == 302
    assert admin.get("/admin/keys").status_code == 200
    assert is_sent_to_sign_in(copy_of_the_cookie(app, thief).get("/admin/keys"))


def test_v_cookie_replay_a_copy_taken_before_sign_out_cannot_create_an_admin_key(app, admin_user):
    admin = signed_in_browser(app)
    thief = copy_of_the_cookie(app, admin)
    token = csrf_token(thief, "/admin/keys")  # a form token of that session, read while it was live
    sign_out(admin)
    response = thief.post(
        "/admin/keys", data={"name": "backdoor", "role": "admin", "max_priority": "", "types": "", "csrf_token": token}
    )
    assert is_sent_to_sign_in(response)
    assert db.session.execute(select(func.count()).select_from(ApiKey)).scalar_one() == 0


def test_signing_out_ends_every_session_of_that_admin_and_no_one_else_s(app, admin_user, runner):
    runner.invoke(args=["users", "create", "day-shift", "--password-stdin"], input=NEW_PASSWORD + "\n")
    laptop, phone = signed_in_browser(app), signed_in_browser(app)
    colleague = signed_in_browser(app, "day-shift", NEW_PASSWORD)
    sign_out(laptop)
    assert is_sent_to_sign_in(phone.get("/admin"))
    assert phone.get("/admin?partial=1").status_code == 401
    assert colleague.get("/admin").status_code == 200


def test_the_database_holds_only_a_digest_of_the_session_token(app, admin_user):
    admin = signed_in_browser(app)
    cookie = app.session_interface.get_signing_serializer(app).loads(admin.get_cookie("session").value)
    token = cookie[SESSION_TOKEN_KEY]
    stored = db.session.execute(select(AdminSession.digest)).scalars().all()
    assert len(token) >= 43  # 256 random bits
    assert stored == [hashlib.sha256(token.encode()).hexdigest()]


# --- password change and deletion ----------------------------------------------------------------


def test_a_new_password_ends_every_session_of_that_user(app, admin_user, runner):
    admin = signed_in_browser(app)
    result = runner.invoke(args=["users", "set-password", ADMIN_NAME, "--password-stdin"], input=NEW_PASSWORD + "\n")
    assert result.exit_code == 0, result.output
    assert is_sent_to_sign_in(admin.get("/admin"))
    assert sign_in(app.test_client()).status_code == 200  # the old password is refused
    assert sign_in(app.test_client(), password=NEW_PASSWORD).status_code == 302


def test_deleting_a_user_ends_their_sessions(app, admin_user, runner):
    admin = signed_in_browser(app)
    result = runner.invoke(args=["users", "delete", ADMIN_NAME])
    assert result.exit_code == 0, result.output
    assert is_sent_to_sign_in(admin.get("/admin"))
    assert db.session.execute(select(func.count()).select_from(AdminSession)).scalar_one() == 0


def test_v_cookie_replay_signing_in_again_ends_the_session_the_browser_held_before(app, admin_user):
    admin = signed_in_browser(app)
    stolen_before = copy_of_the_cookie(app, admin)
    # The same browser signs in again without signing out (a sign-in form left open in another tab).
    again = post_form(admin, "/admin/login", {"username": ADMIN_NAME, "password": ADMIN_PASSWORD}, page="/admin")
    assert again.status_code == 302
    assert is_sent_to_sign_in(stolen_before.get("/admin/keys"))
    assert admin.get("/admin/keys").status_code == 200


def test_a_page_request_soon_after_the_last_does_not_rewrite_the_session(app, admin_user):
    admin = signed_in_browser(app)
    age_sessions(last_seen=timedelta(seconds=20))
    with db.engine.connect() as conn:
        seen_before = conn.execute(select(AdminSession.last_seen_at)).scalar_one()
    assert admin.get("/admin").status_code == 200
    with db.engine.connect() as conn:
        assert conn.execute(select(AdminSession.last_seen_at)).scalar_one() == seen_before


# --- expiry --------------------------------------------------------------------------------------


@pytest.mark.parametrize("config_overrides", [{"SESSION_IDLE_MINUTES": 0.02}])  # 1.2 s
def test_a_session_left_idle_longer_than_the_idle_time_has_ended(app, admin_user, config_overrides):
    admin = signed_in_browser(app)
    time.sleep(2)
    response = admin.get("/admin/keys")
    assert is_sent_to_sign_in(response)
    assert "Your session has ended; sign in again." in flashes(admin.get(response.headers["Location"]))


def test_each_page_request_restarts_the_idle_time(app, admin_user):
    admin = signed_in_browser(app)
    age_sessions(last_seen=timedelta(minutes=29))
    assert admin.get("/admin").status_code == 200
    age_sessions(last_seen=timedelta(minutes=29))
    assert admin.get("/admin").status_code == 200
    age_sessions(last_seen=timedelta(minutes=31))
    assert is_sent_to_sign_in(admin.get("/admin"))


@pytest.mark.parametrize("config_overrides", [{"SESSION_IDLE_MINUTES": 0.02}])  # 1.2 s
def test_auto_refresh_does_not_keep_an_idle_session_alive(app, admin_user, config_overrides):
    admin = signed_in_browser(app)
    started = time.monotonic()
    while time.monotonic() - started < 2:
        admin.get("/admin?partial=1")
        time.sleep(0.2)
    response = admin.get("/admin?partial=1")
    assert response.status_code == 401
    assert text_of(response) == "Your session has ended; reload the page to sign in again."


@pytest.mark.parametrize("config_overrides", [{"SESSION_MAX_HOURS": 0.0005}])  # 1.8 s
def test_a_session_ends_at_its_absolute_lifetime_however_busy(app, admin_user, config_overrides):
    admin = signed_in_browser(app)
    started = time.monotonic()
    while time.monotonic() - started < 2.5:
        admin.get("/admin")
        time.sleep(0.2)
    assert is_sent_to_sign_in(admin.get("/admin"))


def test_the_absolute_lifetime_is_twelve_hours_by_default(app, admin_user):
    admin = signed_in_browser(app)
    age_sessions(created=timedelta(hours=11, minutes=58))
    assert admin.get("/admin").status_code == 200
    age_sessions(created=timedelta(minutes=3))
    assert is_sent_to_sign_in(admin.get("/admin"))


def test_v_remember_me_a_signed_remember_cookie_does_not_open_a_session(app, admin_user):
    user_id = db.session.execute(select(User.id)).scalar_one()
    db.session.rollback()
    browser = app.test_client()
    with app.test_request_context():
        browser.set_cookie("remember_token", encode_cookie(str(user_id)))
    assert is_sent_to_sign_in(browser.get("/admin/keys"))


def test_the_idle_time_comes_from_the_environment(database_url, admin_user, monkeypatch):
    monkeypatch.setenv("QUEUELOG_SESSION_IDLE_MINUTES", "0.02")  # 1.2 s
    served = create_app(app_config(database_url))
    try:
        admin = signed_in_browser(served)
        time.sleep(2)
        assert is_sent_to_sign_in(admin.get("/admin"))
    finally:
        with served.app_context():
            db.engine.dispose()


@pytest.mark.parametrize(
    "name, value", [("SESSION_IDLE_MINUTES", "0"), ("SESSION_IDLE_MINUTES", "soon"), ("SESSION_MAX_HOURS", "-1")]
)
def test_a_bad_session_setting_stops_the_start_with_a_clear_message(database_url, monkeypatch, name, value):
    monkeypatch.setenv(f"QUEUELOG_{name}", value)
    with pytest.raises(ValueError, match=f"QUEUELOG_{name}"):
        create_app(app_config(database_url))
