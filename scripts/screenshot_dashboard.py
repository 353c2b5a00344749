#!/usr/bin/env python3
"""Seed a realistic queue, serve it with gunicorn, sign in with Chromium and save docs/dashboard.png.

    .venv/bin/python scripts/screenshot_dashboard.py [--out docs/dashboard.png] [--page /admin] [--light]

Everything happens in a temporary directory (SQLite file, server log); nothing touches instance/.
The seeded hour goes through the queue's own operations (enqueue, claim, complete, fail, reap), then
its times are spread back over the last hour so the chart has a shape: a steady load, a dip, and a
burst of SMTP failures twenty minutes ago — the kind of night the dashboard is for.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import math
import random
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import delete, insert, select, update  # noqa: E402

from queuelog import create_app, queue  # noqa: E402
from queuelog.auth import keys, users  # noqa: E402
from queuelog.core.clock import utcnow  # noqa: E402
from queuelog.core.timing_buckets import bucket_of  # noqa: E402
from queuelog.database.transactions import write_transaction  # noqa: E402
from queuelog.models import Job, JobEvent, Priority, RollupMark, TypeRollup  # noqa: E402
from queuelog.queue import NewJob, rollups  # noqa: E402
from queuelog.queue.rollups import HOUR, MINUTE, period_of  # noqa: E402

ADMIN, PASSWORD = "night-owl", "correct horse battery staple"
JOB_TYPES = ["send-email", "render-report", "resize-image", "sync-crm", "deliver-webhook"]
TYPE_WEIGHTS = [50, 8, 18, 12, 12]
WORKER_FOR = {
    "send-email": ["mailer-1", "mailer-2"],
    "render-report": ["reports-1"],
    "resize-image": ["media-1"],
    "sync-crm": ["integrations-1"],
    "deliver-webhook": ["integrations-1"],
}
ERRORS = {
    "send-email": "SMTPRecipientsRefused: 550 5.1.1 <billing@example.org>: Recipient address rejected: "
    "mailbox unavailable",
    "deliver-webhook": "HTTPError: 503 Service Unavailable from https://hooks.example.com/orders (after 30.0 s)",
    "render-report": "KeyError: 'fiscal_year'\n  File \"reports/render.py\", line 88, in build_totals\n"
    "    year = params['fiscal_year']",
    "sync-crm": "crm.RateLimited: 429 Too Many Requests (retry after 60 s)",
    "resize-image": "PIL.UnidentifiedImageError: cannot identify image file 'uploads/7f3a.heic'",
}
#: Typical wait and run of each type, medians in ms (the seed claims and finishes each job at once).
TYPICAL_MS = {
    "send-email": (180, 420),
    "render-report": (2_400, 9_000),
    "resize-image": (350, 1_600),
    "sync-crm": (900, 700),
    "deliver-webhook": (120, 260),
}
jobs_t, events_t, rollups_t = Job.__table__, JobEvent.__table__, TypeRollup.__table__


def payload_for(job_type: str, n: int) -> dict:
    """A plausible payload for each type."""
    return {
        "send-email": {"to": f"customer{n}@example.org", "template": "invoice", "invoice_id": 40000 + n},
        "render-report": {"report": "monthly-revenue", "account_id": 1200 + n % 40, "format": "pdf"},
        "resize-image": {"upload": f"uploads/{n:05x}.jpg", "sizes": [64, 256, 1024]},
        "sync-crm": {"contact_id": 88000 + n, "fields": ["email", "plan"]},
        "deliver-webhook": {
            "endpoint": "https://hooks.example.com/orders",
            "event": "order.paid",
            "order_id": 51000 + n,
        },
    }[job_type]


def per_minute_load(minutes_ago: int, rng: random.Random) -> tuple[int, int]:
    """How many jobs completed and finally failed in a given minute of the last hour."""
    base = 26 + 9 * math.sin(minutes_ago / 9.0) + rng.randint(-4, 4)
    if 34 <= minutes_ago <= 38:  # a quiet patch: a deploy drained the workers
        base *= 0.35
    failed = 1 if rng.random() < 0.25 else 0
    if 18 <= minutes_ago <= 23:  # the SMTP provider refused mail for a few minutes
        failed += rng.randint(5, 9)
    return max(0, int(base)), failed


def seed(app, rng: random.Random) -> None:
    """Fill the queue with an hour of work and the current state of a busy night."""
    scene = _Scene(rng, *_seed_keys())
    _seed_the_hour(scene)
    backlog, stalled = _seed_the_present(scene)
    _spread_over_the_hour(scene, backlog, stalled)
    _restate_rollups(rng)


def _seed_keys() -> tuple[dict, object]:
    """The admin, the producers and the worker keys; returns (workers by name, the storefront producer)."""
    users.create_user(ADMIN, PASSWORD)
    keys.create_key("billing", "producer", "high")
    keys.create_key("web-signup", "producer")
    keys.create_key("ops-cli", "admin")
    workers = {}
    for name, types in (
        ("mailer-1", ["send-email"]),
        ("mailer-2", ["send-email"]),
        ("reports-1", ["render-report"]),
        ("media-1", ["resize-image"]),
        ("integrations-1", ["sync-crm", "deliver-webhook"]),
    ):
        secret = keys.create_key(name, "worker", types=types)
        workers[name] = keys.authenticate(secret)
    producer = keys.authenticate(keys.create_key("storefront", "producer", "critical"))
    keys.create_key("legacy-cron", "producer")
    keys.revoke_key("legacy-cron")
    return workers, producer


@dataclass
class _Scene:
    """What the seeding steps share: the random source, the keys, and the jobs to move back in time."""

    rng: random.Random
    workers: dict
    producer: object
    now: datetime = field(default_factory=utcnow)
    counter: Iterator[int] = field(default_factory=lambda: iter(range(1, 1_000_000)))
    shifts: list[tuple[int, timedelta]] = field(default_factory=list)  # (job id, how far back)

    def new_jobs(self, count: int, **extra) -> list:
        batch = []
        for _ in range(count):
            job_type = self.rng.choices(JOB_TYPES, TYPE_WEIGHTS)[0]
            priority = self.rng.choices(
                [Priority.LOW, Priority.MEDIUM, Priority.HIGH, Priority.CRITICAL], [40, 40, 15, 5]
            )[0]
            batch.append(
                NewJob(
                    type=job_type,
                    payload=payload_for(job_type, next(self.counter)),
                    priority=int(priority),
                    max_retries=3,
                    **extra,
                )
            )
        return [answer.job for answer in queue.enqueue(self.producer, batch)]

    def worker_for(self, row):
        return self.workers[self.rng.choice(WORKER_FOR[row.type])]

    def run_one(self, row, outcome: str, age: timedelta) -> None:
        worker = self.worker_for(row)
        [claimed] = _claim_exact(worker, row)
        if outcome == "completed":
            queue.complete(worker, claimed.id, claimed.claim_token, {"ok": True, "ms": self.rng.randint(40, 900)})
        else:
            queue.fail(worker, claimed.id, claimed.claim_token, ERRORS[row.type], retryable=False)
        self.shifts.append((row.id, age))


def _seed_the_hour(scene: _Scene) -> None:
    """Each minute of the last hour: its jobs enqueued, claimed, completed or failed."""
    for minutes_ago in range(59, -1, -1):
        completed, failed = per_minute_load(minutes_ago, scene.rng)
        rows = scene.new_jobs(completed + failed)
        for index, row in enumerate(rows):
            age = timedelta(minutes=minutes_ago, seconds=scene.rng.randint(0, 59))
            if index < failed:
                row = _retype(row, "send-email" if 18 <= minutes_ago <= 23 else row.type)
            scene.run_one(row, "completed" if index >= failed else "failed", age)


def _seed_the_present(scene: _Scene) -> tuple[list, list]:
    """A backlog, work in flight, a worker that died holding jobs, a quarantined job; returns (backlog, stalled)."""
    backlog = scene.new_jobs(140)
    scene.new_jobs(12, run_at=scene.now + timedelta(minutes=30))
    for row in backlog[:4]:
        queue.cancel(row.id, "key:storefront")
    for row in backlog[4:12]:
        _claim_exact(scene.worker_for(row), row)
    stalled = backlog[12:15]
    for row in stalled:
        _claim_exact(scene.workers["mailer-2"], _retype(row, "send-email"))
    poison = backlog[15]
    _claim_exact(scene.workers["media-1"], _retype(poison, "resize-image"))
    expired = scene.now - timedelta(minutes=7)
    with write_transaction() as conn:
        conn.execute(update(jobs_t).where(jobs_t.c.id == poison.id).values(lease_expires_at=expired, stall_count=2))
    queue.reap(now=scene.now)  # its workers died three times holding it: quarantined
    with write_transaction() as conn:
        # mailer-2 stopped heartbeating seven minutes ago; nobody has reaped its jobs yet.
        conn.execute(
            update(jobs_t)
            .where(jobs_t.c.id.in_([r.id for r in stalled]))
            .values(
                lease_expires_at=expired,
                heartbeat_at=expired - timedelta(minutes=5),
                claimed_at=expired - timedelta(minutes=6),
            )
        )
    return backlog, stalled


def _spread_over_the_hour(scene: _Scene, backlog: list, stalled: list) -> None:
    """Move the hour's work back over the hour (in Python: SQLite has no interval arithmetic)."""
    stalled_ids = {r.id for r in stalled}
    with write_transaction() as conn:
        for job_id, age in scene.shifts:
            _shift(conn, job_id, age)
        for index, row in enumerate(backlog):
            if row.id not in stalled_ids:
                _shift(
                    conn,
                    row.id,
                    timedelta(seconds=scene.rng.randint(5, 400) if index > 20 else 300 + index * 30),
                    events=("enqueued",),
                )


