"""The admin pages in a real browser against a real server: what an operator does at night."""

from __future__ import annotations

import re

from tests.support.live_site import ADMIN_NAME, api, fail_a_job, sign_in


def test_an_admin_finds_a_failed_job_on_the_dashboard_reads_why_and_retries_it(
    page, admin_made_by_cli, live_server, make_key
):
    producer, worker = make_key("producer", "storefront"), make_key("worker", "mailer-1")
    error = "SMTPRecipientsRefused: 550 <b>mailbox</b> unavailable"
    job_id = fail_a_job(live_server, producer, worker, error)

    sign_in(page, live_server)
    assert page.locator("[data-count=failed] .tile-value").inner_text() == "1"
    failures = page.locator("section[aria-labelledby=failures-title]")
    assert error in failures.inner_text()
    failures.locator(f"a.job-link:has-text('#{job_id}')").click()

    page.wait_for_url(f"{live_server.url}/admin/jobs/{job_id}")
    assert page.locator("pre.error-text").inner_text() == error
    assert page.locator(".job-summary .badge").first.inner_text() == "failed"
    page.click("button:has-text('Retry')")

    page.wait_for_url(f"{live_server.url}/admin/jobs/{job_id}")
    assert "back in the queue" in page.locator(".flashes").inner_text()
    assert page.locator(".job-summary .badge").first.inner_text() == "pending"
    assert f"admin:{ADMIN_NAME}" in page.locator("table.events").inner_text()
    status, job = api(live_server, "GET", f"/jobs/{job_id}", producer)
    assert status == 200 and job["status"] == "pending"
    assert page.problems == []


def test_an_admin_creates_a_key_sees_its_secret_once_and_revokes_it(page, live_server):
    sign_in(page, live_server)
    page.click("nav >> text=API keys")
    page.fill("#name", "night-worker")
    page.select_option("#role", "worker")
    page.fill("#types", "email, report")
    page.click("button:has-text('Create key')")

    secret = page.locator("pre.secret").inner_text().strip()
    assert secret.startswith("ql_")
    assert api(live_server, "POST", "/jobs/claim", secret, {})[0] == 204  # the new key works
    row = page.locator("tr[data-key=night-worker]")
    assert "email, report" in row.inner_text() and secret[:9] in row.inner_text()

    page.goto(live_server.url + "/admin/keys")
    assert secret not in page.content()  # shown once only
    questions = []
    page.once("dialog", lambda dialog: (questions.append(dialog.message), dialog.accept()))
    page.locator("tr[data-key=night-worker] button:has-text('Revoke')").click()
    page.wait_for_url(live_server.url + "/admin/keys")
    assert questions == ["Revoke key night-worker? Its next request will be refused, and this cannot be undone."]
    assert "night-worker is revoked" in page.locator(".flashes").inner_text()
    assert "revoked" in page.locator("tr[data-key=night-worker]").inner_text()
    assert api(live_server, "POST", "/jobs/claim", secret, {})[0] == 401
    assert page.problems == []


def test_the_jobs_table_refreshes_by_itself_and_keeps_the_filters(page, live_server, make_key):
    producer, worker = make_key("producer", "storefront"), make_key("worker", "mailer-1")
    first = fail_a_job(live_server, producer, worker, "first failure")
    sign_in(page, live_server)
    page.goto(live_server.url + "/admin/jobs?status=failed&type=email")
    filtered_url = page.url
    assert page.locator("table.jobs a.job-link").all_inner_texts() == [f"#{first}"]

    second = fail_a_job(live_server, producer, worker, "second failure")
    api(live_server, "POST", "/jobs", producer, {"type": "report", "payload": {}})  # not failed: stays out
    page.wait_for_selector(f"table.jobs a.job-link:has-text('#{second}')", timeout=8_000)
    assert page.locator("table.jobs a.job-link").all_inner_texts() == [f"#{second}", f"#{first}"]
    assert page.url == filtered_url
    assert page.locator("#status").input_value() == "failed"
    assert page.locator("#type").input_value() == "email"
    assert re.match(r"Updated \d\d:\d\d:\d\d UTC", page.locator("[data-refresh-status]").inner_text())
    assert page.problems == []  # the script runs under the CSP without a single violation


def test_everything_works_with_javascript_off(browser, live_server, make_key):
    producer, worker = make_key("producer", "storefront"), make_key("worker", "mailer-1")
    job_id = fail_a_job(live_server, producer, worker, "timeout")
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        page.set_default_timeout(10_000)
        sign_in(page, live_server)
        page.goto(live_server.url + "/admin/jobs?status=failed")
        page.check(f"input[name=job_id][value='{job_id}']")
        page.click("button[value=selected]")
        page.wait_for_url(live_server.url + "/admin/jobs?status=failed")
        assert "Retried 1 job." in page.locator(".flashes").inner_text()
        assert api(live_server, "GET", f"/jobs/{job_id}", producer)[1]["status"] == "pending"

        page.click("button:has-text('Sign out')")
        page.wait_for_url(live_server.url + "/admin/login")
        page.goto(live_server.url + "/admin")
        assert page.url.startswith(live_server.url + "/admin/login")
    finally:
        context.close()
