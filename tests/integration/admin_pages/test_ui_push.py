"""Push targets on the pages: the Types list and a type's page show each type's target and last delivery; a type's
page sets, clears and rotates it through the same functions as the API, showing a signing secret once, in the
answer to the change that issued it; a job's page shows each delivery in its event log, and its trace id."""

from __future__ import annotations

import html
import logging
import re

import pytest

from queuelog.core.clock import utcnow
from queuelog.database.transactions import read_connection
from queuelog.queue import flow, push_access, push_outcomes, push_targets
from queuelog.queue.push_targets import PushTarget
from tests.support.ui import (
    ADMIN_NAME,
    api_type,
    events_of,
    field_errors,
    flashes,
    history_rows,
    post_form,
    text_of,
)

# Each request runs in its own app context, as on a server (tests/support/ui.py).
pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")

HOOK = "https://example.com/hook"  # public; this machine resolves no names, and an unresolved one is accepted
SECRET = re.compile(r"whsec_[A-Za-z0-9+/=]+")
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def set_push(client, job_type: str = "email", url: str = HOOK, mode: str = "sync", timeout: str = ""):
    return post_form(
        client,
        f"/admin/types/{job_type}/push",
        {"url": url, "mode": mode, "timeout_seconds": timeout},
        page=f"/admin/types/{job_type}",
    )


def shown_secret(response) -> str | None:
    """The secret in the page's secret card, if it has one."""
    match = re.search(r"<pre class=\"secret\" data-secret>(.*?)</pre>", text_of(response), re.S)
    return match.group(1).strip() if match else None


def current_secrets(job_type: str = "email") -> list[str]:
    """The secrets the type's deliveries are signed with now, the current one first (as the dispatcher reads them)."""
    with read_connection() as conn:
        return push_targets.signing_secrets(conn, job_type, utcnow())


def push_cell(body: str, job_type: str = "email") -> str:
    """The Types list's push target cell of a type, as text."""
    match = re.search(rf'<td data-push="{re.escape(job_type)}">(.*?)</td>', body, re.S)
    assert match, f"no push cell for {job_type}"
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", match.group(1)))).strip()


def push_fields(body: str) -> dict[str, str]:
    """A type page's push target card: each shown field's text."""
    return {
        name: re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", value))).strip()
        for name, value in re.findall(r'<dd[^>]*data-push-field="(\w+)"[^>]*>(.*?)</dd>', body, re.S)
    }


def delivered(make_job, read_job, http_status: int | None, error: str | None, job_type: str = "email") -> int:
    """A job of a pushed type, held by its push delivery, whose delivery was answered (or not): its id."""
    caller = push_access.push_caller(job_type)
    job_id = make_job(type=job_type, status="running", worker_id=caller.name, claim_token="push-token")
    assert push_outcomes.log_delivery(read_job(job_id), caller, http_status, error)
    assert events_of(job_id)[-1].event == "delivered"
    return job_id


# --- setting a target, and its secret shown once ------------------------------------------------------------


def test_setting_a_first_target_answers_with_its_signing_secret(signed_in, client, admin):
    response = set_push(signed_in, mode="async", timeout="5")
    assert response.status_code == 200
    assert shown_secret(response) == current_secrets()[0]  # the secret deliveries are signed with
    assert "it will not be shown again" in flashes(response)[0]
    assert api_type(client, admin)["push"]["url"] == HOOK
    assert (api_type(client, admin)["push"]["mode"], api_type(client, admin)["push"]["timeout_seconds"]) == ("async", 5)


def test_the_secret_is_never_shown_again_on_any_later_page_or_answer(signed_in, client, admin):
    secret = shown_secret(set_push(signed_in))
    assert secret
    for path in ("/admin/types", "/admin/types/email", "/admin"):
        assert secret not in text_of(signed_in.get(path)), path
    assert SECRET.search(text_of(signed_in.get("/admin/types/email"))) is None
    for path in ("/types/email", "/types", "/types/email/history"):
        assert secret not in text_of(client.get(path, headers=admin)), path


