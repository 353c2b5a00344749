"""The dashboard and /metrics count the same jobs the same way (queuelog/reads/figures.py), and the page says how.

Oldest pending: of the due pending jobs, the one waiting longest since it became due, the later of its run_at
and its enqueue; the tile and ``queuelog_oldest_pending_age_seconds`` must name the same age. Stalled: running
jobs whose lease ran out; the tile, the gauge, each job's page and the reaper must find the same jobs. Time
cannot be faked in a running server, so jobs are enqueued with a run_at in the past or future, and a job that
became due minutes ago is built with the factory.
"""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest

from queuelog.core.clock import rfc3339, utcnow
from tests.support.metrics import scrape, value
from tests.support.ui import flashes, post_form, seconds_of, text_of

pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")

OLDEST = "queuelog_oldest_pending_age_seconds"
TILE = re.compile(r'data-figure="oldest-pending">.*?<span class="tile-value( muted)?">(.*?)</span>', re.S)
LINK = re.compile(r'<a href="/admin/jobs/(\d+)"[^>]*>([^<]+)</a>')


@pytest.fixture
def config_overrides():
    """A real backoff (at least 5 minutes), so a failed run's retry is not due yet."""
    return {"RETRY_BACKOFF_BASE": 600}


def oldest_tile(client) -> tuple[int, int] | None:
    """The oldest-pending tile: (job id, age in seconds), or None when it says none."""
    muted, inner = TILE.search(text_of(client.get("/admin"))).groups()
    if muted:
        assert inner == "none"
        return None
    job_id, shown = LINK.fullmatch(inner).groups()
    return int(job_id), seconds_of(shown)


def test_a_job_enqueued_with_a_past_run_at_has_waited_since_its_enqueue(signed_in, client, admin, enqueue):
    job = enqueue(type="email", run_at=rfc3339(utcnow() - timedelta(hours=1)))

    tile = oldest_tile(signed_in)
    metric = value(scrape(client, admin), OLDEST, type="email")

    assert tile is not None and tile[0] == job["id"] and tile[1] < 60
    assert 0 <= metric < 60


def test_a_retry_counts_from_the_end_of_its_backoff_not_its_first_enqueue(signed_in, client, admin, make_job):
    now = utcnow()
    retry = make_job(
        type="report", created_at=now - timedelta(hours=1), run_at=now - timedelta(seconds=90), retry_count=1
    )

    tile = oldest_tile(signed_in)
    metric = value(scrape(client, admin), OLDEST, type="report")

    assert tile is not None and tile[0] == retry and 90 <= tile[1] < 150
    assert 90 <= metric < 150


def test_jobs_not_due_yet_count_in_neither_the_tile_nor_the_metric(signed_in, client, admin, worker, enqueue, claim):
    enqueue(type="report", run_at=rfc3339(utcnow() + timedelta(hours=1)))
    failing = enqueue(type="email", max_retries=3)
    claimed = claim(types=["email"])
    client.post(f"/jobs/{failing['id']}/fail", headers=worker, json={"claim_token": claimed["claim_token"]})

    body = text_of(signed_in.get("/admin"))
    samples = scrape(client, admin)

    assert oldest_tile(signed_in) is None
    assert value(samples, OLDEST, type="email") == 0 and value(samples, OLDEST, type="report") == 0
    assert 'data-figure="pending-due">0 due<' in body and 'data-figure="pending-scheduled">2 scheduled<' in body


def test_the_tile_and_the_metric_name_the_same_oldest_due_job_and_age(
    signed_in, client, admin, worker, enqueue, claim, make_job
):
    now = utcnow()
    enqueued = now - timedelta(minutes=10)
    oldest = make_job(type="report", created_at=enqueued, run_at=enqueued)
    enqueue(type="email", run_at=rfc3339(now - timedelta(hours=2)))  # due since its enqueue, just now
    enqueue(type="noop", run_at=rfc3339(now + timedelta(minutes=5)))  # scheduled
    failing = enqueue(type="resize-image")  # backing off
    claimed = claim(types=["resize-image"])
    client.post(f"/jobs/{failing['id']}/fail", headers=worker, json={"claim_token": claimed["claim_token"]})

    read_from = time.monotonic()
    tile = oldest_tile(signed_in)
    samples = scrape(client, admin)
    between = time.monotonic() - read_from

    assert tile is not None and tile[0] == oldest
    # The same age, each as of its own read: the scrape comes up to ``between`` later, and the tile shows
    # whole seconds.
    assert -1 <= value(samples, OLDEST, type="report") - tile[1] <= between + 1
    assert 600 <= tile[1] < 660
    assert value(samples, OLDEST, type="email") < 60
    assert value(samples, OLDEST, type="noop") == 0 and value(samples, OLDEST, type="resize-image") == 0


def test_the_tile_the_metric_the_job_pages_and_the_reaper_find_the_same_stalled_jobs(
    signed_in, client, admin, make_job
):
    now = utcnow()
    stalled = {
        make_job(status="running", lease_expires_at=now - timedelta(seconds=5)),
        make_job(status="running", lease_expires_at=now - timedelta(hours=1)),
    }
    healthy = {make_job(status="running", lease_expires_at=now + timedelta(minutes=5)), make_job(status="pending")}

    body = text_of(signed_in.get("/admin"))
    said_stalled = {
        job for job in stalled | healthy if 'data-standing="stalled"' in text_of(signed_in.get(f"/admin/jobs/{job}"))
    }

    assert re.search(
        r'data-figure="stalled">\s*<span class="tile-label">stalled</span>\s*'
        r'<span class="tile-value">2<',
        body,
    )
    assert value(scrape(client, admin), "queuelog_stalled_jobs") == 2
    assert said_stalled == stalled
    response = post_form(signed_in, "/admin/reap", page="/admin", follow_redirects=True)
    assert flashes(response)[0].startswith("Reaped 2 stalled jobs")


def test_the_dashboard_says_what_each_tile_and_the_chart_count(signed_in):
    body = text_of(signed_in.get("/admin"))

    tiles = re.search(r'data-caption="tiles">(.*?)</p>', body, re.S).group(1)
    assert "waited" in tiles and "since it became due" in tiles and OLDEST in tiles
    assert "lease ran out" in tiles and "queuelog_stalled_jobs" in tiles
    assert re.search(r'data-caption="oldest-pending">of the due jobs, since due<', body)
    chart = re.search(r'data-caption="chart">(.*?)</p>', body, re.S).group(1)
    assert "became completed or failed" in chart and "statuses now" in chart
