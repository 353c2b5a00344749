"""No dead controls: with JavaScript off every control a page shows does something, and the one control
that needs the script (pausing the auto-refresh) shows only when the script is there to run it."""

from __future__ import annotations

import re

import pytest

from tests.support.every_state import fresh_database_url, serving_every_state
from tests.support.live_site import ADMIN_NAME, ADMIN_PASSWORD, sign_in

# the pages' markup is the same on every database (their queries are the test_ui_* modules' subject)
# scripts/test runs this module in the SQLite pass only.
pytestmark = pytest.mark.database_independent

PAGES = [
    "/admin",
    "/admin?range=7d",
    "/admin/jobs",
    "/admin/jobs?status=failed",
    "/admin/scheduled",
    "/admin/workers",
    "/admin/keys",
    "/admin/types",
    "/admin/types/email",
    "/admin/types/report",
    "/admin/errors",
    "/admin/schedules",
    "/admin/schedules/nightly-report",
    "job:from-schedule",
    "job:pending",
    "job:running",
    "job:stalled",
    "job:backing-off",
    "job:not-retryable",
    "job:completed",
    "/admin/jobs/999999999",
]

# What each visible control is: a link with somewhere to go, or a button that submits a form to an address.
CONTROLS = """() => Array.from(document.querySelectorAll('a, button, input, select, textarea, summary'))
  .filter(el => el.getClientRects().length > 0 && getComputedStyle(el).visibility !== 'hidden')
  .map(el => ({
    tag: el.tagName, label: (el.textContent || el.name || '').trim().slice(0, 40),
    href: el.getAttribute('href'), type: el.type || null,
    form_action: el.form ? el.form.getAttribute('action') : null,
    form_method: el.form ? el.form.method : null,
  }))"""


@pytest.fixture(scope="module")
def every_state(request, tmp_path_factory):
    """Refreshing every second, so that the one test with the script on sees refreshes (and their pause)."""
    with serving_every_state(fresh_database_url(request, tmp_path_factory), refresh_seconds=1) as served:
        yield served


