"""The /schedules routes as the contract states them: every route, status, 422 pointer and 409."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from queuelog.core.clock import utcnow
from tests.support.factories import assert_problem, pointers, when

NIGHTLY = {
    "name": "nightly-report",
    "cron": "0 3 * * *",
    "timezone": "Europe/Berlin",
    "job": {"type": "report", "payload": {"kind": "daily"}, "priority": "high", "max_retries": 5},
}


def create(client, admin, **body):
    response = client.post("/schedules", json=body, headers=admin)
    assert response.status_code == 201, response.get_json()
    return response.get_json()


# --- POST /schedules ------------------------------------------------------------------------------


def test_creating_a_cron_schedule_answers_201_with_its_next_run_in_utc(client, admin):
    body = create(client, admin, **NIGHTLY)
    assert body["name"] == "nightly-report"
    assert body["cron"] == "0 3 * * *" and body["every_seconds"] is None
    assert body["timezone"] == "Europe/Berlin"
    assert body["job"] == {"type": "report", "payload": {"kind": "daily"}, "priority": "high", "max_retries": 5}
    assert body["paused"] is False and body["catch_up"] == "one"
    assert body["next_run_at"].endswith("Z")
    next_run = when(body["next_run_at"])
    assert utcnow() < next_run <= utcnow() + timedelta(days=1)
    assert next_run.astimezone(ZoneInfo("Europe/Berlin")).hour == 3
    assert body["last_run_at"] is None and body["last_job_id"] is None


def test_an_interval_schedule_ticks_on_the_next_whole_interval(client, admin):
    # Read before the request: read after, the clock may already be past a minute the server saw coming.
    created_at = utcnow()
    body = create(client, admin, name="every-minute", every_seconds=60, job={"type": "noop"})
    assert body["cron"] is None and body["every_seconds"] == 60 and body["timezone"] == "UTC"
    assert body["job"] == {"type": "noop", "payload": {}, "priority": "low", "max_retries": 3}
    next_run = when(body["next_run_at"])
    assert next_run.second == 0 and next_run.microsecond == 0
    assert created_at < next_run <= utcnow() + timedelta(seconds=60)


@pytest.mark.parametrize(
    "cron",
    [
        "*/15 * * * *",
        "30 */5 * * * *",
        "@hourly",
        "@daily",
        "@weekly",
        "@monthly",
        "@yearly",
        "@annually",
        "@midnight",
        "0 9 * * MON-FRI",
    ],
)
def test_five_or_six_fields_and_the_aliases_are_taken(client, admin, cron):
    body = create(client, admin, name="s", cron=cron, job={"type": "noop"})
    assert body["cron"] == cron
    assert when(body["next_run_at"]) > utcnow()


def test_six_fields_read_the_seconds_first(client, admin):
    body = create(client, admin, name="at-seconds-30", cron="30 * * * * *", job={"type": "noop"})
    assert when(body["next_run_at"]).second == 30


@pytest.mark.parametrize(
    ("body", "pointer"),
    [
        ({**NIGHTLY, "cron": "61 * * * *"}, "/cron"),
        ({**NIGHTLY, "cron": "* * * *"}, "/cron"),
        ({**NIGHTLY, "cron": "* * * * * * *"}, "/cron"),
        ({**NIGHTLY, "cron": "@fortnightly"}, "/cron"),
        ({**NIGHTLY, "cron": 5}, "/cron"),
        ({**NIGHTLY, "timezone": "Mars/Olympus_Mons"}, "/timezone"),
        ({**NIGHTLY, "timezone": "../../etc/passwd"}, "/timezone"),
        ({**NIGHTLY, "job": {**NIGHTLY["job"], "type": "not-a-type"}}, "/job/type"),
        ({**NIGHTLY, "job": {**NIGHTLY["job"], "priority": "urgent"}}, "/job/priority"),
        ({**NIGHTLY, "job": {**NIGHTLY["job"], "max_retries": 101}}, "/job/max_retries"),
        ({**NIGHTLY, "job": {**NIGHTLY["job"], "payload": [1]}}, "/job/payload"),
        ({**NIGHTLY, "job": {**NIGHTLY["job"], "status": "completed"}}, "/job/status"),
        ({**NIGHTLY, "job": None}, "/job"),
        ({**NIGHTLY, "name": ""}, "/name"),
        ({**NIGHTLY, "name": "has space"}, "/name"),
        ({**NIGHTLY, "name": "x" * 101}, "/name"),
        ({**NIGHTLY, "paused": "yes"}, "/paused"),
        ({**NIGHTLY, "catch_up": "all"}, "/catch_up"),
        ({**NIGHTLY, "every_seconds": 60}, "/cron"),
        ({key: value for key, value in NIGHTLY.items() if key != "cron"}, "/cron"),
        ({**{key: value for key, value in NIGHTLY.items() if key != "cron"}, "every_seconds": 0}, "/every_seconds"),
        (
            {**{key: value for key, value in NIGHTLY.items() if key != "cron"}, "every_seconds": 86_401},
            "/every_seconds",
        ),
        ({**{key: value for key, value in NIGHTLY.items() if key != "cron"}, "every_seconds": 1.5}, "/every_seconds"),
        ({**NIGHTLY, "owner": "me"}, "/owner"),
    ],
)
def test_a_bad_field_is_a_422_pointing_at_it(client, admin, body, pointer):
    response = client.post("/schedules", json=body, headers=admin)
    assert pointer in pointers(response)
    assert client.get("/schedules", headers=admin).get_json() == {"schedules": [], "next_cursor": None}


@pytest.mark.parametrize(
    "timezone",
    ["localtime", "posixrules", "Factory", "right/UTC", "posix/Europe/Berlin", "posix/UTC", "europe/berlin", " UTC"],
)
def test_a_timezone_whose_meaning_depends_on_the_host_is_a_422_pointing_at_timezone(client, admin, timezone):
    response = client.post("/schedules", json={**NIGHTLY, "timezone": timezone}, headers=admin)
    body = assert_problem(response, 422)
    assert pointers(response) == {"/timezone"}
    assert repr(timezone) in body["detail"]
    assert client.get("/schedules", headers=admin).get_json()["schedules"] == []


def test_a_host_tree_copy_of_a_zone_is_answered_with_the_zone_to_use(client, admin):
    response = client.post("/schedules", json={**NIGHTLY, "timezone": "right/UTC"}, headers=admin)
    assert "use 'UTC'" in assert_problem(response, 422)["detail"]


@pytest.mark.parametrize(
    "timezone",
    ["UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "Asia/Kolkata", "Etc/GMT-14", "America/Ciudad_Juarez"],
)
def test_canonical_iana_zone_names_are_taken(client, admin, timezone):
    assert create(client, admin, **{**NIGHTLY, "timezone": timezone})["timezone"] == timezone


def test_the_zones_taken_are_the_tzdata_packages_less_the_host_names_whatever_the_host_has():
    from importlib import resources

    from queuelog.schedules import timing

    listed = set(resources.files("tzdata").joinpath("zones").read_text().split())
    taken = timing.zone_names()
    assert taken == {
        name
        for name in listed
        if name not in {"localtime", "posixrules", "Factory"} and not name.startswith(("posix/", "right/"))
    }
    assert "Europe/Berlin" in taken and "UTC" in taken and "Factory" not in taken


def test_a_schedule_stored_with_a_host_timezone_keeps_it_until_the_timezone_is_changed(client, admin):
    from sqlalchemy import update

    from queuelog.extensions import db
    from queuelog.models import Schedule

    create(client, admin, **NIGHTLY)
    with db.engine.begin() as conn:  # as stored before the check was strict
        conn.execute(update(Schedule).values(timezone="Factory"))
    paused = client.patch("/schedules/nightly-report", json={"paused": True}, headers=admin)
    assert (paused.status_code, paused.get_json()["timezone"]) == (200, "Factory")
    kept = client.patch("/schedules/nightly-report", json={"timezone": "Factory", "paused": False}, headers=admin)
    assert kept.status_code == 200
    changed = client.patch("/schedules/nightly-report", json={"timezone": "localtime"}, headers=admin)
    assert pointers(changed) == {"/timezone"}


def test_names_take_letters_digits_and_dot_colon_dash_underscore_up_to_100(client, admin):
    for name in ("a", "billing:monthly.v2_x-y", "x" * 100):
        create(client, admin, **{**NIGHTLY, "name": name})


def test_a_name_in_use_is_a_409(client, admin):
    create(client, admin, **NIGHTLY)
    response = client.post("/schedules", json=NIGHTLY, headers=admin)
    assert assert_problem(response, 409)["detail"] == "a schedule named 'nightly-report' already exists"


@pytest.mark.parametrize("role", ["producer", "worker"])
def test_only_admin_keys_manage_schedules(client, make_key, role):
    from tests.support.api import bearer

    headers = bearer(make_key(role))
    assert_problem(client.post("/schedules", json=NIGHTLY, headers=headers), 403)
    assert_problem(client.get("/schedules", headers=headers), 403)
    assert_problem(client.get("/schedules"), 401)


# --- GET, PATCH, DELETE /schedules/{name} -----------------------------------------------------------


def test_the_list_and_one_schedule_answer_what_was_created(client, admin):
    created = create(client, admin, **NIGHTLY)
    other = create(client, admin, name="a-first", every_seconds=5, job={"type": "noop"})
    assert client.get("/schedules", headers=admin).get_json() == {"schedules": [other, created], "next_cursor": None}
    assert client.get("/schedules/nightly-report", headers=admin).get_json() == created


@pytest.mark.parametrize("method", ["get", "patch", "delete"])
def test_an_unknown_schedule_is_a_404(client, admin, method):
    kwargs = {"json": {"paused": True}} if method == "patch" else {}
    assert_problem(getattr(client, method)("/schedules/nope", headers=admin, **kwargs), 404)
    assert_problem(client.post("/schedules/nope/run", headers=admin), 404)


def test_patch_changes_any_field_validated_like_create(client, admin):
    create(client, admin, **NIGHTLY)
    response = client.patch(
        "/schedules/nightly-report",
        headers=admin,
        json={"every_seconds": 30, "job": {"priority": "critical"}, "catch_up": "none"},
    )
    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert body["cron"] is None and body["every_seconds"] == 30
    assert body["job"] == {**NIGHTLY["job"], "priority": "critical"}
    assert body["catch_up"] == "none"
    assert "/cron" in pointers(client.patch("/schedules/nightly-report", headers=admin, json={"cron": "nope"}))
    assert "/job/type" in pointers(
        client.patch("/schedules/nightly-report", headers=admin, json={"job": {"type": "unknown"}})
    )
    assert pointers(client.patch("/schedules/nightly-report", headers=admin, json={})) == {""}


def test_patch_can_rename_but_not_onto_another_schedule(client, admin):
    create(client, admin, **NIGHTLY)
    create(client, admin, name="other", every_seconds=5, job={"type": "noop"})
    assert_problem(client.patch("/schedules/other", headers=admin, json={"name": "nightly-report"}), 409)
    response = client.patch("/schedules/other", headers=admin, json={"name": "renamed"})
    assert response.status_code == 200 and response.get_json()["name"] == "renamed"
    assert_problem(client.get("/schedules/other", headers=admin), 404)


def test_pausing_hides_the_next_run_and_resuming_computes_it_from_now(client, admin, app):
    create(client, admin, name="fast", every_seconds=10, job={"type": "noop"})
    paused = client.patch("/schedules/fast", headers=admin, json={"paused": True}).get_json()
    assert paused["paused"] is True and paused["next_run_at"] is None
    # Long after, while paused: the tick it had is long gone.
    _set_next_run(app, "fast", datetime(2020, 1, 1, tzinfo=UTC))
    resumed = client.patch("/schedules/fast", headers=admin, json={"paused": False}).get_json()
    assert utcnow() < when(resumed["next_run_at"]) <= utcnow() + timedelta(seconds=10)


def test_delete_answers_204_and_keeps_the_jobs_it_made(client, admin):
    create(client, admin, **NIGHTLY)
    job = client.post("/schedules/nightly-report/run", headers=admin).get_json()
    response = client.delete("/schedules/nightly-report", headers=admin)
    assert response.status_code == 204
    assert_problem(client.get("/schedules/nightly-report", headers=admin), 404)
    assert client.get(f"/jobs/{job['id']}", headers=admin).get_json()["schedule"] == "nightly-report"


# --- POST /schedules/{name}/run ---------------------------------------------------------------------


def test_run_now_enqueues_one_job_marked_with_its_schedule(client, admin):
    create(client, admin, **NIGHTLY)
    before = utcnow()
    response = client.post("/schedules/nightly-report/run", headers=admin)
    assert response.status_code == 201
    job = response.get_json()
    assert job["type"] == "report" and job["status"] == "pending"
    assert job["payload"] == {"kind": "daily"} and job["priority"] == "high" and job["max_retries"] == 5
    assert job["schedule"] == "nightly-report"
    assert before <= when(job["scheduled_for"]) <= utcnow()
    assert job["producer"] == "schedule:nightly-report"
    assert client.get(f"/jobs/{job['id']}", headers=admin).get_json() == job
    schedule = client.get("/schedules/nightly-report", headers=admin).get_json()
    assert schedule["last_job_id"] == job["id"]
    events = client.get(f"/jobs/{job['id']}/events", headers=admin).get_json()["events"]
    assert [(event["event"], event["actor"]) for event in events] == [("enqueued", "key:admin-a")]


def test_run_now_refuses_a_body_with_fields(client, admin):
    create(client, admin, **NIGHTLY)
    assert "/extra" in pointers(client.post("/schedules/nightly-report/run", headers=admin, json={"extra": 1}))


def test_run_now_refuses_a_body_of_a_newline_and_enqueues_nothing(client, admin):
    create(client, admin, **NIGHTLY)
    response = client.post("/schedules/nightly-report/run", headers=admin, data="\n", content_type="application/json")
    assert response.status_code == 400
    assert response.content_type == "application/problem+json"
    assert client.get("/jobs?type=report", headers=admin).get_json()["jobs"] == []


def test_a_producers_job_has_no_schedule(client, enqueue):
    job = enqueue(type="email")
    assert job["schedule"] is None and job["scheduled_for"] is None


def _set_next_run(app, name, at):
    from sqlalchemy import update

    from queuelog.extensions import db
    from queuelog.models import Schedule

    with db.engine.begin() as conn:
        conn.execute(update(Schedule.__table__).where(Schedule.__table__.c.name == name).values(next_run_at=at))


@pytest.mark.parametrize("name", ["nul%00", "has space", "x" * 101])
def test_a_name_no_schedule_can_have_is_a_404(client, admin, name):
    assert_problem(client.get(f"/schedules/{name}", headers=admin), 404)
    assert_problem(client.delete(f"/schedules/{name}", headers=admin), 404)
