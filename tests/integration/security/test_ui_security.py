"""The pages are safe to expose: attacker text stays text, no inline script, strict headers."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from tests.support.ui import post_form, text_of

# Each request runs in its own app context, as on a server (tests/support/ui.py).
pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")

SCRIPT = "<script>alert('xss')</script>"


@pytest.fixture
def hostile_job(make_job):
    """A failed job whose every attacker-controlled field carries markup."""
    job = make_job(
        status="failed",
        type=f"t{SCRIPT}",
        payload={"name": SCRIPT, SCRIPT: 1},
        result=f'{{"out": "{SCRIPT}"}}',
        error=f"quarantined: {SCRIPT}",
        worker_id=f"w{SCRIPT}",
        idempotency_key=f"k{SCRIPT}",
        producer=f"p{SCRIPT}",
    )
    return job


def assert_inert(body: str) -> None:
    assert "<script>alert" not in body
    assert "&lt;script&gt;alert(&#39;xss&#39;)&lt;/script&gt;" in body


def test_v_xss_a_script_payload_enqueued_through_the_api_renders_as_text(signed_in, enqueue):
    job = enqueue(type="email", payload={"subject": SCRIPT})
    assert_inert(text_of(signed_in.get(f"/admin/jobs/{job['id']}")))


def test_v_xss_job_fields_render_as_text_on_every_page(signed_in, hostile_job):
    for page in (
        "/admin",
        "/admin/jobs",
        f"/admin/jobs/{hostile_job}",
        "/admin/workers",
        "/admin/jobs?status=failed&partial=1",
        "/admin?partial=1",
    ):
        response = signed_in.get(page)
        assert response.status_code == 200, page
        assert_inert(text_of(response))


def test_v_xss_search_and_filter_values_are_echoed_as_text(signed_in):
    body = text_of(signed_in.get(f"/admin/jobs?q={SCRIPT}&type={SCRIPT}&worker={SCRIPT}"))
    assert_inert(body)


def test_v_xss_the_login_form_echoes_the_username_as_text(client, admin_user):
    body = text_of(post_form(client, "/admin/login", {"username": SCRIPT, "password": "wrong password"}))
    assert_inert(body)


class _InlineCode(HTMLParser):
    """Collects everything a CSP without 'unsafe-inline' would block."""

    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        names = dict(attrs)
        if tag == "script" and not names.get("src"):
            self.found.append("inline <script>")
        for name, value in attrs:
            if name.startswith("on") or name == "style":
                self.found.append(f"{tag}[{name}]")
            if value and value.strip().lower().startswith("javascript:"):
                self.found.append(f"{tag}[{name}=javascript:]")
        if tag == "style":
            self.found.append("<style> element")


PAGES = ["/admin", "/admin/jobs", "/admin/jobs/{id}", "/admin/workers", "/admin/keys", "/admin/jobs/999999"]


def test_pages_carry_no_inline_script_or_style(signed_in, hostile_job, make_key):
    make_key("worker", "mailer-1")
    for page in PAGES:
        parser = _InlineCode()
        parser.feed(text_of(signed_in.get(page.format(id=hostile_job))))
        assert parser.found == [], page


def test_the_login_page_carries_no_inline_script_or_style(client):
    parser = _InlineCode()
    parser.feed(text_of(client.get("/admin/login")))
    assert parser.found == []


def test_pages_send_the_security_headers(signed_in):
    for path in ("/admin/login", "/admin", "/admin/jobs", "/admin/keys", "/admin/workers", "/admin/no-such-page"):
        headers = signed_in.get(path).headers
        csp = headers["Content-Security-Policy"]
        assert "default-src 'self'" in csp and "script-src 'self'" in csp, path
        assert "frame-ancestors 'none'" in csp and "object-src 'none'" in csp, path
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp, path
        assert headers["X-Content-Type-Options"] == "nosniff", path
        assert headers["X-Frame-Options"] == "DENY", path
        assert headers["Referrer-Policy"] == "same-origin", path
        assert headers["Cache-Control"] == "no-store", path


def test_the_sign_in_redirect_carries_the_headers_too(client):
    headers = client.get("/admin").headers
    assert headers["X-Frame-Options"] == "DENY" and "Content-Security-Policy" in headers


def test_assets_are_served_locally_with_nosniff(client):
    for asset in ("/static/queuelog.css", "/static/queuelog.js", "/static/favicon.svg"):
        response = client.get(asset)
        assert response.status_code == 200, asset
        assert response.headers["X-Content-Type-Options"] == "nosniff", asset
        response.close()


def test_pages_load_nothing_from_other_sites(signed_in, hostile_job):
    for page in ("/admin", "/admin/jobs", f"/admin/jobs/{hostile_job}", "/admin/keys", "/admin/workers"):
        body = text_of(signed_in.get(page))
        assert 'src="http' not in body and 'href="http' not in body and "//cdn" not in body


def test_the_json_api_is_left_to_its_own_headers(client, admin):
    response = client.get("/jobs", headers=admin)
    assert response.status_code == 200
    assert "Content-Security-Policy" not in response.headers
