"""In a real browser: an admin issues a producer key with quotas on the keys page, and a bad value is explained."""

from __future__ import annotations

from tests.support.live_site import api, sign_in


def test_an_admin_creates_a_producer_key_with_quotas_and_the_server_holds_it_to_them(page, live_server):
    sign_in(page, live_server)
    page.click("nav >> text=API keys")
    page.fill("#name", "billing")
    page.select_option("#role", "producer")
    page.fill("#enqueue_rate", "5/60")
    page.fill("#max_pending", "3")
    page.click("button:has-text('Create key')")

    secret = page.locator("pre.secret").inner_text().strip()
    assert page.locator("tr[data-key=billing] td[data-quotas]").inner_text() == "5 jobs per 60 s, 3 pending"
    answers = [api(live_server, "POST", "/jobs", secret, {"type": "email"}) for _ in range(4)]
    assert [status for status, _ in answers] == [201, 201, 201, 429]
    assert answers[-1][1]["type"] == "https://queuelog.dev/problems/max-pending-reached"
    assert page.problems == []


def test_a_bad_quota_is_shown_on_its_field_and_what_was_typed_stays(page, live_server):
    sign_in(page, live_server)
    page.goto(live_server.url + "/admin/keys")
    page.fill("#name", "billing")
    page.select_option("#role", "producer")
    page.fill("#enqueue_rate", "100 per minute")
    page.fill("#max_pending", "1000")
    page.click("button:has-text('Create key')")

    rate_field = page.locator("label", has=page.locator("#enqueue_rate"))
    assert (
        "write it as N/S (at most N jobs in any S seconds), e.g. 100/60, not '100 per minute'"
        in rate_field.locator(".field-error").inner_text()
    )
    assert page.get_attribute("#enqueue_rate", "aria-invalid") == "true"
    assert page.input_value("#max_pending") == "1000"
    assert page.locator("pre.secret").count() == 0 and page.locator("tr[data-key=billing]").count() == 0

    page.fill("#enqueue_rate", "100/60")
    page.click("button:has-text('Create key')")
    assert page.locator("tr[data-key=billing] td[data-quotas]").inner_text() == "100 jobs per 60 s, 1000 pending"
    # The refused form is answered 400, which Chromium reports on the console; nothing else may be there.
    assert [problem for problem in page.problems if "status of 400" not in problem] == []
