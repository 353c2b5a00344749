"""The API keys page: list, issue with the secret shown once, revoke."""

from __future__ import annotations

import html
import re

import pytest

from tests.support.api import bearer
from tests.support.ui import flashes, post_form, text_of

# Each request runs in its own app context, as on a server (tests/support/ui.py).
pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")


def key_row(body: str, name: str) -> str:
    match = re.search(rf'<tr class="[^"]*" data-key="{re.escape(name)}">(.*?)</tr>', body, re.S)
    assert match, f"no row for key {name}"
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", match.group(1)))).strip()


def create(client, **fields):
    data = {"name": "mailer", "role": "worker", "max_priority": "", "types": ""}
    data.update(fields)
    return post_form(client, "/admin/keys", data, page="/admin/keys")


def test_keys_are_listed_with_role_ceiling_types_prefix_dates_and_state(signed_in, make_key):
    secret = make_key("producer", "billing", max_priority="high", types=["email", "report"])
    make_key("worker", "old-worker")
    post_form(signed_in, "/admin/keys/old-worker/revoke", {"confirmed": "yes"}, page="/admin/keys")
    body = text_of(signed_in.get("/admin/keys"))
    row = key_row(body, "billing")
    assert row.startswith("billing producer high email, report none " + secret[:9] + "…")
    assert "never" in row and "active" in row
    assert "revoked" in key_row(body, "old-worker")
    assert key_row(body, "old-worker").startswith("old-worker worker does not apply any")
    assert secret not in body  # only the prefix is ever shown


def test_last_used_is_shown_once_a_key_is_used(signed_in, client, make_key):
    secret = make_key("admin", "ops")
    assert client.get("/jobs", headers=bearer(secret)).status_code == 200
    row = key_row(text_of(signed_in.get("/admin/keys")), "ops")
    assert "never" not in row and "ago" in row


def test_creating_a_key_shows_its_secret_once_and_it_works(signed_in, client):
    response = create(signed_in, name="thumbnailer", role="worker", types="resize-image")
    assert response.status_code == 200
    body = text_of(response)
    secret = re.search(r"<pre class=\"secret\" data-secret>(ql_[^<]+)</pre>", body).group(1)
    assert "Key thumbnailer created. Copy its secret now: it will not be shown again." in flashes(response)
    assert client.post("/jobs/claim", headers=bearer(secret), json={}).status_code == 204
    assert secret not in text_of(signed_in.get("/admin/keys"))
    assert "resize-image" in key_row(text_of(signed_in.get("/admin/keys")), "thumbnailer")


def test_a_producer_key_gets_the_chosen_ceiling(signed_in):
    create(signed_in, name="storefront", role="producer", max_priority="critical")
    assert key_row(text_of(signed_in.get("/admin/keys")), "storefront").startswith("storefront producer critical")


def test_a_bad_key_name_is_a_readable_400(signed_in):
    response = create(signed_in, name="has spaces")
    assert response.status_code == 400
    assert "use letters, digits, &#39;.&#39;, &#39;_&#39; or &#39;-&#39;" in text_of(response)
    assert 'data-key="has spaces"' not in text_of(response)


def test_a_duplicate_key_name_is_refused_with_a_message(signed_in, make_key):
    make_key("worker", "mailer")
    response = create(signed_in, name="mailer")
    assert response.status_code == 409
    assert "a key named &#39;mailer&#39; already exists" in text_of(response)
    assert "data-secret" not in text_of(response)


def test_creating_a_key_without_a_csrf_token_creates_nothing(signed_in):
    response = signed_in.post("/admin/keys", data={"name": "sneaky", "role": "admin"})
    assert response.status_code == 400
    assert 'data-key="sneaky"' not in text_of(signed_in.get("/admin/keys"))


def test_revoking_a_key_refuses_its_next_request(signed_in, client, make_key):
    secret = make_key("admin", "ops")
    assert client.get("/jobs", headers=bearer(secret)).status_code == 200
    response = post_form(signed_in, "/admin/keys/ops/revoke", {"confirmed": "yes"}, page="/admin/keys")
    assert response.status_code == 302 and response.headers["Location"] == "/admin/keys"
    assert client.get("/jobs", headers=bearer(secret)).status_code == 401
    page = signed_in.get("/admin/keys")
    assert flashes(page) == ["Key ops is revoked; its next request will be refused."]
    assert "revoked" in key_row(text_of(page), "ops")


def test_revoking_an_unknown_or_revoked_key_says_so(signed_in):
    for confirmed in ({}, {"confirmed": "yes"}):
        post_form(signed_in, "/admin/keys/ghost/revoke", confirmed, page="/admin/keys")
        assert flashes(signed_in.get("/admin/keys")) == ["There is no active key named ghost; nothing was revoked."]


def test_revoking_a_key_asks_first_on_a_page_naming_the_key(signed_in, client, make_key):
    secret = make_key("admin", "ops")
    response = post_form(signed_in, "/admin/keys/ops/revoke", page="/admin/keys")
    assert response.status_code == 200
    body = text_of(response)
    assert '<h1 id="confirm-title">Revoke key ops?</h1>' in body
    assert 'action="/admin/keys/ops/revoke"' in body and 'name="confirmed" value="yes"' in body
    assert 'href="/admin/keys"' in body  # the way back changes nothing
    assert client.get("/jobs", headers=bearer(secret)).status_code == 200  # not revoked yet
    assert "active" in key_row(text_of(signed_in.get("/admin/keys")), "ops")


def test_the_keys_page_asks_with_the_script_and_the_server_asks_without_it(signed_in, make_key):
    make_key("admin", "ops")
    form = re.search(r'<form[^>]*action="/admin/keys/ops/revoke"[^>]*>', text_of(signed_in.get("/admin/keys"))).group(0)
    assert 'data-confirm="Revoke key ops?' in form and "data-confirm-step" in form


def test_revoking_without_a_csrf_token_changes_nothing(signed_in, client, make_key):
    secret = make_key("admin", "ops")
    assert signed_in.post("/admin/keys/ops/revoke").status_code == 400
    assert client.get("/jobs", headers=bearer(secret)).status_code == 200