def test_the_secret_is_not_written_to_the_log(signed_in, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    secret = shown_secret(set_push(signed_in))
    assert secret
    assert secret not in caplog.text
    assert secret not in "".join(capfd.readouterr())


def test_changing_a_target_keeps_its_secret_and_shows_none(signed_in, client, admin):
    first = shown_secret(set_push(signed_in))
    response = set_push(signed_in, url="https://example.com/other", mode="async")
    assert response.status_code == 302
    page = signed_in.get(response.headers["Location"])
    assert shown_secret(page) is None
    assert "Its signing secret is unchanged" in flashes(page)[0]
    assert current_secrets() == [first]
    assert api_type(client, admin)["push"]["url"] == "https://example.com/other"


@pytest.mark.parametrize("config_overrides", [{"PUSH_ALLOW_PRIVATE": True}], indirect=True)
def test_a_private_address_is_accepted_when_push_allow_private_is_on(signed_in, client, admin):
    response = set_push(signed_in, url="http://127.0.0.1:8080/hook")
    assert response.status_code == 200, field_errors(text_of(response))
    assert api_type(client, admin)["push"]["url"] == "http://127.0.0.1:8080/hook"


# --- bad input --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field_error"),
    [
        ({"url": "http://127.0.0.1/x"}, "not a public address"),
        ({"url": "http://10.1.2.3/x"}, "not a public address"),
        ({"url": "ftp://x"}, "must be an http:// or https:// URL"),
        ({"url": "https://user:pw@example.com/x"}, "must not carry a user name or password"),
        ({"url": ""}, "give the target's http:// or https:// URL"),
        ({"timeout": "0"}, "must be a whole number of seconds from 1 to 900, not '0'"),
        ({"timeout": "901"}, "must be a whole number of seconds from 1 to 900, not '901'"),
        ({"timeout": "soon"}, "must be a whole number of seconds from 1 to 900, not 'soon'"),
        ({"mode": "sometimes"}, "Not a valid choice."),
    ],
)
def test_a_bad_target_is_a_readable_400_on_its_field_and_changes_nothing(signed_in, client, admin, fields, field_error):
    response = set_push(signed_in, **fields)
    assert response.status_code == 400
    body = text_of(response)
    assert any(field_error in error for error in field_errors(body)), field_errors(body)
    assert shown_secret(response) is None
    assert api_type(client, admin)["push"] is None
    assert current_secrets() == []
    assert flow.history("email") == []


def test_a_bad_url_leaves_an_existing_target_as_it_was(signed_in, client, admin):
    secret = shown_secret(set_push(signed_in))
    assert set_push(signed_in, url="http://127.0.0.1/x").status_code == 400
    assert api_type(client, admin)["push"]["url"] == HOOK
    assert current_secrets() == [secret]


# --- clearing and rotating ---------------------------------------------------------------------------------


def test_clearing_the_target_forgets_it_and_its_secrets(signed_in, client, admin):
    first = shown_secret(set_push(signed_in))
    response = post_form(signed_in, "/admin/types/email/push/clear", page="/admin/types/email")
    assert response.status_code == 302
    assert "Removed the push target of email" in flashes(signed_in.get(response.headers["Location"]))[0]
    assert api_type(client, admin)["push"] is None
    assert current_secrets() == []
    assert push_cell(text_of(signed_in.get("/admin/types"))) == "none: workers claim"
    second = shown_secret(set_push(signed_in))  # a new target gets a new secret
    assert second and second != first


def test_rotating_shows_the_new_secret_once_and_the_old_one_keeps_signing(signed_in):
    old = shown_secret(set_push(signed_in))
    response = post_form(signed_in, "/admin/types/email/push/rotate", page="/admin/types/email")
    assert response.status_code == 200
    new = shown_secret(response)
    assert new and new != old
    assert current_secrets() == [new, old]
    assert "keeps signing beside it for 24 hours" in flashes(response)[0]
    later = text_of(signed_in.get("/admin/types/email"))
    assert new not in later and old not in later


def test_rotating_without_a_target_is_a_readable_message(signed_in):
    response = post_form(signed_in, "/admin/types/email/push/rotate", page="/admin/types/email")
    assert response.status_code == 302
    assert flashes(signed_in.get(response.headers["Location"])) == [
        "Job type 'email' has no push target to rotate the secret of."
    ]


def test_the_history_names_each_push_change_and_rotation_without_a_secret(signed_in):
    secret = shown_secret(set_push(signed_in, timeout="5"))
    post_form(signed_in, "/admin/types/email/push/rotate", page="/admin/types/email")
    post_form(signed_in, "/admin/types/email/push/clear", page="/admin/types/email")
    body = text_of(signed_in.get("/admin/types/email"))
    rows = history_rows(body)
    assert len(rows) == 3 and all(f"admin:{ADMIN_NAME}" in row for row in rows)
    assert rows[0].endswith(f"push target: {HOOK} (sync, timeout 5 s) → none (workers claim its jobs)")
    assert "push signing secret: old one retires " in rows[1] and rows[1].endswith("→ new one issued")
    assert rows[2].endswith(f"push target: none (workers claim its jobs) → {HOOK} (sync, timeout 5 s)")
    assert secret not in body


