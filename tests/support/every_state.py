"""A queue with a job in every state the pages show, served by gunicorn, for the page-wide browser checks.

The accessibility and phone-width tests look at every page with every kind of job on it; building that
queue for each test would cost more than the checks. ``serving_every_state`` builds it once, through the
queue's own operations (enqueue, claim, complete, fail, cancel, reap), and serves it for a whole module.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import update

from queuelog import create_app, queue, schedules
from queuelog.auth import keys, users
from queuelog.core.clock import utcnow
from queuelog.database.transactions import write_transaction
from queuelog.extensions import db
from queuelog.models import Job, Priority, UserRole, WorkerProcess
from queuelog.queue import NewJob, flow, worker_processes
from tests.support.database import _wipe_postgres as wipe_postgres
from tests.support.database import app_config, test_db_kind
from tests.support.live_site import ADMIN_NAME, ADMIN_PASSWORD, BROWSER_SERVER_ARGS, server_env
from tests.support.server import ServerProcess, running_server

VIEWER_NAME = "looker"
VIEWER_PASSWORD = "only looking, never touching"
MAX_STALLS = 3
jobs = Job.__table__


@dataclass
class EveryState:
    """The running server and the id of the job seeded for each state (``jobs["quarantined"]``)."""

    server: ServerProcess
    jobs: dict[str, int] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.server.url


def _expire_lease(job_id: int, stall_count: int | None = None) -> None:
    """Let a running job's lease run out (its worker died), as the reaper will find it."""
    expired = utcnow() - timedelta(minutes=5)
    values = {"lease_expires_at": expired, "heartbeat_at": expired - timedelta(minutes=1)}
    if stall_count is not None:
        values["stall_count"] = stall_count
    with write_transaction() as conn:
        conn.execute(update(jobs).where(jobs.c.id == job_id).values(**values))


def _back_off(job_id: int) -> None:
    """Make a retry wait out a backoff (the served app has none, so the other claims stay predictable)."""
    with write_transaction() as conn:
        conn.execute(update(jobs).where(jobs.c.id == job_id).values(run_at=utcnow() + timedelta(minutes=30)))


def _beat_at(process_id: int, at) -> None:
    """Set a process's last beat: in the past, it is gone; ahead, it stays online for the module's whole run."""
    with write_transaction() as conn:
        table = WorkerProcess.__table__
        conn.execute(update(table).where(table.c.id == process_id).values(heartbeat_at=at))


def _seed_processes(worker) -> int:
    """Worker processes of every kind: one running (returned: the claims below name it), one told to quiet,
    one gone, and one of a revoked key (never listed)."""

    def process(caller, host: str, pid: int) -> int:
        return worker_processes.register(
            caller,
            worker_processes.NewProcess(
                host=host, pid=pid, version="queuelog-worker 0.1.0", concurrency=4, types=("email",)
            ),
        ).id

    running = process(worker, "mail-box-1", 3141)
    _beat_at(running, utcnow() + timedelta(hours=1))
    quiet = process(worker, "mail-box-2", 2718)
    _beat_at(quiet, utcnow() + timedelta(hours=1))
    worker_processes.give_command(quiet, worker_processes.Command.QUIET, f"admin:{ADMIN_NAME}")
    _beat_at(process(worker, "mail-box-3", 1414), utcnow() + timedelta(hours=1))  # one left to quiet in a test
    _beat_at(process(worker, "mail-box-0", 1618), utcnow() - timedelta(minutes=10))
    retired = keys.authenticate(keys.create_key("old-mailer", "worker"))
    process(retired, "old-box", 99)
    keys.revoke_key("old-mailer")
    return running