@pytest.fixture
def no_script_tab(browser, every_state):
    """A tab with JavaScript off, signed in as the admin."""
    context = browser.new_context(java_script_enabled=False, viewport={"width": 1366, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(15_000)
    tab.goto(every_state.url + "/admin/login")
    tab.fill("#username", ADMIN_NAME)
    tab.fill("#password", ADMIN_PASSWORD)
    tab.click("button:has-text('Sign in')")
    tab.wait_for_url(every_state.url + "/admin")
    yield tab
    context.close()


def _path(every_state, target: str) -> str:
    return f"/admin/jobs/{every_state.jobs[target.removeprefix('job:')]}" if target.startswith("job:") else target


def dead(control: dict) -> bool:
    """A control that cannot do anything without a script."""
    if control["tag"] == "A":
        return not control["href"] or control["href"] == "#" or control["href"].startswith("javascript:")
    if control["tag"] == "BUTTON":
        return control["type"] != "submit" or not control["form_action"]
    return control["form_action"] is None  # a field that belongs to no form sends nowhere


@pytest.mark.parametrize("target", PAGES)
def test_every_control_shown_without_javascript_does_something(every_state, no_script_tab, target):
    no_script_tab.goto(every_state.url + _path(every_state, target))
    controls = no_script_tab.evaluate(CONTROLS)
    assert len(controls) >= 3  # the error page has the fewest: skip link, brand, back to the dashboard
    assert [control for control in controls if dead(control)] == []


@pytest.mark.parametrize("target", ["/admin", "/admin/jobs", "/admin/workers", "job:running"])
def test_the_pause_button_is_not_shown_without_javascript(every_state, no_script_tab, target):
    no_script_tab.goto(every_state.url + _path(every_state, target))
    assert no_script_tab.locator("[data-refresh-toggle]").count() == 1
    assert not no_script_tab.locator("[data-refresh-toggle]").is_visible()
    assert no_script_tab.locator("[data-refresh-bar] a:has-text('Reload')").is_visible()


def test_the_controls_a_script_would_add_confirm_to_still_act_without_it(every_state, no_script_tab):
    no_script_tab.goto(every_state.url + _path(every_state, "job:scheduled"))
    no_script_tab.click("button:has-text('Cancel')")  # asks first with the script; acts at once without
    assert "is cancelled" in no_script_tab.locator(".flashes").inner_text()
    assert no_script_tab.locator(".job-summary .badge").first.inner_text() == "cancelled"


def test_a_type_is_paused_limited_and_resumed_without_javascript(every_state, no_script_tab):
    no_script_tab.goto(every_state.url + "/admin/types")
    no_script_tab.click("tr[data-type=noop] button:has-text('Pause')")
    assert no_script_tab.locator("tr[data-type=noop] [data-field=state]").inner_text() == "paused"
    no_script_tab.click("tr[data-type=noop] a:has-text('Limits and history')")
    no_script_tab.fill("#concurrency_limit", "4")
    no_script_tab.click("button:has-text('Save limits')")
    assert no_script_tab.locator("[data-field=concurrency_limit]").inner_text() == "4"
    no_script_tab.click("button:has-text('Resume')")
    assert "Resumed noop" in no_script_tab.locator(".flashes").inner_text()
    assert no_script_tab.locator("tr[data-change]").count() >= 3


def test_with_javascript_the_pause_button_shows_and_stops_the_refresh(page, every_state):
    sign_in(page, every_state)
    refreshes = []
    page.on("request", lambda request: refreshes.append(request.url) if "partial=1" in request.url else None)
    toggle = page.locator("[data-refresh-toggle]")
    assert toggle.is_visible() and toggle.inner_text() == "Pause auto-refresh"
    page.wait_for_timeout(2_500)
    assert refreshes, "the page refreshes itself while not paused"
    toggle.click()
    assert toggle.inner_text() == "Resume auto-refresh" and toggle.get_attribute("aria-pressed") == "true"
    assert page.locator("[data-refresh-status]").inner_text() == "Auto-refresh paused"
    page.wait_for_timeout(500)  # a refresh already under way may still land
    paused_at = len(refreshes)
    page.wait_for_timeout(3_000)
    assert len(refreshes) == paused_at, "no refresh while paused"
    toggle.click()
    assert re.match(r"Auto-refresh every 1 s", page.locator("[data-refresh-status]").inner_text())
    assert page.problems == []


def test_a_bulk_cancel_asks_on_a_page_naming_the_count_without_javascript(every_state, no_script_tab):
    no_script_tab.goto(every_state.url + "/admin/jobs?status=pending")
    no_script_tab.check(f"input[name=job_id][value='{every_state.jobs['pending']}']")
    no_script_tab.click("button:has-text('Cancel selected')")
    assert no_script_tab.locator("h1").inner_text() == "Cancel 1 job?"
    no_script_tab.click("button:has-text('Cancel 1 job')")
    assert "Cancelled 1 job." in no_script_tab.locator(".flashes").inner_text()


def test_revoking_a_key_asks_on_a_page_naming_it_without_javascript(every_state, no_script_tab):
    no_script_tab.goto(every_state.url + "/admin/keys")
    no_script_tab.click("tr[data-key=ops-cli] button:has-text('Revoke')")
    assert no_script_tab.locator("h1").inner_text() == "Revoke key ops-cli?"
    no_script_tab.click("button:has-text('Revoke ops-cli')")
    assert "ops-cli is revoked" in no_script_tab.locator(".flashes").inner_text()


def test_stopping_a_worker_process_asks_on_a_page_naming_it_without_javascript(every_state, no_script_tab):
    no_script_tab.goto(every_state.url + "/admin/workers")
    no_script_tab.click("button[aria-label='Stop mail-box-1:3141']")
    assert no_script_tab.locator("h1").inner_text() == "Stop worker process mail-box-1:3141?"
    no_script_tab.click("button:has-text('Stop mail-box-1:3141')")
    assert "Told worker process mail-box-1:3141 to stop" in no_script_tab.locator(".flashes").inner_text()


def test_with_javascript_quiet_asks_by_confirm_and_marks_the_process_quiet(page, every_state):
    sign_in(page, every_state)
    page.goto(every_state.url + "/admin/workers")
    questions = []
    page.once("dialog", lambda dialog: (questions.append(dialog.message), dialog.accept()))
    page.click("button[aria-label='Quiet mail-box-3:1414']")
    page.wait_for_url(every_state.url + "/admin/workers")
    assert questions == [
        "Quiet worker process mail-box-3:1414? It will claim no new jobs and finish the ones it holds."
    ]
    assert "Told worker process mail-box-3:1414 to quiet" in page.locator(".flashes").inner_text()
    row = page.locator("tr", has=page.locator("text=mail-box-3:1414"))
    assert row.locator(".badge").inner_text() == "quiet" and row.locator("button:has-text('Quiet')").count() == 0
    assert page.problems == []