def _restate_rollups(rng: random.Random) -> None:
    """The type rollups as the rollup step would have left them for the jobs' shifted times, and a week of
    hours before that.

    The seed runs every job at once and then moves its times back, so its waits and runs are not the
    typical ones: the rolled minutes are written from the jobs here, with waits and runs drawn around each
    type's typical ones (TYPICAL_MS), and the mark set to the last settled minute. The minutes after it the
    pages read live from the events, as they would.
    """
    counts: collections.Counter = collections.Counter()
    through = rollups.closed_before(utcnow())

    def count(metric: str, at: datetime, job_type: str, bucket: int = 0, hours: bool = True) -> None:
        if period_of(at, MINUTE) >= through:  # not rolled up yet: read live
            return
        counts[(MINUTE, metric, period_of(at, MINUTE), job_type, bucket)] += 1
        if hours:
            counts[(HOUR, metric, period_of(at, HOUR), job_type, bucket)] += 1

    with write_transaction() as conn:
        conn.execute(delete(rollups_t))
        for job in conn.execute(select(jobs_t)).all():
            wait_ms, run_ms = TYPICAL_MS[job.type]
            count("enqueued", job.created_at, job.type)
            if job.claimed_at is not None:
                wait = timedelta(milliseconds=rng.lognormvariate(math.log(wait_ms), 0.9))
                count("wait", job.claimed_at, job.type, bucket_of(wait), hours=False)
            if job.status in ("completed", "failed") and job.claimed_at is not None:
                count(job.status, job.updated_at, job.type)
                run = timedelta(milliseconds=rng.lognormvariate(math.log(run_ms), 0.7))
                count("run", job.updated_at, job.type, bucket_of(run), hours=False)
        first_seeded = min(key[2] for key in counts if key[0] == HOUR)
        for hours_ago in range(1, 24 * 7 + 1):
            start = first_seeded - hours_ago * 3600
            daily = 0.55 + 0.45 * math.sin((start / 3600 - 8) / 24 * 2 * math.pi)
            for job_type, weight in zip(JOB_TYPES, TYPE_WEIGHTS, strict=True):
                done = int(1560 * weight / 100 * daily * rng.uniform(0.85, 1.15))
                counts[(HOUR, "enqueued", start, job_type, 0)] += done
                counts[(HOUR, "completed", start, job_type, 0)] += done
                counts[(HOUR, "failed", start, job_type, 0)] += rng.choice([0, 0, 0, 1, 2]) + (
                    rng.randint(40, 90) if job_type == "send-email" and hours_ago in (30, 31) else 0
                )
        names = ("span", "metric", "period", "type", "bucket", "shard", "n")
        rows = [dict(zip(names, key + (0, n), strict=True)) for key, n in sorted(counts.items()) if n]
        for start in range(0, len(rows), 1000):
            conn.execute(insert(rollups_t), rows[start : start + 1000])
        conn.execute(delete(RollupMark.__table__))
        conn.execute(insert(RollupMark.__table__).values(name=rollups.MARK, through=through))


