"""A job's page draws its workflow (parents and children, each linked, with their states) and its progress
report, every key of it; the jobs list filters waiting jobs."""

from __future__ import annotations

import html
import re

import pytest
from sqlalchemy import insert

from queuelog.extensions import db
from queuelog.models import JobDependency
from tests.support.ui import text_of

# Each request runs in its own app context, as on a server (tests/support/ui.py).
pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")


def link(child: int, *parents: int) -> None:
    with db.engine.begin() as conn:
        for parent in parents:
            conn.execute(insert(JobDependency.__table__).values(child_id=child, parent_id=parent))


def section(body: str, name: str) -> str:
    match = re.search(rf'<section[^>]*data-section="{name}".*?</section>', body, re.S)
    assert match, f"no {name} section"
    return html.unescape(match.group(0))


def test_the_job_page_draws_parents_and_children_with_their_states_each_linked(signed_in, make_job):
    first = make_job(status="completed", type="report", has_dependents=True)
    second = make_job(status="running", type="resize-image", has_dependents=True)
    job = make_job(status="waiting", run_when="completed", has_dependents=True)
    child = make_job(status="waiting", run_when="finished", type="noop")
    link(job, first, second)
    link(child, job)
    graph = section(text_of(signed_in.get(f"/admin/jobs/{job}")), "workflow")
    for other, job_type, status in (
        (first, "report", "completed"),
        (second, "resize-image", "running"),
        (child, "noop", "waiting"),
    ):
        assert re.search(
            rf'<a href="/admin/jobs/{other}"><span class="mono">#{other}</span> {job_type}</a>'
            rf'\s*<span class="badge status-{status}">{status}</span>',
            graph,
        ), graph
    assert 'Parents <span class="muted">(2)</span>' in graph and 'Children <span class="muted">(1)</span>' in graph
    assert "runs once every parent completed" in graph


def test_a_job_outside_any_workflow_has_no_workflow_section(signed_in, make_job):
    job = make_job(status="pending")
    assert 'data-section="workflow"' not in text_of(signed_in.get(f"/admin/jobs/{job}"))


def test_the_job_page_shows_every_key_of_the_progress_report(signed_in, make_job):
    job = make_job(status="running", progress='{"percent": 40, "stage": "rendering", "frames": {"done": 4}}')
    shown = section(text_of(signed_in.get(f"/admin/jobs/{job}")), "progress")
    assert '<progress class="progress" max="100" value="40"' in shown
    for key, value in (("percent", "40"), ("stage", "rendering"), ("frames", '{"done": 4}')):
        assert re.search(rf"<dt>{key}</dt><dd class=\"mono\">{re.escape(value)}</dd>", shown), shown


def test_progress_without_a_percentage_is_shown_as_it_is(signed_in, make_job):
    job = make_job(status="running", progress='{"rows": 1200, "<b>": "<i>x</i>"}')
    body = text_of(signed_in.get(f"/admin/jobs/{job}"))
    assert "<progress" not in body
    assert "&lt;i&gt;x&lt;/i&gt;" in body and "<i>x</i>" not in body


def test_the_jobs_list_filters_waiting_jobs(signed_in, make_job):
    waiting = make_job(status="waiting", run_when="completed")
    pending = make_job(status="pending")
    body = text_of(signed_in.get("/admin/jobs?status=waiting"))
    assert f"/admin/jobs/{waiting}" in body and f'/admin/jobs/{pending}"' not in body
    assert '<option selected value="waiting">' in body or 'value="waiting" selected' in body


def test_the_dashboard_counts_waiting_jobs(signed_in, make_job):
    make_job(status="waiting", run_when="completed")
    body = text_of(signed_in.get("/admin"))
    tile = re.search(r'<a class="tile tile-waiting"[^>]*href="/admin/jobs\?status=waiting"[^>]*>.*?</a>', body, re.S)
    assert tile and ">1<" in tile.group(0).replace(" ", ""), body[:3000]
