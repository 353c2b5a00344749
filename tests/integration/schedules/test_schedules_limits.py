"""GET /schedules a page at a time, exactly as GET /jobs (limit, cursor, next_cursor, the same 422s); and at most
QUEUELOG_MAX_SCHEDULES schedules: one more is a 409 from the API, an error from the CLI and the page; changing
one is never refused."""

from __future__ import annotations

import html
import threading

import pytest

from queuelog import schedules
from tests.support.factories import assert_problem, pointers
from tests.support.ui import post_form, text_of

LIMIT_TYPE = "https://queuelog.dev/problems/max-schedules-reached"
three_at_most = pytest.mark.parametrize("config_overrides", [{"MAX_SCHEDULES": 3}])


def create(client, admin, name: str):
    return client.post("/schedules", json={"name": name, "every_seconds": 60, "job": {"type": "noop"}}, headers=admin)


def created(client, admin, *names: str) -> None:
    for name in names:
        response = create(client, admin, name)
        assert response.status_code == 201, response.get_json()


def names_of(response) -> list[str]:
    assert response.status_code == 200, response.get_json()
    return [schedule["name"] for schedule in response.get_json()["schedules"]]


# --- GET /schedules, a page at a time ---------------------------------------------------------------


def test_pages_follow_next_cursor_by_name_to_a_null_cursor(client, admin):
    created(client, admin, "e", "c", "a", "d", "b")
    seen, cursor = [], None
    while True:
        response = client.get(
            "/schedules", query_string={"limit": 2} | ({"cursor": cursor} if cursor else {}), headers=admin
        )
        seen.append(names_of(response))
        cursor = response.get_json()["next_cursor"]
        if cursor is None:
            break
    assert seen == [["a", "b"], ["c", "d"], ["e"]]


def test_a_page_that_ends_exactly_at_the_last_schedule_has_no_next_cursor(client, admin):
    created(client, admin, "a", "b", "c", "d")
    first = client.get("/schedules", query_string={"limit": 2}, headers=admin).get_json()
    second = client.get("/schedules", query_string={"limit": 2, "cursor": first["next_cursor"]}, headers=admin)
    assert names_of(second) == ["c", "d"] and second.get_json()["next_cursor"] is None


def test_a_schedule_deleted_between_pages_skips_none_of_the_others(client, admin):
    created(client, admin, "a", "b", "c", "d")
    first = client.get("/schedules", query_string={"limit": 2}, headers=admin).get_json()
    assert client.delete("/schedules/b", headers=admin).status_code == 204
    second = client.get("/schedules", query_string={"limit": 2, "cursor": first["next_cursor"]}, headers=admin)
    assert names_of(second) == ["c", "d"]


def test_a_page_holds_50_by_default_and_200_at_most(client, admin):
    created(client, admin, *(f"s{number:03}" for number in range(51)))
    default = client.get("/schedules", headers=admin)
    assert len(names_of(default)) == 50 and default.get_json()["next_cursor"] is not None
    assert len(names_of(client.get("/schedules", query_string={"limit": 200}, headers=admin))) == 51


@pytest.mark.parametrize("cursor", ["garbage", "aWQ6MTA", "bmFtZTo", "bmFtZTpoYXMgc3BhY2U", "%00"])
def test_a_cursor_we_did_not_issue_is_422(client, admin, cursor):
    # aWQ6MTA = "id:10" (a jobs cursor), bmFtZTo = "name:", bmFtZTpoYXMgc3BhY2U = "name:has space".
    assert_problem(client.get(f"/schedules?cursor={cursor}", headers=admin), 422)


def test_a_bad_cursor_is_the_same_422_as_get_jobs(client, admin):
    for path in ("/jobs", "/schedules"):
        response = client.get(path, query_string={"cursor": "garbage"}, headers=admin)
        assert pointers(response) == {"/query/cursor"}
        assert response.get_json()["errors"][0]["detail"] == "not a cursor this server issued"


@pytest.mark.parametrize(
    "query, pointer",
    [
        ({"limit": "0"}, "/query/limit"),
        ({"limit": "201"}, "/query/limit"),
        ({"limit": "ten"}, "/query/limit"),
        ({"limit": " 5"}, "/query/limit"),
        ({"sort": "name"}, "/query/sort"),
    ],
)
def test_bad_query_parameters_are_the_same_422_as_get_jobs(client, admin, query, pointer):
    for path in ("/jobs", "/schedules"):
        assert pointers(client.get(path, query_string=query, headers=admin)) == {pointer}, path