def _shift(conn, job_id: int, age: timedelta, events: tuple[str, ...] | None = None) -> None:
    """Move a job's times (and its events' times) ``age`` into the past."""
    columns = ("created_at", "run_at", "claimed_at", "completed_at", "updated_at", "heartbeat_at")
    row = conn.execute(jobs_t.select().where(jobs_t.c.id == job_id)).one()
    conn.execute(
        update(jobs_t)
        .where(jobs_t.c.id == job_id)
        .values(**{c: getattr(row, c) - age for c in columns if getattr(row, c) is not None})
    )
    query = events_t.select().where(events_t.c.job_id == job_id)
    if events:
        query = query.where(events_t.c.event.in_(events))
    for event in conn.execute(query).all():
        conn.execute(update(events_t).where(events_t.c.id == event.id).values(at=event.at - age))


def _retype(row, job_type: str):
    """Give a seeded job the type a scene needs (the payload follows)."""
    with write_transaction() as conn:
        return conn.execute(
            update(jobs_t)
            .where(jobs_t.c.id == row.id)
            .values(type=job_type, payload=json.dumps(payload_for(job_type, row.id)))
            .returning(*jobs_t.c)
        ).one()


def _claim_exact(worker, row):
    """Claim exactly this job for this worker (the claim takes the best due job, so move it to the front)."""
    with write_transaction() as conn:
        conn.execute(update(jobs_t).where(jobs_t.c.id == row.id).values(priority=1000))
    claimed = queue.claim(worker, types=[row.type], limit=1)
    with write_transaction() as conn:
        conn.execute(update(jobs_t).where(jobs_t.c.id == row.id).values(priority=row.priority))
    assert claimed and claimed[0].id == row.id, (row.id, claimed)
    return claimed


