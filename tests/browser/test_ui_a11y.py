"""Every admin page is usable by anyone: axe-core finds nothing on it, in light and dark, and a keyboard
user can skip to the content and always sees where the focus is.

axe-core (tests/clients/package.json, installed by scripts/test with ``npm ci``) runs its default rules
(WCAG 2.x A and AA, and best practices) in Chromium on every page, with a job in every state on the
pages, for both colour schemes the stylesheet has.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.support.axe import AXE_SCRIPT, assert_no_violations
from tests.support.every_state import VIEWER_NAME, VIEWER_PASSWORD, fresh_database_url, serving_every_state
from tests.support.live_site import ADMIN_NAME, ADMIN_PASSWORD

# the pages' markup and styles are the same on every database (their queries are the test_ui_* modules' subject)
# scripts/test runs this module in the SQLite pass only.
pytestmark = pytest.mark.database_independent

SCHEMES = ["light", "dark"]
JOB_STATES = [
    "pending",
    "scheduled",
    "backing-off",
    "running",
    "stalled",
    "completed",
    "not-retryable",
    "retries-spent",
    "timed-out",
    "quarantined",
    "requeued",
    "cancelled",
    "waiting",
]
PAGES = {
    "dashboard": "/admin",
    "dashboard, chart of 24 hours": "/admin?range=24h",
    "dashboard, chart of 7 days": "/admin?range=7d",
    "jobs": "/admin/jobs",
    "waiting jobs": "/admin/jobs?status=waiting",
    "failed jobs": "/admin/jobs?status=failed",
    "jobs searched by error and payload": "/admin/jobs?error=smtp&path=to&value=%22x%40example.org%22",
    "jobs with a bad payload path": "/admin/jobs?path=a..b&value=1",
    "top errors": "/admin/errors",
    "scheduled": "/admin/scheduled",
    "workers": "/admin/workers",
    "API keys": "/admin/keys",
    "types": "/admin/types",
    "type with limits and history": "/admin/types/email",
    "paused type": "/admin/types/report",
    "schedules": "/admin/schedules",
    "one schedule": "/admin/schedules/nightly-report",
    "job from a schedule": "job:from-schedule",
    "missing job (error page)": "/admin/jobs/999999999",
    **{f"job {state}": f"job:{state}" for state in JOB_STATES},
}


@pytest.fixture(scope="module")
def every_state(request, tmp_path_factory):
    with serving_every_state(fresh_database_url(request, tmp_path_factory)) as served:
        yield served


def _signed_in_state(browser, url: str, username: str, password: str) -> dict:
    context = browser.new_context()
    try:
        tab = context.new_page()
        tab.goto(url + "/admin/login")
        tab.fill("#username", username)
        tab.fill("#password", password)
        tab.click("button:has-text('Sign in')")
        tab.wait_for_url(url + "/admin")
        return context.storage_state()
    finally:
        context.close()


@pytest.fixture(scope="module")
def admin_state(browser, every_state):
    """The cookies of a signed-in admin, for new browser contexts."""
    return _signed_in_state(browser, every_state.url, ADMIN_NAME, ADMIN_PASSWORD)


@pytest.fixture(scope="module")
def viewer_state(browser, every_state):
    """The cookies of a signed-in viewer, for new browser contexts."""
    return _signed_in_state(browser, every_state.url, VIEWER_NAME, VIEWER_PASSWORD)


@pytest.fixture
def open_tab(browser):
    """open_tab(scheme, storage_state=None) → a tab in that colour scheme, with axe-core loaded on every page."""
    assert AXE_SCRIPT.exists(), f"{AXE_SCRIPT} is missing: run `npm ci` in tests/clients (scripts/test does)"
    contexts = []

    def _open(scheme: str, storage_state: dict | None = None):
        context = browser.new_context(
            viewport={"width": 1366, "height": 900}, color_scheme=scheme, storage_state=storage_state
        )
        # An init script is not page content, so the pages' Content-Security-Policy lets it run.
        context.add_init_script(path=str(AXE_SCRIPT))
        contexts.append(context)
        tab = context.new_page()
        tab.set_default_timeout(15_000)
        return tab

    yield _open
    for context in contexts:
        context.close()


def _path(every_state, target: str) -> str:
    if target.startswith("job:"):
        return f"/admin/jobs/{every_state.jobs[target.removeprefix('job:')]}"
    return target


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("name", list(PAGES))
def test_axe_finds_nothing_on_the_page(every_state, admin_state, open_tab, name, scheme):
    tab = open_tab(scheme, admin_state)
    tab.goto(every_state.url + _path(every_state, PAGES[name]))
    assert_no_violations(tab, f"{name}, {scheme}")


# After a click that posts a form, expect(...) waits for the next page: is_visible() asks once, and could ask
# the page the click is leaving.
@pytest.mark.parametrize("scheme", SCHEMES)
def test_axe_finds_nothing_on_the_sign_in_page_and_its_error(every_state, open_tab, scheme):
    tab = open_tab(scheme)
    tab.goto(every_state.url + "/admin/login")
    assert_no_violations(tab, f"the sign-in page, {scheme}")
    tab.fill("#username", ADMIN_NAME)
    tab.fill("#password", "not the password at all")
    tab.click("button:has-text('Sign in')")
    expect(tab.locator(".flash-error")).to_be_visible()
    assert_no_violations(tab, f"the sign-in page after a wrong password, {scheme}")


@pytest.mark.parametrize("scheme", SCHEMES)
def test_axe_finds_nothing_on_the_messages_an_action_leaves(every_state, admin_state, open_tab, scheme):
    tab = open_tab(scheme, admin_state)
    tab.goto(every_state.url + "/admin/keys")
    tab.fill("#name", f"a11y-{scheme}")
    tab.click("button:has-text('Create key')")
    expect(tab.locator(".flash-success")).to_be_visible()
    expect(tab.locator("pre.secret")).to_be_visible()
    assert_no_violations(tab, f"a new key's secret, {scheme}")
    tab.fill("#name", "not a valid name!")
    tab.click("button:has-text('Create key')")
    expect(tab.locator(".field-error")).to_be_visible()
    assert_no_violations(tab, f"a refused key form, {scheme}")


@pytest.mark.parametrize("scheme", SCHEMES)
def test_axe_finds_nothing_on_the_confirmation_pages(every_state, admin_state, open_tab, scheme):
    # Asked, never confirmed: the module's jobs and keys stay as they are for the other tests.
    tab = open_tab(scheme, admin_state)
    tab.goto(every_state.url + "/admin/errors")
    tab.locator("button:has-text('Retry all in this group')").first.click()
    assert tab.locator("h1").inner_text().startswith("Retry ")
    assert_no_violations(tab, f"the confirmation of a group's retry, {scheme}")
    tab.goto(every_state.url + "/admin/jobs")
    tab.click("button:has-text('Delete all matching')")
    assert tab.locator("h1").inner_text().startswith("Delete ")
    assert_no_violations(tab, f"the confirmation of a bulk delete, {scheme}")


@pytest.mark.parametrize("scheme", SCHEMES)
def test_axe_finds_nothing_on_a_refused_limits_form_and_a_types_message(every_state, admin_state, open_tab, scheme):
    tab = open_tab(scheme, admin_state)
    tab.goto(every_state.url + "/admin/types/noop")
    tab.fill("#rate_jobs", "20")
    tab.fill("#rate_seconds", "0")
    tab.click("button:has-text('Save limits')")
    expect(tab.locator(".field-error")).to_be_visible()
    assert_no_violations(tab, f"a refused limits form, {scheme}")
    tab.fill("#rate_seconds", "2")
    tab.click("button:has-text('Save limits')")
    expect(tab.locator(".flash-success")).to_be_visible()
    assert tab.locator("tr[data-change]").count() >= 1
    assert_no_violations(tab, f"a type's page after saving its limits, {scheme}")


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize(
    "name",
    ["dashboard", "jobs", "job not-retryable", "API keys", "types", "type with limits and history", "top errors"],
)
def test_axe_finds_nothing_on_a_viewers_page(every_state, viewer_state, open_tab, name, scheme):
    tab = open_tab(scheme, viewer_state)
    tab.goto(every_state.url + _path(every_state, PAGES[name]))
    assert_no_violations(tab, f"{name} as a viewer, {scheme}")


@pytest.mark.parametrize("name", ["dashboard", "jobs", "job not-retryable", "API keys", "missing job (error page)"])
def test_the_first_tab_reaches_a_skip_link_that_moves_to_the_content(every_state, admin_state, open_tab, name):
    tab = open_tab("dark", admin_state)
    tab.goto(every_state.url + _path(every_state, PAGES[name]))
    tab.keyboard.press("Tab")
    focused = tab.evaluate(
        "() => ({text: document.activeElement.textContent.trim(), href: document.activeElement.getAttribute('href')})"
    )
    assert focused == {"text": "Skip to content", "href": "#content"}
    assert tab.locator("a[href='#content']").is_visible()  # hidden until focused, then shown
    tab.keyboard.press("Enter")
    assert tab.evaluate("() => document.activeElement.id") == "content"
    tab.keyboard.press("Tab")
    inside = tab.evaluate("() => document.getElementById('content').contains(document.activeElement)")
    assert inside, "the next Tab after skipping goes past the header, into the content"


FOCUS_RING = """() => {
  const el = document.activeElement;
  const style = getComputedStyle(el);
  const outline = style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) >= 2;
  const ring = style.boxShadow && style.boxShadow !== 'none';
  return {tag: el.tagName, text: (el.textContent || el.value || el.name || '').trim().slice(0, 40),
          shown: outline || Boolean(ring)};
}"""


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize(
    "name",
    [
        "dashboard",
        "jobs",
        "job quarantined",
        "API keys",
        "workers",
        "types",
        "type with limits and history",
        "top errors",
    ],
)
def test_every_control_tab_reaches_shows_a_focus_ring(every_state, admin_state, open_tab, name, scheme):
    tab = open_tab(scheme, admin_state)
    tab.goto(every_state.url + _path(every_state, PAGES[name]))
    seen, unmarked = 0, []
    for _ in range(80):
        tab.keyboard.press("Tab")
        if tab.evaluate("() => document.activeElement === document.body"):
            break
        focus = tab.evaluate(FOCUS_RING)
        seen += 1
        if not focus["shown"]:
            unmarked.append(f"{focus['tag']} {focus['text']!r}")
    assert seen > 3
    assert unmarked == [], f"focused without a visible ring on {name} ({scheme}): {unmarked}"
