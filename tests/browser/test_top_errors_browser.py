"""The Top errors page in a real browser: from a group of failures to all of them back in the queue."""

from __future__ import annotations

from tests.support.live_site import api, fail_a_job, sign_in


def test_an_admin_retries_every_job_of_an_error_group_after_confirming_the_count(page, live_server, make_key):
    producer, worker = make_key("producer", "storefront"), make_key("worker", "mailer-1")
    timeouts = [
        fail_a_job(live_server, producer, worker, f"Timeout after {seconds}s talking to {host}")
        for seconds, host in ((30, "10.0.0.7"), (12, "10.0.0.9"))
    ]
    other = fail_a_job(live_server, producer, worker, "SMTPRecipientsRefused: 550 mailbox unavailable")

    sign_in(page, live_server)
    page.click("nav >> text=Top errors")
    page.wait_for_url(live_server.url + "/admin/errors")
    group = page.locator("tr[data-group='Timeout after <n>s talking to <ip>']")
    assert group.locator("td.n-failed").inner_text() == "2"
    assert "email" in group.inner_text()
    group.locator("button:has-text('Retry all in this group')").click()

    assert page.locator("h1").inner_text() == "Retry 2 jobs?"
    for job_id in timeouts:
        assert api(live_server, "GET", f"/jobs/{job_id}", producer)[1]["status"] == "failed"  # asked, not yet done
    page.click("button:has-text('Retry 2 jobs')")

    assert "Retried 2 matching jobs." in page.locator(".flashes").inner_text()
    for job_id in timeouts:
        assert api(live_server, "GET", f"/jobs/{job_id}", producer)[1]["status"] == "pending"
    assert api(live_server, "GET", f"/jobs/{other}", producer)[1]["status"] == "failed"
    page.click("nav >> text=Top errors")
    assert page.locator("tr[data-group='Timeout after <n>s talking to <ip>']").count() == 0
    assert page.locator("tr[data-group]").count() == 1
    assert page.problems == []
