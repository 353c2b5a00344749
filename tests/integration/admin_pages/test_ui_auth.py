"""Signing in and out of the admin pages: sessions, CSRF, safe redirects (the throttle: test_login_throttle.py)."""

from __future__ import annotations

import re

import pytest

from tests.support.ui import ADMIN_NAME, ADMIN_PASSWORD, csrf_token, post_form, sign_in, text_of

# Each request runs in its own app context, as on a server (tests/support/ui.py).
pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")

PAGES = [
    "/admin",
    "/admin/",
    "/admin/jobs",
    "/admin/jobs?status=failed",
    "/admin/jobs/1",
    "/admin/workers",
    "/admin/keys",
]


def test_root_redirects_to_the_admin_pages(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response.headers["Location"] == "/admin"


def test_every_page_but_login_sends_a_stranger_to_sign_in(client):
    for path in PAGES:
        response = client.get(path)
        assert response.status_code == 302, path
        assert response.headers["Location"].startswith("/admin/login?next="), path


def test_a_refresh_request_without_a_session_gets_401_not_the_login_page(client):
    response = client.get("/admin?partial=1")
    assert response.status_code == 401


def test_every_action_refuses_a_stranger(client, make_job, make_key, read_job):
    job = make_job(status="failed")
    make_key("worker", "x")
    for path in (
        "/admin/logout",
        "/admin/reap",
        "/admin/jobs/retry",
        f"/admin/jobs/{job}/retry",
        f"/admin/jobs/{job}/cancel",
        f"/admin/jobs/{job}/release",
        "/admin/keys",
        "/admin/keys/x/revoke",
    ):
        response = post_form(client, path, {"scope": "matching", "name": "sneaky", "role": "admin"})
        assert response.status_code == 302, path
        assert response.headers["Location"].startswith("/admin/login"), path
    assert read_job(job).status == "failed"


def test_the_login_page_is_a_form_with_a_csrf_token(client):
    response = client.get("/admin/login")
    assert response.status_code == 200
    body = text_of(response)
    assert 'name="csrf_token"' in body and 'name="username"' in body and 'type="password"' in body


def test_an_admin_signs_in_and_lands_on_the_dashboard(client, admin_user):
    response = sign_in(client)
    assert response.status_code == 302
    assert response.headers["Location"] == "/admin"
    page = client.get("/admin")
    assert page.status_code == 200
    assert ADMIN_NAME in text_of(page)


def test_a_wrong_password_is_refused_with_a_message(client, admin_user):
    response = sign_in(client, password="not the password")
    assert response.status_code == 200
    assert "Wrong username or password." in text_of(response)
    assert client.get("/admin").status_code == 302


def test_an_unknown_user_gets_the_same_message_as_a_wrong_password(client, admin_user):
    response = sign_in(client, username="nobody", password="whatever it is")
    assert "Wrong username or password." in text_of(response)


def test_an_empty_form_is_a_readable_400(client, admin_user):
    response = post_form(client, "/admin/login", {"username": "", "password": ""})
    assert response.status_code == 400
    assert "This field is required." in text_of(response)


def test_login_without_a_csrf_token_is_refused(client, admin_user):
    response = client.post("/admin/login", data={"username": ADMIN_NAME, "password": ADMIN_PASSWORD})
    assert response.status_code == 400
    assert "security token" in text_of(response)
    assert client.get("/admin").status_code == 302


def test_a_forged_csrf_token_is_refused(client, admin_user):
    response = client.post(
        "/admin/login", data={"username": ADMIN_NAME, "password": ADMIN_PASSWORD, "csrf_token": "forged"}
    )
    assert response.status_code == 400


def test_a_token_from_another_session_is_refused(app, client, admin_user):
    other_token = csrf_token(app.test_client())
    response = client.post(
        "/admin/login", data={"username": ADMIN_NAME, "password": ADMIN_PASSWORD, "csrf_token": other_token}
    )
    assert response.status_code == 400


def test_logout_is_a_post_that_ends_the_session(signed_in):
    assert signed_in.get("/admin/logout").status_code == 405
    assert signed_in.get("/admin").status_code == 200
    response = post_form(signed_in, "/admin/logout", page="/admin")
    assert response.status_code == 302
    assert response.headers["Location"] == "/admin/login"
    assert signed_in.get("/admin").status_code == 302


def test_logout_without_csrf_token_leaves_the_admin_signed_in(signed_in):
    assert signed_in.post("/admin/logout").status_code == 400
    assert signed_in.get("/admin").status_code == 200


def test_a_signed_in_admin_visiting_login_goes_to_the_dashboard(signed_in):
    response = signed_in.get("/admin/login")
    assert response.status_code == 302 and response.headers["Location"] == "/admin"


def test_the_page_asked_for_before_sign_in_is_where_sign_in_leads(client, admin_user):
    bounced = client.get("/admin/jobs?status=failed")
    login_url = bounced.headers["Location"]
    assert login_url == "/admin/login?next=/admin/jobs?status%3Dfailed"
    response = post_form(client, login_url, {"username": ADMIN_NAME, "password": ADMIN_PASSWORD})
    assert response.headers["Location"] == "/admin/jobs?status=failed"


def test_v_open_redirect_next_in_the_form_never_leaves_the_app(app, admin_user):
    for target in ("//evil.com", "https://evil.com", "/\\evil.com"):
        client = app.test_client()
        response = post_form(
            client, "/admin/login", {"username": ADMIN_NAME, "password": ADMIN_PASSWORD, "next": target}
        )
        assert response.status_code == 302, target
        assert response.headers["Location"] == "/admin", target


def test_v_open_redirect_next_in_the_query_string_is_ignored_too(client, admin_user):
    response = sign_in(client, next_url="//evil.com")
    assert response.headers["Location"] == "/admin"


def test_v_open_redirect_already_signed_in(signed_in):
    response = signed_in.get("/admin/login?next=//evil.com")
    assert response.headers["Location"] == "/admin"


def test_session_cookie_is_httponly_and_samesite_lax(client, admin_user):
    response = sign_in(client)
    cookie = response.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie
    assert "Secure" not in cookie  # plain-HTTP development default


@pytest.mark.parametrize("config_overrides", [{"SESSION_COOKIE_SECURE": True}])
def test_session_cookie_secure_is_configurable(client, admin_user, config_overrides):
    token = csrf_token_over_https(client)
    response = client.post(
        "/admin/login",
        base_url="https://localhost",
        headers={"Referer": "https://localhost/admin/login"},
        data={"username": ADMIN_NAME, "password": ADMIN_PASSWORD, "csrf_token": token},
    )
    assert response.status_code == 302
    assert "Secure" in response.headers["Set-Cookie"]


def csrf_token_over_https(client) -> str:
    page = client.get("/admin/login", base_url="https://localhost")
    return re.search(r'name="csrf_token" type="hidden" value="([^"]+)"', text_of(page)).group(1)


def test_session_cookie_secure_comes_from_the_environment(database_url, monkeypatch):
    from queuelog import create_app
    from tests.support.database import app_config

    monkeypatch.setenv("QUEUELOG_SESSION_COOKIE_SECURE", "true")
    config = app_config(database_url)
    assert create_app(config).config["SESSION_COOKIE_SECURE"] is True
