"""In Chromium, against gunicorn: a job's page says where the job stands and leads to the page that acts on it,
and the dashboard's oldest-pending tile reads what /metrics reports from the same server."""

from __future__ import annotations

import urllib.request
from datetime import timedelta

from prometheus_client.parser import text_string_to_metric_families

from queuelog.core.clock import utcnow
from tests.support.live_site import sign_in
from tests.support.ui import seconds_of


def test_a_stalled_jobs_page_leads_to_reap_now_on_the_dashboard(live_server, page, make_job):
    job = make_job(status="running", worker_id="mailer-9", lease_expires_at=utcnow() - timedelta(minutes=2))
    sign_in(page, live_server)

    page.goto(f"{live_server.url}/admin/jobs/{job}")
    line = page.locator('[data-standing="stalled"]')
    assert line.is_visible() and "mailer-9 stopped heartbeating" in line.inner_text()
    line.get_by_role("link", name="Reap now").click()

    page.wait_for_url(f"{live_server.url}/admin#stalled-title")
    stalled_list = page.locator("section[aria-labelledby=stalled-title]")
    assert stalled_list.get_by_role("link", name=f"#{job}").is_visible()
    assert stalled_list.get_by_role("button", name="Reap now").is_visible()
    assert page.problems == []


def test_a_backing_off_jobs_page_leads_to_the_scheduled_page_without_javascript(
    live_server, browser, make_job, read_job
):
    job = make_job(retry_count=1, max_retries=3, run_at=utcnow() + timedelta(minutes=10))
    due = read_job(job).run_at
    context = browser.new_context(java_script_enabled=False, viewport={"width": 390, "height": 844})
    try:
        tab = context.new_page()
        sign_in(tab, live_server)
        tab.goto(f"{live_server.url}/admin/jobs/{job}")
        line = tab.locator('[data-standing="backing-off"]')
        assert line.inner_text().startswith(f"Backing off after failed run 1 of 4: due {due:%Y-%m-%d %H:%M:%S} UTC")
        assert tab.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        line.get_by_role("link", name="Every job not due yet").click()

        tab.wait_for_url(f"{live_server.url}/admin/scheduled")
        row = tab.locator(f'tr[data-job="{job}"]')
        assert row.locator("[data-reason]").inner_text() == "backing off after failed run 1 of 4"
        assert f"{due:%Y-%m-%d %H:%M:%S} UTC" in row.inner_text()
    finally:
        context.close()


def test_the_oldest_pending_tile_shows_what_the_servers_metric_reports(live_server, page, make_job, make_key):
    enqueued = utcnow() - timedelta(minutes=10)
    oldest = make_job(type="report", created_at=enqueued, run_at=enqueued)
    make_job(type="email", run_at=utcnow() + timedelta(hours=1), created_at=enqueued)  # scheduled: not counted
    secret = make_key("admin", "scraper")
    sign_in(page, live_server)

    tile = page.locator('[data-figure="oldest-pending"]')
    shown = seconds_of(tile.get_by_role("link").inner_text())
    request = urllib.request.Request(live_server.url + "/metrics", headers={"Authorization": f"Bearer {secret}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        families = text_string_to_metric_families(response.read().decode())
    ages = {
        sample.labels["type"]: sample.value
        for family in families
        for sample in family.samples
        if sample.name == "queuelog_oldest_pending_age_seconds"
    }

    assert tile.get_by_role("link").get_attribute("href") == f"/admin/jobs/{oldest}"
    assert abs(ages["report"] - shown) <= 2 and ages["email"] == 0
    assert tile.locator('[data-caption="oldest-pending"]').inner_text() == "of the due jobs, since due"
    assert page.locator('[data-caption="tiles"]').is_visible()
