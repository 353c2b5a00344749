"""Each type's last hour on the Types page and the type's own page: jobs enqueued, completed and failed,
and wait and run p50/p95 read from the stored histograms (a bucket's upper edge), never from the jobs."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest

from queuelog.core.clock import utcnow
from queuelog.queue.rollups import MINUTE
from tests.support.rollups import mark_rolled, minute_ago, run_job, store
from tests.support.ui import text_of

# Each request runs in its own app context, as on a server (tests/support/ui.py).
pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")


def timings_row(body: str, job_type: str) -> dict[str, str]:
    """The timings table's row for a type: its cells' text by data-field."""
    row = re.search(rf'<tr data-timings="{re.escape(job_type)}">(.*?)</tr>', body, re.S)
    assert row, f"no timings row for type {job_type}"
    return {
        name: " ".join(html.unescape(re.sub(r"<[^>]+>", " ", value)).split())
        for name, value in re.findall(r'<td[^>]*data-field="(\w+)"[^>]*>(.*?)</td>', row.group(1), re.S)
    }


def stored(metric: str, n: int, bucket: int = 0, job_type: str = "report", minutes_ago: int = 5) -> None:
    store(MINUTE, metric, utcnow() - timedelta(minutes=minutes_ago), n, job_type, bucket)
    mark_rolled()


def test_the_types_page_reads_p50_and_p95_from_the_last_hours_histograms(signed_in):
    stored("enqueued", 20)
    stored("completed", 19)
    stored("failed", 1)
    stored("wait", 18, bucket=15)  # ≤ 128 ms
    stored("wait", 2, bucket=21)  # ≤ 1.02 s: the 19th and 20th of 20
    stored("run", 20, bucket=33)  # ≤ 1.09 min
    stored("wait", 50, bucket=40, minutes_ago=61)  # outside the hour
    row = timings_row(text_of(signed_in.get("/admin/types")), "report")
    assert row == {
        "enqueued": "20",
        "completed": "19",
        "failed": "1",
        "wait_p50": "≤ 128 ms",
        "wait_p95": "≤ 1.02 s",
        "run_p50": "≤ 1.09 min",
        "run_p95": "≤ 1.09 min",
    }


def test_a_type_with_no_job_in_the_last_hour_shows_dashes(signed_in):
    row = timings_row(text_of(signed_in.get("/admin/types")), "email")
    assert row == {
        "enqueued": "0",
        "completed": "0",
        "failed": "0",
        "wait_p50": "–",
        "wait_p95": "–",
        "run_p50": "–",
        "run_p95": "–",
    }


def test_the_page_states_the_bucket_resolution(signed_in):
    assert "√2 (×1.41) wider than the one before, from 1 ms to 70 min" in text_of(signed_in.get("/admin/types"))


def test_a_type_page_shows_the_wait_and_run_of_a_job_run_through_the_api(signed_in, client, enqueue, claim, worker):
    enqueue(type="noop")
    job = claim()
    client.post(f"/jobs/{job['id']}/complete", json={"claim_token": job["claim_token"]}, headers=worker)
    body = text_of(signed_in.get("/admin/types/noop"))
    figures = re.search(r'<dl class="fields" data-timings="noop">(.*?)</dl>', body, re.S).group(1)
    assert re.search(r'data-field="counts">1 · 1 · 0<', figures)
    assert re.search(r'data-field="wait">≤ [\d.]+ m?s / ≤ [\d.]+ m?s <span class="muted">\(1 claims\)', figures)
    assert re.search(r'data-field="run">≤ [\d.]+ m?s / ≤ [\d.]+ m?s <span class="muted">\(1 runs\)', figures)


def test_the_types_page_shows_the_p50_and_p95_of_events_rolled_up_by_flask_rollup(signed_in, runner):
    start = minute_ago(7)
    for i in range(19):  # waits of 100 ms, runs of 2 s
        run_job("report", start + timedelta(seconds=i), wait=timedelta(milliseconds=100), run=timedelta(seconds=2))
    run_job(
        "report", start + timedelta(seconds=30), wait=timedelta(seconds=3), run=timedelta(seconds=20), outcome="failed"
    )
    assert runner.invoke(args=["rollup"]).output.startswith("rolled up ")
    row = timings_row(text_of(signed_in.get("/admin/types")), "report")
    assert row == {
        "enqueued": "20",
        "completed": "19",
        "failed": "1",
        "wait_p50": "≤ 128 ms",
        "wait_p95": "≤ 128 ms",
        "run_p50": "≤ 2.05 s",
        "run_p95": "≤ 2.05 s",
    }


def test_with_no_rollup_ever_run_the_types_page_says_so(signed_in):
    assert "History not rolled up yet" in text_of(signed_in.get("/admin/types"))