def _gallery(page, url: str, folder: Path) -> None:
    """Capture the other pages, to review them the way the dashboard is reviewed."""
    folder.mkdir(parents=True, exist_ok=True)
    page.goto(url + "/admin")
    quarantined = page.locator(".failures li:has(.badge.quarantined) a.job-link").first.get_attribute("href")
    for name, path in (
        ("jobs", "/admin/jobs?status=failed"),
        ("job", quarantined),
        ("workers", "/admin/workers"),
        ("keys", "/admin/keys"),
    ):
        page.goto(url + path)
        page.screenshot(path=str(folder / f"{name}.png"), full_page=True)
    page.click("button:has-text('Sign out')")
    page.screenshot(path=str(folder / "login.png"))


@contextlib.contextmanager
def seeded_server(also=None):
    """A gunicorn serving the busy night ``seed`` writes, in a temporary directory (instance/ is never touched).

    ``also``: a function that seeds more, called in the app's context after ``seed``.
    """
    from tests.support.server import running_server

    with tempfile.TemporaryDirectory(prefix="queuelog-shot-") as tmp:
        url = f"sqlite:///{tmp}/queuelog.db"
        env = {
            "QUEUELOG_DATABASE_URL": url,
            "QUEUELOG_SECRET_KEY": "screenshot-only",
            "QUEUELOG_JOB_TYPES": ",".join(JOB_TYPES),
            "QUEUELOG_SQLITE_SYNCHRONOUS": "NORMAL",
            "QUEUELOG_UI_REFRESH_SECONDS": "30",
        }
        app = create_app(
            {
                "DATABASE_URL": url,
                "SECRET_KEY": "screenshot-only",
                "JOB_TYPES": JOB_TYPES,
                "SQLITE_SYNCHRONOUS": "NORMAL",
                "RETRY_BACKOFF_BASE": 0,
            }
        )
        with app.app_context():
            seed(app, random.Random(7))
            if also is not None:
                also()
        with running_server(env, workers=2) as server:
            yield server


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "dashboard.png"))
    parser.add_argument("--page", default="/admin", help="page to capture after signing in")
    parser.add_argument("--light", action="store_true", help="capture the light colour scheme")
    parser.add_argument(
        "--gallery",
        metavar="DIR",
        help="also capture the jobs, job, workers, keys and sign-in pages into DIR (for review)",
    )
    args = parser.parse_args(argv)

    from playwright.sync_api import sync_playwright

    from tests.support.browser import launch_chromium

    with seeded_server() as server, sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            page = browser.new_page(
                viewport={"width": 1360, "height": 900},
                device_scale_factor=1,
                color_scheme="light" if args.light else "dark",
            )
            page.goto(server.url + "/admin/login?next=" + args.page)
            page.fill("input[name=username]", ADMIN)
            page.fill("input[name=password]", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_url(server.url + args.page)
            page.goto(server.url + args.page)  # once more, without the "signed in" message
            out = Path(args.out)
            out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out), full_page=True)
            if args.gallery:
                _gallery(page, server.url, Path(args.gallery))
        finally:
            browser.close()
    print(f"saved {out} ({out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
