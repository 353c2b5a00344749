"""Issue #36 in a real browser against a real gunicorn: an admin sets a type's push target on its page, sees its
signing secret once, and finds the target on the Types list; the secret is gone on the next visit. axe-core
finds nothing on the page with the form and the secret."""

from __future__ import annotations

from tests.support.axe import AXE_SCRIPT, assert_no_violations
from tests.support.live_site import sign_in

HOOK = "https://example.com/hook"  # public; this machine resolves no names, and an unresolved one is accepted


def test_setting_a_push_target_on_the_page_shows_its_secret_once_and_lists_it(page, live_server):
    page.context.add_init_script(path=str(AXE_SCRIPT))
    sign_in(page, live_server)
    page.click("nav >> text=Types")
    assert page.locator("td[data-push=email]").inner_text() == "none: workers claim"

    page.click("tr[data-type=email] a:has-text('Limits and history')")
    page.fill("#url", HOOK)
    page.select_option("#mode", "async")
    page.fill("#timeout_seconds", "10")
    page.click("button:has-text('Save push target')")
    secret = page.locator("[data-secret]").inner_text().strip()
    assert secret.startswith("whsec_")
    assert page.locator("dd[data-push-field=url]").inner_text() == HOOK
    assert_no_violations(page, "a type's page answering a first push target, with its secret")

    page.click("nav >> text=Types")
    page.wait_for_url(live_server.url + "/admin/types")
    assert page.locator("td[data-push=email] [data-push-field=url]").inner_text() == HOOK
    assert page.locator("td[data-push=email] [data-push-field=how]").inner_text() == "async · 10 s"
    assert page.locator("td[data-push=email] [data-push-field=last]").inner_text() == "last: no delivery yet"
    assert secret not in page.content()

    page.click("tr[data-type=email] a:has-text('Limits and history')")
    assert page.locator("[data-secret]").count() == 0
    assert secret not in page.content()
    assert page.problems == []
