"""The proof: an every-second schedule served by 4 server processes on 2 app servers (two gunicorns, two
workers each, one database) enqueues exactly one job per tick, each within a second of its tick, and a
server killed outright (SIGKILL) and restarted mid-run changes nothing."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from datetime import timedelta

import pytest
from sqlalchemy import select

from queuelog.core.clock import utcnow
from queuelog.extensions import db
from queuelog.models import Job
from tests.support.api import bearer
from tests.support.database import JOB_TYPES
from tests.support.server import running_server

pytestmark = pytest.mark.serial  # measures time: scripts/test runs it alone (pyproject markers)

RUN_SECONDS = 20


def start_together(stack: ExitStack, envs: list[dict]) -> list:
    """Start one gunicorn (2 workers) per environment at the same time, each stopped when ``stack`` closes."""
    managers = [running_server(env, workers=2) for env in envs]
    with ThreadPoolExecutor(len(managers)) as pool:
        futures = [pool.submit(manager.__enter__) for manager in managers]
    for manager, future in zip(managers, futures, strict=True):
        if future.exception() is None:
            stack.push(manager)  # its __exit__ stops it, whatever happens to the others
    return [future.result() for future in futures]


def crash_and_restart(server) -> None:
    """SIGKILL the server (master and workers at once) 40% into the run; start it again on its port 10% later."""
    time.sleep(RUN_SECONDS * 0.4)
    server.kill()
    time.sleep(RUN_SECONDS * 0.1)
    server.start()


def test_an_every_second_schedule_on_two_app_servers_enqueues_one_job_per_tick(
    app, client, database_url, make_key, tmp_path
):
    admin = bearer(make_key("admin"))
    response = client.post(
        "/schedules",
        headers=admin,
        json={"name": "every-second", "every_seconds": 1, "job": {"type": "noop"}, "paused": True},
    )
    assert response.status_code == 201, response.get_json()

    def env(name):
        return {
            "QUEUELOG_DATABASE_URL": database_url,
            "QUEUELOG_JOB_TYPES": json.dumps(JOB_TYPES),
            "QUEUELOG_SECRET_KEY": "test-secret-key",
            "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / name),
        }

    with ExitStack() as servers:
        first, _second = start_together(servers, [env("first"), env("second")])
        # Resuming starts the ticks from now: the first is the next whole second.
        resumed = client.patch("/schedules/every-second", headers=admin, json={"paused": False})
        assert resumed.status_code == 200
        started = utcnow()
        # The crash and the restart happen beside the clock, so a slow restart cannot stretch the run.
        with ThreadPoolExecutor(1) as crash:
            crashed = crash.submit(crash_and_restart, first)
            time.sleep(RUN_SECONDS)
            client.patch("/schedules/every-second", headers=admin, json={"paused": True})
            stopped = utcnow()
            crashed.result()
        time.sleep(0.5)  # a tick fired just before the pause commits its job

    with db.engine.connect() as conn:
        jobs = conn.execute(select(Job.__table__).where(Job.__table__.c.schedule == "every-second")).all()
    ticks = sorted(job.scheduled_for for job in jobs)
    assert len(ticks) == len(set(ticks)), "two jobs for one tick"
    assert 19 <= len(ticks) <= 21, (len(ticks), started, stopped)
    gaps = [later - earlier for earlier, later in zip(ticks, ticks[1:], strict=False)]
    assert all(gap == timedelta(seconds=1) for gap in gaps), f"a tick was skipped: {ticks}"
    lateness = max((job.created_at - job.scheduled_for).total_seconds() for job in jobs)
    print(
        f"\n{len(ticks)} jobs for {(stopped - started).total_seconds():.1f} s; latest enqueue "
        f"{lateness * 1000:.0f} ms after its tick"
    )
    assert lateness < 1.0
