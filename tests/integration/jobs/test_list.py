"""GET /jobs: filters, keyset pagination, who sees what."""

from __future__ import annotations

import pytest

from tests.support.factories import assert_problem, key_id, pointers


@pytest.fixture
def mixed_jobs(make_job, producer):
    """Jobs of producer-a in assorted states, types and priorities; returns {name: id}."""
    owner = {"producer_key_id": key_id("producer-a"), "producer": "producer-a"}
    specs = {
        "email-low-pending": dict(type="email", priority=0, status="pending"),
        "email-high-running": dict(type="email", priority=20, status="running"),
        "report-low-completed": dict(type="report", priority=0, status="completed"),
        "report-medium-failed": dict(type="report", priority=10, status="failed"),
        "noop-critical-cancelled": dict(type="noop", priority=30, status="cancelled"),
        "noop-low-pending": dict(type="noop", priority=0, status="pending"),
    }
    return {name: make_job(**spec, **owner) for name, spec in specs.items()}


def _ids(response) -> list[int]:
    assert response.status_code == 200, response.data
    return [job["id"] for job in response.get_json()["jobs"]]


def test_list_answers_jobs_newest_first_and_a_null_cursor_at_the_end(client, producer, mixed_jobs):
    body = client.get("/jobs", headers=producer).get_json()
    assert [job["id"] for job in body["jobs"]] == sorted(mixed_jobs.values(), reverse=True)
    assert body["next_cursor"] is None


@pytest.mark.parametrize(
    "query, expected",
    [
        ({"status": "pending"}, {"email-low-pending", "noop-low-pending"}),
        ({"status": "running"}, {"email-high-running"}),
        ({"type": "report"}, {"report-low-completed", "report-medium-failed"}),
        ({"priority": "low"}, {"email-low-pending", "report-low-completed", "noop-low-pending"}),
        ({"priority": "CRITICAL"}, {"noop-critical-cancelled"}),
        ({"status": "pending", "type": "noop"}, {"noop-low-pending"}),
        ({"type": "report", "priority": "medium", "status": "failed"}, {"report-medium-failed"}),
        ({"type": "resize-image"}, set()),
    ],
)
def test_list_filters(client, producer, mixed_jobs, query, expected):
    names = {job_id: name for name, job_id in mixed_jobs.items()}
    listed = _ids(client.get("/jobs", query_string=query, headers=producer))
    assert {names[job_id] for job_id in listed} == expected
    assert len(listed) == len(expected)


def test_listed_jobs_carry_labels_and_objects(client, producer, mixed_jobs):
    job = client.get("/jobs", query_string={"priority": "critical"}, headers=producer).get_json()["jobs"][0]
    assert (job["priority"], job["payload"], job["status"]) == ("critical", {}, "cancelled")


def test_pagination_walks_every_job_once(client, producer, enqueue):
    created = [enqueue(payload={"n": n})["id"] for n in range(7)]
    seen, cursor, pages = [], None, 0
    for _ in range(10):  # bounded: 7 jobs in pages of 3 need 3 pages
        query = {"limit": 3} | ({"cursor": cursor} if cursor else {})
        body = client.get("/jobs", query_string=query, headers=producer).get_json()
        pages += 1
        assert len(body["jobs"]) <= 3
        seen.extend(job["id"] for job in body["jobs"])
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert pages == 3
    assert seen == sorted(created, reverse=True)
    assert len(set(seen)) == len(seen)


def test_a_page_that_ends_exactly_at_the_last_job_has_no_next_cursor(client, producer, enqueue):
    for _ in range(4):
        enqueue()
    first = client.get("/jobs", query_string={"limit": 2}, headers=producer).get_json()
    second = client.get("/jobs", query_string={"limit": 2, "cursor": first["next_cursor"]}, headers=producer).get_json()
    assert len(second["jobs"]) == 2 and second["next_cursor"] is None


def test_pagination_keeps_its_place_when_new_jobs_arrive(client, producer, enqueue):
    old = [enqueue()["id"] for _ in range(4)]
    first = client.get("/jobs", query_string={"limit": 2}, headers=producer).get_json()
    enqueue()
    enqueue()
    second = client.get("/jobs", query_string={"limit": 2, "cursor": first["next_cursor"]}, headers=producer)
    assert _ids(second) == sorted(old, reverse=True)[2:]


def test_pagination_with_a_filter(client, producer, enqueue):
    emails = [enqueue(type="email")["id"] for _ in range(3)]
    for _ in range(3):
        enqueue(type="report")
    seen, cursor = [], None
    for _ in range(5):
        query = {"type": "email", "limit": 1} | ({"cursor": cursor} if cursor else {})
        body = client.get("/jobs", query_string=query, headers=producer).get_json()
        seen.extend(job["id"] for job in body["jobs"])
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(emails, reverse=True)


def test_a_producer_sees_only_its_own_jobs(client, producer, other_producer, enqueue):
    mine = enqueue()["id"]
    theirs = enqueue(headers=other_producer)["id"]
    assert _ids(client.get("/jobs", headers=producer)) == [mine]
    assert _ids(client.get("/jobs", headers=other_producer)) == [theirs]


def test_an_admin_sees_every_job(client, admin, producer, other_producer, enqueue):
    ids = [enqueue()["id"], enqueue(headers=other_producer)["id"]]
    assert _ids(client.get("/jobs", headers=admin)) == sorted(ids, reverse=True)


def test_a_worker_may_not_list(client, worker):
    assert_problem(client.get("/jobs", headers=worker), 403)


@pytest.mark.parametrize("cursor", ["garbage", "aWQ6YWJj", "eDoxMA", "aWQ6LTU", "aWQ6OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5"])
def test_a_cursor_we_did_not_issue_is_422(client, producer, cursor):
    # aWQ6YWJj = "id:abc", eDoxMA = "x:10", aWQ6LTU = "id:-5", the last one an id past any column's range.
    response = client.get("/jobs", query_string={"cursor": cursor}, headers=producer)
    assert_problem(response, 422)


@pytest.mark.parametrize(
    "query, pointer",
    [
        ({"status": "done"}, "/query/status"),
        ({"priority": "urgent"}, "/query/priority"),
        ({"limit": "0"}, "/query/limit"),
        ({"limit": "201"}, "/query/limit"),
        ({"limit": "ten"}, "/query/limit"),
        ({"sort": "id"}, "/query/sort"),
    ],
)
def test_bad_query_parameters_are_422(client, producer, query, pointer):
    assert pointers(client.get("/jobs", query_string=query, headers=producer)) == {pointer}


def test_a_producer_cannot_widen_its_view_with_filters(client, producer, other_producer, enqueue):
    enqueue(headers=other_producer)
    assert _ids(client.get("/jobs", query_string={"status": "pending", "type": "email"}, headers=producer)) == []
