"""The ticker thread: started by server processes only (gunicorn workers, flask run), never by other
commands or by building the app; once started it enqueues each tick's job within a second."""

from __future__ import annotations

import threading
import time

import click
from sqlalchemy import func, select

from queuelog.extensions import db
from queuelog.models import Job
from queuelog.schedules import ticker
from tests.worker_apps.harness import wait_until


def tickers() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == ticker.THREAD_NAME]


def scheduled_jobs() -> int:
    with db.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(Job).where(Job.schedule.is_not(None))).scalar_one()


def test_building_the_app_and_running_a_command_start_no_ticker(app, runner):
    before = len(tickers())
    assert runner.invoke(args=["schedules", "list"]).exit_code == 0
    assert len(tickers()) == before


def test_flask_run_starts_the_ticker_and_other_commands_do_not(app, monkeypatch):
    started = []
    monkeypatch.setattr(ticker, "start", started.append)
    with click.Context(click.Command("schedules"), info_name="schedules"):
        ticker.start_if_serving(app)
    assert started == []
    with click.Context(click.Command("run"), info_name="run"):
        ticker.start_if_serving(app)
    assert started == [app]


def test_scheduler_off_starts_no_ticker(app, monkeypatch):
    monkeypatch.setitem(app.config, "SCHEDULER", False)
    assert ticker.start(app) is None


def test_a_started_ticker_enqueues_each_tick_once_per_process(app, client, admin):
    response = client.post(
        "/schedules", headers=admin, json={"name": "every-second", "every_seconds": 1, "job": {"type": "noop"}}
    )
    assert response.status_code == 201
    stop = ticker.start(app)
    try:
        assert ticker.start(app) is None  # one ticker per app per process
        # Polled, not slept: beside the parallel tests the ticker's thread may be late. How late a tick may
        # be is measured alone, in tests/acceptance/races/test_schedules_processes.py (a serial test).
        wait_until(lambda: scheduled_jobs() >= 2, 15)
    finally:
        stop.set()
        time.sleep(ticker.TICK_SECONDS * 2)
        ticker._started.pop(id(app), None)
    with db.engine.connect() as conn:
        ticks = conn.execute(select(Job.scheduled_for).where(Job.schedule == "every-second")).scalars().all()
    assert len(ticks) == len(set(ticks)), "a tick was enqueued twice"
