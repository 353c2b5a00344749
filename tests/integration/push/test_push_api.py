"""A type's push target through the API: set, shown, cleared, its secret issued once and rotated, every bad
target refused with its pointer, and the jobs of a pushed type kept from workers."""

from __future__ import annotations

import pytest

from tests.support.factories import assert_problem, pointers

TARGET = {"url": "https://hooks.example.com/queuelog", "mode": "sync", "timeout_seconds": 30}


@pytest.fixture(autouse=True)
def _fresh_copy(fresh_flow_settings):
    """Each test's database is new; the process's copy of which types are pushed must be too."""


def set_push(client, admin, push, job_type="email"):
    return client.patch(f"/types/{job_type}", json={"push": push}, headers=admin)


def shown_push(client, admin, job_type="email"):
    return client.get(f"/types/{job_type}", headers=admin).get_json()["push"]


# --- setting, showing, clearing -----------------------------------------------------------------------------


def test_a_type_has_no_push_target_until_one_is_set(client, admin):
    assert shown_push(client, admin) is None


def test_setting_a_first_target_answers_it_with_its_secret(client, admin):
    response = set_push(client, admin, {"url": TARGET["url"]})
    assert response.status_code == 200
    push = response.get_json()["push"]
    assert {k: push[k] for k in ("url", "mode", "timeout_seconds")} == TARGET
    assert push["secret"].startswith("whsec_")
    assert push["last_delivery"] is None


def test_the_secret_is_never_shown_again(client, admin):
    set_push(client, admin, TARGET)
    assert "secret" not in shown_push(client, admin)
    listed = {item["type"]: item for item in client.get("/types", headers=admin).get_json()["types"]}
    assert "secret" not in listed["email"]["push"]
    changed = set_push(client, admin, {**TARGET, "mode": "async"}).get_json()["push"]
    assert changed["mode"] == "async" and "secret" not in changed


def test_the_secret_is_in_no_history_entry(client, admin):
    secret = set_push(client, admin, TARGET).get_json()["push"]["secret"]
    history = client.get("/types/email/history", headers=admin)
    assert history.status_code == 200
    assert secret not in history.get_data(as_text=True)
    assert history.get_json()["history"][0]["changes"]["push"] == {"old": None, "new": TARGET}


def test_clearing_the_target_forgets_its_secret_and_a_new_target_gets_a_new_one(client, admin):
    first = set_push(client, admin, TARGET).get_json()["push"]["secret"]
    cleared = set_push(client, admin, None)
    assert cleared.status_code == 200 and cleared.get_json()["push"] is None
    second = set_push(client, admin, TARGET).get_json()["push"]["secret"]
    assert second.startswith("whsec_") and second != first


def test_rotating_answers_a_new_secret_once(client, admin):
    first = set_push(client, admin, TARGET).get_json()["push"]["secret"]
    response = client.post("/types/email/push/rotate", headers=admin)
    assert response.status_code == 200
    rotated = response.get_json()["push"]["secret"]
    assert rotated.startswith("whsec_") and rotated != first
    assert "secret" not in shown_push(client, admin)


def test_rotating_a_type_without_a_target_is_a_409(client, admin):
    assert_problem(client.post("/types/email/push/rotate", headers=admin), 409)


def test_rotating_an_unknown_type_is_a_404(client, admin):
    assert_problem(client.post("/types/parcel/push/rotate", headers=admin), 404)


@pytest.mark.parametrize("role", ["producer", "worker"])
def test_only_an_admin_key_sets_or_rotates_a_target(client, make_key, role):
    headers = {"Authorization": f"Bearer {make_key(role)}"}
    assert_problem(set_push(client, headers, TARGET), 403)
    assert_problem(client.post("/types/email/push/rotate", headers=headers), 403)


# --- what a target may be -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/hook",
        "http://localhost/hook",
        "http://10.1.2.3/hook",
        "http://192.168.0.10/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://0.0.0.0/hook",
        "http://100.64.0.1/hook",
        "http://2130706433/hook",
    ],
    ids=lambda url: url.split("/")[2],
)
def test_a_loopback_private_or_link_local_address_is_refused_at_push_url(client, admin, url):
    response = set_push(client, admin, {"url": url})
    assert pointers(response) == {"/push/url"}
    assert shown_push(client, admin) is None


@pytest.mark.parametrize(
    "url",
    [
        "ftp://hooks.example.com/x",
        "hooks.example.com/x",
        "https:///nohost",
        "https://user:pw@hooks.example.com/x",
        "https://hooks.example.com:99999/x",
        "https://" + "a" * 70 + ".example.com/x",
    ],
    ids=["ftp", "no-scheme", "no-host", "credentials", "bad-port", "label-too-long"],
)
def test_a_url_that_is_not_a_plain_http_url_is_refused_at_push_url(client, admin, url):
    assert pointers(set_push(client, admin, {"url": url})) == {"/push/url"}


@pytest.mark.parametrize(
    "push, pointer",
    [
        ({"mode": "sync"}, "/push/url"),
        ({"url": 7}, "/push/url"),
        ({"url": TARGET["url"], "mode": "later"}, "/push/mode"),
        ({"url": TARGET["url"], "timeout_seconds": 0}, "/push/timeout_seconds"),
        ({"url": TARGET["url"], "timeout_seconds": 901}, "/push/timeout_seconds"),
        ({"url": TARGET["url"], "timeout_seconds": "30"}, "/push/timeout_seconds"),
        ({"url": TARGET["url"], "secret": "whsec_x"}, "/push/secret"),
        ("https://hooks.example.com", "/push"),
    ],
)
def test_a_bad_field_of_the_target_is_a_422_at_its_pointer(client, admin, push, pointer):
    assert pointers(set_push(client, admin, push)) == {pointer}
    assert shown_push(client, admin) is None


@pytest.mark.parametrize("config_overrides", [{"PUSH_ALLOW_PRIVATE": True}], indirect=True)
def test_a_private_address_is_accepted_when_the_server_allows_it(client, admin):
    response = set_push(client, admin, {"url": "http://127.0.0.1:9/hook"})
    assert response.status_code == 200
    assert shown_push(client, admin)["url"] == "http://127.0.0.1:9/hook"


# --- whose jobs they are ------------------------------------------------------------------------------------


def test_a_worker_claims_no_job_of_a_pushed_type(client, admin, worker, enqueue):
    set_push(client, admin, TARGET)
    enqueue(type="email")
    assert client.post("/jobs/claim", json={}, headers=worker).status_code == 204
    assert client.post("/jobs/claim", json={"types": ["email"]}, headers=worker).status_code == 204


def test_a_worker_still_claims_the_other_types(client, admin, worker, enqueue):
    set_push(client, admin, TARGET)
    enqueue(type="email")
    other = enqueue(type="report")
    claimed = client.post("/jobs/claim", json={}, headers=worker)
    assert claimed.status_code == 200 and claimed.get_json()["id"] == other["id"]


def test_clearing_the_target_gives_the_jobs_back_to_workers(client, admin, worker, enqueue):
    set_push(client, admin, TARGET)
    job = enqueue(type="email")
    set_push(client, admin, None)
    claimed = client.post("/jobs/claim", json={"types": ["email"]}, headers=worker)
    assert claimed.status_code == 200 and claimed.get_json()["id"] == job["id"]