def test_a_viewer_sees_the_target_but_no_push_form_and_may_not_set_one(viewer_client, client, admin):
    flow.update_type("email", {"push": PushTarget(HOOK)}, "test")
    body = text_of(viewer_client.get("/admin/types/email"))
    assert push_fields(body)["url"] == HOOK
    assert 'action="/admin/types/email/push' not in body
    assert set_push(viewer_client, url="https://example.com/mine").status_code == 403
    assert api_type(client, admin)["push"]["url"] == HOOK


# --- what the Types pages show ---------------------------------------------------------------------------------


def test_the_list_shows_a_type_without_a_target_as_pulled_by_workers(signed_in):
    assert push_cell(text_of(signed_in.get("/admin/types"))) == "none: workers claim"


def test_the_list_shows_the_target_its_mode_timeout_and_last_delivery(signed_in, make_job, read_job):
    flow.update_type("email", {"push": PushTarget(HOOK, "async", 45)}, "test")
    assert push_cell(text_of(signed_in.get("/admin/types"))) == f"{HOOK} async · 45 s last: no delivery yet"
    job_id = delivered(make_job, read_job, 503, "HTTP 503: busy")
    cell = push_cell(text_of(signed_in.get("/admin/types")))
    assert re.fullmatch(
        rf"{re.escape(HOOK)} async · 45 s last: HTTP 503 \d+s ago · job #{job_id} HTTP 503: busy", cell
    ), cell


def test_the_type_page_shows_the_last_delivery_status_time_job_and_error(signed_in, make_job, read_job):
    flow.update_type("email", {"push": PushTarget(HOOK)}, "test")
    job_id = delivered(make_job, read_job, 500, "HTTP 500: the database is down\nat line 3")
    fields = push_fields(text_of(signed_in.get("/admin/types/email")))
    assert (fields["url"], fields["mode"], fields["timeout"]) == (HOOK, "sync", "30 s")
    assert re.fullmatch(
        rf"HTTP 500 {utcnow():%Y-%m-%d} \d\d:\d\d:\d\d UTC \(\d+s ago\) · job #{job_id} "
        r"HTTP 500: the database is down at line 3",
        fields["last"],
    ), fields["last"]


def test_a_delivery_that_got_no_answer_reads_no_answer(signed_in, make_job, read_job):
    flow.update_type("email", {"push": PushTarget(HOOK)}, "test")
    delivered(make_job, read_job, None, "no answer within 30 s (timeout_seconds)")
    last = push_fields(text_of(signed_in.get("/admin/types/email")))["last"]
    assert last.startswith("no answer ") and last.endswith("no answer within 30 s (timeout_seconds)")


# --- the job's page --------------------------------------------------------------------------------------------


def event_rows(body: str, event: str) -> list[str]:
    return [
        re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", row))).strip()
        for row in re.findall(rf'<tr class="event-{event}">(.*?)</tr>', body, re.S)
    ]


def test_each_delivery_is_in_the_event_log_with_its_status_time_and_error(signed_in, make_job, read_job):
    flow.update_type("email", {"push": PushTarget(HOOK)}, "test")
    job_id = delivered(make_job, read_job, 500, "HTTP 500: boom")
    push_outcomes.log_delivery(read_job(job_id), push_access.push_caller("email"), None, "connection refused")
    rows = event_rows(text_of(signed_in.get(f"/admin/jobs/{job_id}")), "delivered")
    day = f"{utcnow():%Y-%m-%d}"
    assert len(rows) == 2, rows
    assert re.fullmatch(
        rf"{day} \d\d:\d\d:\d\d delivered HTTP 500 running → running push:email 1 HTTP 500: boom", rows[0]
    )
    assert re.fullmatch(
        rf"{day} \d\d:\d\d:\d\d delivered no answer running → running push:email 1 connection refused", rows[1]
    )


def test_the_job_page_shows_the_trace_id_of_its_traceparent(signed_in, make_job):
    job_id = make_job(traceparent=TRACEPARENT, tracestate="vendor=1")
    body = text_of(signed_in.get(f"/admin/jobs/{job_id}"))
    assert re.search(r'data-field="trace_id"[^>]*>4bf92f3577b34da6a3ce929d0e0e4736</dd>', body)


def test_a_job_without_a_traceparent_shows_no_trace_id(signed_in, make_job):
    body = text_of(signed_in.get(f"/admin/jobs/{make_job()}"))
    assert "trace id" not in body and 'data-field="trace_id"' not in body
