"""Issue #18 item 7 in a real browser: the dashboard's chart switched to 24 hours and 7 days, and each type's
wait and run p50/p95 over the last hour, after jobs ran through the HTTP API of a real server; axe-core
finds nothing on either page, in light and dark."""

from __future__ import annotations

import time

from tests.support.axe import AXE_SCRIPT, assert_no_violations
from tests.support.live_site import api, fail_a_job, sign_in


def _complete_a_job(server, producer: str, worker: str, job_type: str, runs_for: float = 0.0) -> None:
    status, job = api(server, "POST", "/jobs", producer, {"type": job_type})
    assert status == 201, job
    status, claimed = api(server, "POST", "/jobs/claim", worker, {"types": [job_type]})
    assert status == 200 and claimed["id"] == job["id"], claimed
    time.sleep(runs_for)
    status, done = api(server, "POST", f"/jobs/{job['id']}/complete", worker, {"claim_token": claimed["claim_token"]})
    assert status == 200, done


def test_the_chart_switches_range_and_the_types_page_shows_wait_and_run_times(page, live_server, make_key):
    producer, worker = make_key("producer", "storefront"), make_key("worker", "mailer-1")
    _complete_a_job(live_server, producer, worker, "report", runs_for=0.3)
    _complete_a_job(live_server, producer, worker, "report")
    fail_a_job(live_server, producer, worker, "smtp timeout")
    page.context.add_init_script(path=str(AXE_SCRIPT))
    sign_in(page, live_server)

    page.click(".range-switch >> text=7 days")
    page.wait_for_url(live_server.url + "/admin?range=7d")
    assert page.locator("#chart-title").inner_text() == "7 days"
    assert page.locator(".range-switch a[aria-current=page]").inner_text() == "7 days"
    assert page.locator("svg.chart-wide g.bar").count() == 168
    legend = " ".join(page.locator(".legend").inner_text().split())
    assert legend == "completed 2 failed 1 per hour, UTC"
    assert_no_violations(page, "the dashboard's 7-day chart, light")

    page.click(".range-switch >> text=24 hours")
    page.wait_for_url(live_server.url + "/admin?range=24h")
    assert page.locator("svg.chart-wide g.bar").count() == 24

    page.click("nav >> text=Types")
    page.wait_for_url(live_server.url + "/admin/types")
    row = page.locator("tr[data-timings=report]")
    cells = {
        name: row.locator(f"td[data-field={name}]").inner_text()
        for name in ("enqueued", "completed", "failed", "wait_p50", "run_p95")
    }
    assert cells["enqueued"] == "2" and cells["completed"] == "2" and cells["failed"] == "0"
    assert cells["wait_p50"].startswith("≤ ")
    # The run of 0.3 s and its complete request, as its bucket's upper edge (a busy machine may add ~0.4 s).
    assert cells["run_p95"] in ("≤ 362 ms", "≤ 512 ms", "≤ 724 ms"), cells
    assert page.locator("tr[data-timings=email] td[data-field=failed]").inner_text() == "1"
    assert_no_violations(page, "the types page's timings, light")
    page.emulate_media(color_scheme="dark")
    assert_no_violations(page, "the types page's timings, dark")
    assert page.problems == []
