"""No admin page answers 500, whatever a signed-in browser puts in its path, query string or form.

Every rule of the admin blueprint is walked with values an id column or a text column cannot hold:
ids past 64 bits, negative and non-digit ids, NULs (PostgreSQL text cannot hold them), bytes that are
not UTF-8, very long strings. The answer may be a 404, a 400, a redirect or the page itself; never 500.
"""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest

from queuelog import create_app
from tests.support.database import app_config
from tests.support.ui import csrf_token, post_form

# Each request runs in its own app context, as on a server (tests/support/ui.py).
pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")

HOSTILE_VALUES = [
    "9223372036854775808",  # one past the largest BIGINT: the id the issue reported
    "18446744073709551616",  # past 64 bits unsigned
    "9" * 40,
    "-1",
    "0",
    "1e400",
    "NaN",
    "abc",
    "",
    "\x00",
    "a\x00b",  # PostgreSQL text cannot hold NUL
    "x" * 5000,
    "é🙂",
    "²",
    "١٢٣",  # digits to str.isdigit(), but only the second is one to int()
]
# Query parameters the pages read, plus one they do not.
QUERY_NAMES = [
    "status",
    "type",
    "priority",
    "worker",
    "worker_id",
    "q",
    "limit",
    "cursor",
    "partial",
    "next",
    "unknown",
]


def _admin_rules():
    application = create_app(app_config("sqlite://", AUTO_MIGRATE=False))
    return [rule for rule in application.url_map.iter_rules() if rule.endpoint.startswith("ui.")]


ADMIN_RULES = _admin_rules()
GET_PATHS = sorted(rule.rule for rule in ADMIN_RULES if "GET" in rule.methods and not rule.arguments)
PATH_RULES = sorted(
    (rule.rule, method) for rule in ADMIN_RULES if rule.arguments for method in sorted(rule.methods & {"GET", "POST"})
)


def _with_value(rule: str, value: str) -> str:
    return re.sub(r"<[^>]+>", quote(value, safe=""), rule)


def _not_a_server_error(response, what: str) -> None:
    assert response.status_code < 500, (what, response.status_code, response.get_data(as_text=True)[:300])


@pytest.mark.parametrize("rule, method", PATH_RULES)
def test_no_admin_path_value_is_a_500(signed_in, rule, method):
    for value in HOSTILE_VALUES:
        path = _with_value(rule, value)
        response = signed_in.get(path) if method == "GET" else post_form(signed_in, path, page="/admin/keys")
        _not_a_server_error(response, f"{method} {path[:80]}")


def test_a_job_id_past_64_bits_is_a_404_page(signed_in):
    response = signed_in.get("/admin/jobs/9223372036854775808")
    assert response.status_code == 404
    assert response.mimetype == "text/html"


@pytest.mark.parametrize("action", ["retry", "cancel", "release"])
def test_an_action_on_a_job_id_past_64_bits_is_a_404_page(signed_in, action):
    response = post_form(signed_in, f"/admin/jobs/9223372036854775808/{action}", page="/admin/keys")
    assert response.status_code == 404
    assert response.mimetype == "text/html"


@pytest.mark.parametrize("path", GET_PATHS)
def test_no_admin_query_value_is_a_500(signed_in, path):
    for name in QUERY_NAMES:
        for value in HOSTILE_VALUES:
            _not_a_server_error(signed_in.get(path, query_string={name: value}), f"{path}?{name}={value[:20]!r}")
        # Bytes that are not UTF-8 at all.
        _not_a_server_error(signed_in.get(f"{path}?{name}=%ff%fe"), f"{path}?{name}=%ff%fe")


@pytest.mark.parametrize("value", HOSTILE_VALUES)
def test_no_bulk_retry_form_value_is_a_500(signed_in, value):
    for data in (
        {"scope": "selected", "job_id": [value]},
        {"scope": value},
        {"scope": "matching", "type": value},
        {"scope": "matching", "q": value},
        {"scope": "matching", "worker": value},
        {"scope": "matching", "status": value},
    ):
        _not_a_server_error(post_form(signed_in, "/admin/jobs/retry", data, page="/admin/jobs"), repr(data)[:80])


@pytest.mark.parametrize("value", HOSTILE_VALUES)
def test_no_key_form_value_is_a_500(signed_in, value):
    for data in (
        {"name": value, "role": "worker"},
        {"name": "k", "role": value},
        {"name": "k2", "role": "producer", "max_priority": value},
        {"name": "k3", "role": "worker", "types": value},
    ):
        _not_a_server_error(post_form(signed_in, "/admin/keys", data, page="/admin/keys"), repr(data)[:80])


@pytest.mark.parametrize("value", HOSTILE_VALUES)
def test_no_sign_in_form_value_is_a_500(client, admin_user, value):
    for data in ({"username": value, "password": "x" * 12}, {"username": "night-owl", "password": value}):
        token = csrf_token(client)
        _not_a_server_error(client.post("/admin/login", data={**data, "csrf_token": token}), repr(data)[:80])