def seed_every_state() -> dict[str, int]:
    """Jobs in every state and every way of failing, keys of every role (one revoked), an admin and a viewer,
    a paused type (report) and a type with every limit and a history of changes (email), worker processes
    (running, quiet, gone).

    Each job is enqueued and moved on before the next one is enqueued, so a claim always takes the job
    just enqueued. Returns the job ids by name.
    """
    users.create_user(ADMIN_NAME, ADMIN_PASSWORD)
    users.create_user(VIEWER_NAME, VIEWER_PASSWORD, UserRole.VIEWER.value)
    producer = keys.authenticate(keys.create_key("storefront", "producer", "critical"))
    worker = keys.authenticate(keys.create_key("mailer-1", "worker", types=["email", "report"]))
    keys.create_key("ops-cli", "admin")
    keys.create_key("legacy-cron", "producer")
    keys.revoke_key("legacy-cron")
    process_id = _seed_processes(worker)
    seeded: dict[str, int] = {}

    def new(name: str, **fields) -> int:
        fields.setdefault("priority", int(Priority.MEDIUM))
        row = queue.enqueue(producer, [NewJob(type="email", payload={"to": f"{name}@example.org"}, **fields)])[0].job
        seeded[name] = row.id
        return row.id

    def claimed(name: str, **fields):
        job_id = new(name, **fields)
        (row,) = queue.claim(worker, types=["email"], process=process_id)
        assert row.id == job_id, (name, row.id, job_id)
        return row

    row = claimed("completed")
    queue.complete(worker, row.id, row.claim_token, {"sent_to": "completed@example.org"})
    row = claimed("not-retryable")
    queue.fail(worker, row.id, row.claim_token, "SMTPRecipientsRefused: 550 mailbox unavailable", retryable=False)
    row = claimed("retries-spent", max_retries=0)
    queue.fail(worker, row.id, row.claim_token, "TimeoutError: SMTP server did not answer in 30 s")
    row = claimed("timed-out", max_retries=0)
    _expire_lease(row.id)
    queue.reap()
    row = claimed("quarantined")
    _expire_lease(row.id, stall_count=MAX_STALLS - 1)
    queue.reap()
    row = claimed("running", priority=int(Priority.CRITICAL))
    queue.heartbeat(
        worker, row.id, row.claim_token, progress={"percent": 40, "stage": "rendering", "frames": {"done": 4, "of": 10}}
    )
    row = claimed("stalled", priority=int(Priority.HIGH))
    _expire_lease(row.id)
    queue.cancel(new("cancelled"), "key:storefront")
    new("scheduled", run_at=utcnow() + timedelta(hours=2))
    row = claimed("backing-off")
    queue.fail(worker, row.id, row.claim_token, "ConnectionResetError: try again later", retryable=True)
    _back_off(row.id)
    row = claimed("requeued")
    queue.fail(worker, row.id, row.claim_token, "ConnectionResetError: try again", retryable=True)
    new("pending", priority=int(Priority.LOW), concurrency_key="tenant-42")
    # A workflow's child: it waits for the running job, after the completed one.
    new("waiting", depends_on=(seeded["completed"], seeded["running"]))
    # Schedules: one ticking at 03:00 Berlin time with a job it enqueued, one paused.
    schedules.create_schedule(
        {
            "name": "nightly-report",
            "cron": "0 3 * * *",
            "timezone": "Europe/Berlin",
            "job": {"type": "report", "payload": {"kind": "daily"}, "priority": "high"},
        }
    )
    schedules.create_schedule({"name": "cache-warmer", "every_seconds": 300, "paused": True, "job": {"type": "noop"}})
    seeded["from-schedule"] = schedules.run_now("nightly-report", "admin:" + ADMIN_NAME).id
    # Flow control last: the claims above must not wait on it.
    admin = f"admin:{ADMIN_NAME}"
    flow.update_type("email", {"concurrency_limit": 3}, admin)
    flow.update_type(
        "email",
        {"concurrency_limit": 5, "rate_limit": flow.RateLimit(20, 2), "key_concurrency_limit": 2},
        "key:ops-cli",
    )
    flow.update_type("report", {"paused": True}, admin)
    return seeded


@contextlib.contextmanager
def serving_every_state(database_url: str, refresh_seconds: int = 600) -> Iterator[EveryState]:
    """Seed ``database_url`` (empty) with ``seed_every_state`` and serve it with one threaded gunicorn worker.

    The pages refresh themselves every ``refresh_seconds``: by default too seldom to swap content in
    while a test looks at a page.
    """
    app = create_app(app_config(database_url, MAX_STALLS=MAX_STALLS))
    with app.app_context():
        try:
            seeded = seed_every_state()
        finally:
            db.session.remove()
            db.engine.dispose()
    env = {
        **server_env(database_url),
        "QUEUELOG_MAX_STALLS": str(MAX_STALLS),
        "QUEUELOG_UI_REFRESH_SECONDS": str(refresh_seconds),
    }
    with running_server(env, workers=1, extra_args=BROWSER_SERVER_ARGS) as server:
        yield EveryState(server, seeded)


def fresh_database_url(request, tmp_path_factory) -> str:
    """An empty database for a module: a new SQLite file, or the test PostgreSQL server wiped."""
    if test_db_kind() == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('every-state') / 'queuelog.db'}"
    url = request.getfixturevalue("postgres_server_url")
    wipe_postgres(url)
    return url
