"""The dashboard: counts, what is stalled, what failed, and the last hour at a glance."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from queuelog.core.clock import utcnow
from queuelog.queue.rollups import HOUR, MINUTE
from tests.support.rollups import mark_rolled, minute_ago, run_job, store
from tests.support.ui import ADMIN_NAME, events_of, flashes, post_form, shows_age, text_of

# Each request runs in its own app context, as on a server (tests/support/ui.py).
pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")


def tile(body: str, status: str) -> str:
    match = re.search(rf'data-count="{status}">.*?class="tile-value">([^<]+)<', body, re.S)
    assert match, f"no tile for {status}"
    return match.group(1)


def test_the_dashboard_counts_jobs_per_status(signed_in, make_job):
    for status, count in (("pending", 3), ("running", 1), ("completed", 4), ("failed", 2), ("cancelled", 1)):
        for _ in range(count):
            make_job(status=status)
    body = text_of(signed_in.get("/admin"))
    assert [tile(body, s) for s in ("pending", "running", "completed", "failed", "cancelled")] == [
        "3",
        "1",
        "4",
        "2",
        "1",
    ]


def test_each_count_links_to_the_jobs_with_that_status(signed_in, make_job):
    make_job(status="failed")
    assert 'href="/admin/jobs?status=failed"' in text_of(signed_in.get("/admin"))


def test_the_dashboard_shows_a_type_by_status_table(signed_in, make_job):
    make_job(type="report", status="failed")
    make_job(type="report", status="failed")
    make_job(type="email", status="completed")
    body = text_of(signed_in.get("/admin"))
    assert re.search(r'href="/admin/jobs\?type=report&amp;status=failed">2</a>', body)
    assert re.search(r'href="/admin/jobs\?type=email&amp;status=completed">1</a>', body)


def test_an_empty_queue_reads_calmly(signed_in):
    body = text_of(signed_in.get("/admin"))
    assert "Nothing is stalled" in body and "No failed jobs." in body
    assert "No job completed or failed in the last hour." in body


def test_the_oldest_pending_job_and_its_age_are_shown(signed_in, make_job):
    now = utcnow()
    enqueued = now - timedelta(hours=2, minutes=5)
    oldest = make_job(status="pending", created_at=enqueued, run_at=enqueued)
    make_job(status="pending", created_at=now - timedelta(minutes=1), run_at=now - timedelta(minutes=1))
    body = text_of(signed_in.get("/admin"))
    match = re.search(r'data-figure="oldest-pending".*?href="/admin/jobs/(\d+)"[^>]*>([^<]+)</a>', body, re.S)
    assert match and int(match.group(1)) == oldest
    assert shows_age(match.group(2), timedelta(hours=2, minutes=5), since=now)


def test_a_job_scheduled_for_later_is_not_counted_as_waiting(signed_in, make_job):
    make_job(status="pending", created_at=utcnow() - timedelta(hours=5), run_at=utcnow() + timedelta(hours=1))
    body = text_of(signed_in.get("/admin"))
    assert re.search(r'data-figure="oldest-pending".*?tile-value muted">none<', body, re.S)


def test_stalled_running_jobs_are_listed_with_a_reap_button(signed_in, make_job):
    stalled = make_job(status="running", worker_id="worker-z", lease_expires_at=utcnow() - timedelta(minutes=3))
    healthy = make_job(status="running")
    body = text_of(signed_in.get("/admin"))
    section = body[body.index('id="stalled-title"') : body.index('id="types-title"')]
    assert f"/admin/jobs/{stalled}" in section and "worker-z" in section
    assert f'/admin/jobs/{healthy}"' not in section
    assert 'action="/admin/reap"' in section
    assert re.search(r'data-figure="stalled">.*?tile-value">1<', body, re.S)


def test_reap_now_gives_stalled_jobs_back_in_the_admins_name(signed_in, make_job, read_job):
    stalled = make_job(status="running", lease_expires_at=utcnow() - timedelta(minutes=3))
    response = post_form(signed_in, "/admin/reap", page="/admin")
    assert response.status_code == 302 and response.headers["Location"] == "/admin"
    assert read_job(stalled).status == "pending"
    assert read_job(stalled).retry_count == 1
    assert [(e.event, e.actor) for e in events_of(stalled)][-1] == ("reaped", f"admin:{ADMIN_NAME}")
    assert flashes(signed_in.get("/admin")) == [
        "Reaped 1 stalled job: 1 back in the queue, 0 failed (no retries left), 0 quarantined."
    ]


def test_reap_now_with_nothing_stalled_says_so(signed_in, make_job, read_job):
    running = make_job(status="running")
    post_form(signed_in, "/admin/reap", page="/admin")
    assert read_job(running).status == "running"
    assert flashes(signed_in.get("/admin")) == ["No running job had an expired lease; nothing was reaped."]


def test_reap_now_without_a_csrf_token_is_refused(signed_in, make_job, read_job):
    stalled = make_job(status="running", lease_expires_at=utcnow() - timedelta(minutes=3))
    assert signed_in.post("/admin/reap").status_code == 400
    assert read_job(stalled).status == "running"


def test_recent_failures_show_the_error_and_link_to_the_job(signed_in, failed_job):
    job_id = failed_job(error="SMTP 550: mailbox unavailable")
    body = text_of(signed_in.get("/admin"))
    section = body[body.index('id="failures-title"') :]
    assert f'href="/admin/jobs/{job_id}"' in section
    assert "SMTP 550: mailbox unavailable" in section


def test_a_quarantined_job_is_marked_on_the_dashboard(signed_in, make_job):
    make_job(status="failed", error="quarantined: its worker died 3 times", stall_count=3)
    body = text_of(signed_in.get("/admin"))
    section = body[body.index('id="failures-title"') :]
    assert 'class="badge quarantined"' in section


def _counted(metric: str, at, n: int, span: int = MINUTE) -> None:
    """``n`` jobs ``metric`` (completed, failed) at ``at``, as the rollup step stores them (and its mark says
    every closed minute is rolled up)."""
    store(span, metric, at, n)
    mark_rolled()


def test_the_chart_counts_completed_and_failed_per_minute_over_the_last_hour(signed_in):
    now = utcnow()
    ten_ago = now - timedelta(minutes=10)
    _counted("completed", ten_ago, 3)
    _counted("failed", ten_ago, 1)
    _counted("failed", now - timedelta(minutes=20), 1)
    _counted("completed", now - timedelta(minutes=61), 1)  # too old
    _counted("completed", now, 7, span=HOUR)  # the hours are for the longer ranges
    body = text_of(signed_in.get("/admin"))
    assert "over the last hour: 3 completed, 2 failed" in body
    assert f"<title>{ten_ago:%H:%M} UTC: 3 completed, 1 failed</title>" in body
    svg = body[body.index("<svg") : body.index("</svg>")]
    assert svg.count("<title>") == 60


def test_the_24_hour_chart_counts_per_hour_from_the_stored_hours(signed_in):
    now = utcnow()
    three_ago = now - timedelta(hours=3)
    _counted("completed", three_ago, 40, span=HOUR)
    _counted("failed", three_ago, 2, span=HOUR)
    _counted("completed", now - timedelta(hours=24), 5, span=HOUR)  # the 25th hour back: outside
    body = text_of(signed_in.get("/admin?range=24h"))
    assert "per hour over the last 24 hours: 40 completed, 2 failed" in body
    assert f"<title>{three_ago:%d %b %H}:00 UTC: 40 completed, 2 failed</title>" in body
    svg = body[body.index("<svg") : body.index("</svg>")]
    assert svg.count("<title>") == 24


def test_the_7_day_chart_draws_one_bar_per_hour(signed_in):
    now = utcnow()
    _counted("completed", now - timedelta(days=6, hours=23), 9, span=HOUR)
    body = text_of(signed_in.get("/admin?range=7d"))
    assert "per hour over the last 7 days: 9 completed, 0 failed" in body
    svg = body[body.index("<svg") : body.index("</svg>")]
    assert svg.count("<title>") == 168


def test_the_chart_counts_events_rolled_up_by_flask_rollup_in_their_minutes(signed_in, runner):
    five_ago = minute_ago(5)
    for second in (1, 2, 3):
        run_job("email", five_ago + timedelta(seconds=second), wait=timedelta(0), run=timedelta(seconds=1))
    run_job("report", five_ago, wait=timedelta(0), run=timedelta(seconds=1), outcome="failed")
    assert runner.invoke(args=["rollup"]).output.startswith("rolled up ")
    body = text_of(signed_in.get("/admin"))
    assert "over the last hour: 3 completed, 1 failed" in body
    assert f"<title>{five_ago:%H:%M} UTC: 3 completed, 1 failed</title>" in body
    assert 'data-caption="rolled-up"' not in body


def test_the_minutes_after_the_rollup_mark_are_read_live_from_the_events(signed_in):
    mark_rolled()
    now = utcnow()
    run_job("email", now - timedelta(seconds=1), wait=timedelta(0), run=timedelta(0))  # not settled: not rolled
    body = text_of(signed_in.get("/admin"))
    assert "over the last hour: 1 completed, 0 failed" in body


def test_a_rollup_mark_far_behind_is_said_under_the_chart(signed_in):
    mark_rolled(utcnow() - timedelta(hours=3))
    body = text_of(signed_in.get("/admin?range=24h"))
    assert re.search(r'data-caption="rolled-up">History rolled up through <time[^>]*>[-\d]+ [\d:]+ UTC</time>', body)


def test_the_range_switch_is_plain_links_marking_the_chosen_one(signed_in):
    body = text_of(signed_in.get("/admin?range=24h"))
    assert '<a href="/admin?range=24h" data-range="24h" aria-current="page">24 hours</a>' in body
    assert '<a href="/admin?range=7d" data-range="7d">7 days</a>' in body


def test_an_unknown_range_is_a_400_that_names_the_choices(signed_in):
    response = signed_in.get("/admin?range=1y")
    assert response.status_code == 400
    assert "The chart&#39;s range must be one of 1h, 24h, 7d" in text_of(response)


def test_the_chart_is_an_inline_svg_with_no_script(signed_in):
    body = text_of(signed_in.get("/admin"))
    svg = body[body.index("<svg") : body.index("</svg>")]
    assert 'role="img"' in svg and "<script" not in svg


def test_the_live_part_can_be_fetched_alone_for_auto_refresh(signed_in, make_job):
    make_job(status="failed")
    response = signed_in.get("/admin?partial=1")
    assert response.status_code == 200
    assert response.headers["X-Queuelog-Partial"] == "1"
    body = text_of(response)
    assert "<html" not in body and "<nav" not in body
    assert tile(body, "failed") == "1"


def test_the_full_page_marks_the_part_that_refreshes(signed_in, app):
    body = text_of(signed_in.get("/admin"))
    assert re.search(r'<div id="live" data-live data-refresh-seconds="10">', body)
    assert '<script src="/static/queuelog.js" defer></script>' in body
