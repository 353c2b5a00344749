"""A schedule's ticks: exactly one job per tick, marked with its schedule and tick; one catch-up job after
downtime (or none); paused schedules do not tick; cron in a timezone across the DST days of Europe/Berlin."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import select, update

from queuelog import schedules
from queuelog.extensions import db
from queuelog.models import Job, Schedule
from queuelog.schedules.timing import Timing
from tests.support.factories import when

BERLIN = ZoneInfo("Europe/Berlin")


def create(client, admin, **body):
    response = client.post("/schedules", json=body, headers=admin)
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def set_next_run(name: str, at: datetime) -> None:
    with db.engine.begin() as conn:
        conn.execute(update(Schedule.__table__).where(Schedule.__table__.c.name == name).values(next_run_at=at))


def scheduled_jobs(name: str) -> list:
    with db.engine.connect() as conn:
        return conn.execute(
            select(Job.__table__).where(Job.__table__.c.schedule == name).order_by(Job.__table__.c.id)
        ).all()


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# --- firing ---------------------------------------------------------------------------------------


def test_a_due_tick_enqueues_one_job_marked_with_the_schedule_and_the_tick(client, admin):
    create(client, admin, name="nightly-report", every_seconds=60, job={"type": "report", "payload": {"n": 1}})
    set_next_run("nightly-report", at("2030-01-01T10:00:00"))
    assert schedules.fire_due(at("2030-01-01T10:00:00.300")) == 1
    [job] = scheduled_jobs("nightly-report")
    assert job.type == "report" and job.status == "pending" and job.payload == '{"n":1}'
    assert job.scheduled_for == at("2030-01-01T10:00:00")
    state = schedules.get_schedule("nightly-report")
    assert state.next_run_at == at("2030-01-01T10:01:00")
    assert state.last_run_at == at("2030-01-01T10:00:00") and state.last_job_id == job.id


def test_the_job_shows_its_schedule_and_tick_on_the_api_and_in_the_claim(client, admin, claim):
    create(client, admin, name="nightly-report", every_seconds=60, job={"type": "report"})
    set_next_run("nightly-report", at("2020-01-01T10:00:00"))
    schedules.fire_due(at("2020-01-01T10:00:00.100"))
    [job] = scheduled_jobs("nightly-report")
    shown = client.get(f"/jobs/{job.id}", headers=admin).get_json()
    assert shown["schedule"] == "nightly-report" and shown["scheduled_for"] == "2020-01-01T10:00:00.000000Z"
    claimed = claim(types=["report"])
    assert claimed["id"] == job.id and claimed["schedule"] == "nightly-report"
    assert claimed["scheduled_for"] == "2020-01-01T10:00:00.000000Z"
    events = client.get(f"/jobs/{job.id}/events", headers=admin).get_json()["events"]
    assert events[0]["event"] == "enqueued" and events[0]["actor"] == "schedule:nightly-report"


def test_a_tick_not_yet_due_enqueues_nothing(client, admin):
    create(client, admin, name="later", every_seconds=60, job={"type": "noop"})
    set_next_run("later", at("2030-01-01T10:00:00"))
    assert schedules.fire_due(at("2030-01-01T09:59:59.900")) == 0
    assert scheduled_jobs("later") == []


def test_firing_the_same_tick_again_enqueues_nothing(client, admin):
    create(client, admin, name="once", every_seconds=60, job={"type": "noop"})
    set_next_run("once", at("2030-01-01T10:00:00"))
    state = schedules.get_schedule("once")
    now = at("2030-01-01T10:00:00.200")
    assert schedules.firing.fire(state, now) is True
    assert schedules.firing.fire(state, now) is False  # a second process with the same stale read
    assert len(scheduled_jobs("once")) == 1


def test_many_threads_firing_one_tick_enqueue_one_job(app, client, admin):
    create(client, admin, name="contended", every_seconds=60, job={"type": "noop"})
    set_next_run("contended", at("2030-01-01T10:00:00"))
    state = schedules.get_schedule("contended")
    barrier, results = threading.Barrier(8), []

    def fire():
        with app.app_context():
            barrier.wait()
            results.append(schedules.firing.fire(state, at("2030-01-01T10:00:00.100")))

    threads = [threading.Thread(target=fire) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [False] * 7 + [True]
    assert len(scheduled_jobs("contended")) == 1


def test_a_second_job_for_one_tick_is_refused_by_the_unique_index(client, admin, make_job):
    make_job(type="noop", schedule="belt", scheduled_for=at("2030-01-01T10:00:00"))
    with pytest.raises(Exception, match="(?i)unique"):
        make_job(type="noop", schedule="belt", scheduled_for=at("2030-01-01T10:00:00"))


def test_a_paused_schedule_does_not_tick(client, admin):
    create(client, admin, name="resting", every_seconds=1, job={"type": "noop"}, paused=True)
    set_next_run("resting", at("2020-01-01T10:00:00"))
    assert schedules.fire_due(at("2030-01-01T10:00:00")) == 0
    assert scheduled_jobs("resting") == []


# --- after downtime -----------------------------------------------------------------------------------


def test_after_downtime_catch_up_one_enqueues_one_job_for_the_latest_missed_tick(client, admin):
    create(client, admin, name="minutely", every_seconds=60, job={"type": "noop"})
    set_next_run("minutely", at("2030-01-01T10:00:00"))
    assert schedules.fire_due(at("2030-01-01T13:30:20")) == 1  # 3 h 30 min of ticks missed
    [job] = scheduled_jobs("minutely")
    assert job.scheduled_for == at("2030-01-01T13:30:00")
    assert schedules.get_schedule("minutely").next_run_at == at("2030-01-01T13:31:00")
    assert schedules.fire_due(at("2030-01-01T13:30:40")) == 0


def test_after_downtime_catch_up_none_skips_the_missed_ticks(client, admin):
    create(client, admin, name="minutely", every_seconds=60, job={"type": "noop"}, catch_up="none")
    set_next_run("minutely", at("2030-01-01T10:00:00"))
    assert schedules.fire_due(at("2030-01-01T13:30:45")) == 0
    assert scheduled_jobs("minutely") == []
    assert schedules.get_schedule("minutely").next_run_at == at("2030-01-01T13:31:00")
    assert schedules.fire_due(at("2030-01-01T13:31:00.250")) == 1  # on time again


def test_a_cron_schedule_catches_up_its_latest_missed_tick_only(client, admin):
    create(client, admin, name="every-5s", cron="*/5 * * * * *", timezone="Europe/Berlin", job={"type": "noop"})
    set_next_run("every-5s", at("2030-01-01T10:00:00"))
    assert schedules.fire_due(at("2030-01-03T10:00:07")) == 1  # two days of 5-second ticks missed
    [job] = scheduled_jobs("every-5s")
    assert job.scheduled_for == at("2030-01-03T10:00:05")
    assert schedules.get_schedule("every-5s").next_run_at == at("2030-01-03T10:00:10")


# --- DST days of Europe/Berlin -------------------------------------------------------------------------


def local_ticks(timing: Timing, day: str) -> list[datetime]:
    """Every tick of ``timing`` whose Berlin wall-clock date is ``day``, in Berlin time."""
    start = datetime.fromisoformat(day).replace(tzinfo=BERLIN) - timedelta(hours=6)
    moment, ticks = start, []
    while moment < start + timedelta(hours=36):
        moment = timing.next_after(moment)
        local = moment.astimezone(BERLIN)
        if local.date().isoformat() == day:
            ticks.append(local)
    return ticks


def test_a_0230_job_runs_once_on_the_spring_forward_day_just_after_the_gap():
    ticks = local_ticks(Timing("30 2 * * *", None, "Europe/Berlin"), "2026-03-29")
    assert [tick.astimezone(UTC) for tick in ticks] == [at("2026-03-29T01:00:00")]  # 03:00 CEST


def test_a_0230_job_runs_once_on_the_fall_back_day():
    ticks = local_ticks(Timing("30 2 * * *", None, "Europe/Berlin"), "2026-10-25")
    assert [tick.astimezone(UTC) for tick in ticks] == [at("2026-10-25T00:30:00")]  # 02:30 CEST, not CET too


def test_a_0230_job_runs_at_0230_local_on_the_days_around_the_changes():
    timing = Timing("30 2 * * *", None, "Europe/Berlin")
    for day in ("2026-03-28", "2026-03-30", "2026-10-24", "2026-10-26"):
        [tick] = local_ticks(timing, day)
        assert (tick.hour, tick.minute) == (2, 30), day


def test_six_fields_with_seconds_0_run_once_on_both_dst_days_like_five():
    timing = Timing("0 30 2 * * *", None, "Europe/Berlin")
    assert [tick.astimezone(UTC) for tick in local_ticks(timing, "2026-03-29")] == [at("2026-03-29T01:00:00")]
    assert [tick.astimezone(UTC) for tick in local_ticks(timing, "2026-10-25")] == [at("2026-10-25T00:30:00")]


def test_an_hourly_job_follows_the_real_hours_of_the_dst_days():
    timing = Timing("@hourly", None, "Europe/Berlin")
    assert len(local_ticks(timing, "2026-03-29")) == 23
    assert len(local_ticks(timing, "2026-10-25")) == 25


def test_firing_through_the_spring_forward_night_enqueues_one_job(client, admin):
    create(client, admin, name="0230", cron="30 2 * * *", timezone="Europe/Berlin", job={"type": "noop"})
    set_next_run("0230", schedules.get_schedule("0230").spec.timing.next_after(at("2026-03-28T12:00:00")))
    moment = at("2026-03-28T12:00:00")
    while moment < at("2026-03-29T12:00:00"):
        schedules.fire_due(moment)
        moment += timedelta(minutes=10)
    [job] = scheduled_jobs("0230")
    assert job.scheduled_for == at("2026-03-29T01:00:00")


def test_firing_through_the_fall_back_night_enqueues_one_job(client, admin):
    create(client, admin, name="0230", cron="30 2 * * *", timezone="Europe/Berlin", job={"type": "noop"})
    set_next_run("0230", schedules.get_schedule("0230").spec.timing.next_after(at("2026-10-24T12:00:00")))
    moment = at("2026-10-24T12:00:00")
    while moment < at("2026-10-25T12:00:00"):
        schedules.fire_due(moment)
        moment += timedelta(minutes=10)
    [job] = scheduled_jobs("0230")
    assert job.scheduled_for == at("2026-10-25T00:30:00")
    assert when(client.get("/schedules/0230", headers=admin).get_json()["next_run_at"]) == at("2026-10-26T01:30:00")


def test_a_tick_whose_job_type_left_the_allowlist_moves_on_without_a_job(app, client, admin):
    create(client, admin, name="orphan", every_seconds=60, job={"type": "noop"})
    set_next_run("orphan", at("2030-01-01T10:00:00"))
    app.config["JOB_TYPES"] = [name for name in app.config["JOB_TYPES"] if name != "noop"]
    assert schedules.fire_due(at("2030-01-01T10:00:00.100")) == 0
    assert scheduled_jobs("orphan") == []
    assert schedules.get_schedule("orphan").next_run_at == at("2030-01-01T10:01:00")


def test_resuming_does_not_replay_the_ticks_missed_while_paused(client, admin):
    create(client, admin, name="daily", every_seconds=86_400, job={"type": "noop"})
    client.patch("/schedules/daily", headers=admin, json={"paused": True})
    set_next_run("daily", at("2020-01-01T10:00:00"))  # a tick long gone, as after a long pause
    assert schedules.fire_due() == 0  # paused: nothing
    client.patch("/schedules/daily", headers=admin, json={"paused": False})
    assert schedules.fire_due() == 0  # resumed: the next tick is after now
    assert scheduled_jobs("daily") == []