def test_get_jobs_filters_are_unknown_parameters_here(client, admin):
    assert pointers(client.get("/schedules", query_string={"status": "paused"}, headers=admin)) == {"/query/status"}


# --- at most QUEUELOG_MAX_SCHEDULES -----------------------------------------------------------------


@three_at_most
def test_creating_past_max_schedules_is_a_409_saying_why_and_stores_nothing(client, admin):
    created(client, admin, "a", "b", "c")
    body = assert_problem(create(client, admin, "d"), 409)
    assert body["type"] == LIMIT_TYPE and body["title"] == "Too many schedules"
    assert (body["limit"], body["schedules"]) == (3, 3)
    assert "may have at most 3 (QUEUELOG_MAX_SCHEDULES)" in body["detail"]
    assert names_of(client.get("/schedules", headers=admin)) == ["a", "b", "c"]


@three_at_most
def test_paused_schedules_count_toward_max_schedules(client, admin):
    created(client, admin, "a", "b", "c")
    assert client.patch("/schedules/a", json={"paused": True}, headers=admin).status_code == 200
    assert_problem(create(client, admin, "d"), 409)


@three_at_most
def test_changing_a_schedule_at_max_schedules_is_never_refused(client, admin):
    created(client, admin, "a", "b", "c")
    for change in ({"paused": True}, {"paused": False}, {"cron": "@daily"}, {"name": "renamed"}):
        name = "renamed" if change == {"name": "renamed"} else "a"
        response = client.patch("/schedules/a", json=change, headers=admin)
        assert (response.status_code, response.get_json()["name"]) == (200, name)
    assert client.post("/schedules/renamed/run", headers=admin).status_code == 201


@three_at_most
def test_deleting_one_makes_room_for_one(client, admin):
    created(client, admin, "a", "b", "c")
    assert client.delete("/schedules/b", headers=admin).status_code == 204
    created(client, admin, "d")
    assert_problem(create(client, admin, "e"), 409)


@three_at_most
def test_concurrent_creates_never_pass_max_schedules(app):
    """Eight creates at once (threads, each with its own connection): three get in."""
    barrier, outcomes = threading.Barrier(8), []

    def one(number: int) -> None:
        with app.app_context():
            barrier.wait(timeout=30)
            try:
                schedules.create_schedule({"name": f"racing-{number}", "every_seconds": 60, "job": {"type": "noop"}})
                outcomes.append(201)
            except schedules.ScheduleLimitReached:
                outcomes.append(409)

    threads = [threading.Thread(target=one, args=(number,)) for number in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcomes) == [201] * 3 + [409] * 5
    assert len(schedules.list_schedules()) == 3


@pytest.mark.parametrize("config_overrides", [{"MAX_SCHEDULES": 1}])
def test_the_cli_creating_past_max_schedules_prints_why_and_exits_non_zero(runner):
    def cli_create(name: str):
        return runner.invoke(args=["schedules", "create", name, "--every-seconds", "60", "--type", "noop"])

    assert cli_create("first").exit_code == 0
    result = cli_create("second")
    assert result.exit_code != 0
    assert "may have at most 1 (QUEUELOG_MAX_SCHEDULES)" in result.output
    assert [state.spec.name for state in schedules.list_schedules()] == ["first"]


@pytest.mark.parametrize("config_overrides", [{"MAX_SCHEDULES": 1}])
@pytest.mark.usefixtures("requests_in_their_own_app_context")
def test_the_page_creating_past_max_schedules_shows_why_on_the_form(signed_in):
    schedules.create_schedule({"name": "first", "every_seconds": 60, "job": {"type": "noop"}})
    form = {
        "name": "second",
        "cron": "",
        "every_seconds": "60",
        "timezone": "UTC",
        "job_type": "noop",
        "payload": "{}",
        "priority": "low",
        "max_retries": "3",
        "catch_up": "one",
    }
    response = post_form(signed_in, "/admin/schedules", form, page="/admin/schedules")
    assert response.status_code == 409
    assert "may have at most 1 (QUEUELOG_MAX_SCHEDULES)" in html.unescape(text_of(response))
    assert [state.spec.name for state in schedules.list_schedules()] == ["first"]
