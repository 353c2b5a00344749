"""The viewer role: people who may look but not act.

Every page opens for a viewer, the pages show a viewer no action, and the server refuses every action
a viewer sends with 403, even with a valid CSRF token, leaving everything as it was. Admins, made the
same way as before (``flask users create NAME``), act as before.
"""

from __future__ import annotations

import functools
import re
from datetime import timedelta

import pytest
from sqlalchemy import create_engine, text
from werkzeug.security import generate_password_hash

from queuelog.auth import keys
from queuelog.auth.users import verify_password
from queuelog.core.clock import utcnow
from queuelog.extensions import db
from queuelog.models import User, UserRole
from queuelog.queue import worker_processes
from queuelog.ui.auth import VIEWER_MAY_POST
from tests.support.scale import flask_command
from tests.support.ui import csrf_token, events_of, flashes, sign_in, text_of

# Each request runs in its own app context, as on a server (tests/support/ui.py).
pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")

VIEWER_NAME = "looker"
VIEWER_PASSWORD = "only looking, never touching"
# What a viewer's pages must not carry: a form that posts anywhere but sign-out, or a tick box to retry.
ACTION_FORM = re.compile(r'<form[^>]*method="post"[^>]*action="(?!/admin/logout")[^"]*"')


@functools.cache
def _viewer_password_hash() -> str:
    return generate_password_hash(VIEWER_PASSWORD, method="scrypt")


@pytest.fixture
def viewer(viewer_client):
    """The test client signed in as a viewer (tests/support/ui.py)."""
    return viewer_client


@pytest.fixture
def jobs_in_every_state(make_job, failed_job):
    """One job per status (a failed one through the API, so its page has a reason), by status."""
    made = {"failed": failed_job(error="SMTPRecipientsRefused: 550 mailbox unavailable")}  # first: claimed next
    made.update({status: make_job(status=status) for status in ("pending", "running", "completed", "cancelled")})
    made["stalled"] = make_job(status="running", lease_expires_at=utcnow().replace(year=2020))
    made["scheduled"] = make_job(run_at=utcnow() + timedelta(hours=1))  # the Scheduled page's "Run now"
    return made


# --- creating viewers --------------------------------------------------------------------------


def test_users_create_with_role_viewer_makes_a_viewer(runner, app):
    result = runner.invoke(
        args=["users", "create", "looker", "--password-stdin", "--role", "viewer"], input="a long passphrase\n"
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == "created viewer looker\n"
    assert verify_password("looker", "a long passphrase").role == "viewer"


def test_users_create_without_a_role_makes_an_admin_as_before(runner, app):
    result = runner.invoke(args=["users", "create", "ops", "--password-stdin"], input="a long passphrase\n")
    assert result.stdout == "created admin ops\n"
    assert verify_password("ops", "a long passphrase").role == "admin"


def test_users_create_refuses_a_role_that_does_not_exist(runner, app):
    result = runner.invoke(
        args=["users", "create", "ops", "--password-stdin", "--role", "owner"], input="a long passphrase\n"
    )
    assert result.exit_code == 2
    assert "'owner' is not one of 'admin', 'viewer'" in result.output
    assert verify_password("ops", "a long passphrase") is None


def test_users_list_shows_each_users_role(runner, app):
    runner.invoke(args=["users", "create", "ops", "--password-stdin"], input="a long passphrase\n")
    runner.invoke(
        args=["users", "create", "looker", "--password-stdin", "--role", "viewer"], input="a long passphrase\n"
    )
    header, *rows = runner.invoke(args=["users", "list"]).stdout.splitlines()
    assert header.split("\t")[:2] == ["username", "role"]
    assert [row.split("\t")[:2] for row in rows] == [["looker", "viewer"], ["ops", "admin"]]


def test_users_made_before_roles_existed_stay_admins(tmp_path):
    url = f"sqlite:///{tmp_path / 'before-roles.db'}"
    env = {"QUEUELOG_DATABASE_URL": url, "QUEUELOG_AUTO_MIGRATE": "false", "QUEUELOG_SECRET_KEY": "roles-test"}
    before = flask_command(env, "db", "upgrade", "3afa1fd883bf")  # the revision before the role column
    assert before.returncode == 0, before.stderr
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO users (username, password_hash, created_at) "
                    "VALUES ('old-admin', 'scrypt:x', '2026-11-01 00:00:00')"
                )
            )
        upgraded = flask_command(env, "db", "upgrade")
        assert upgraded.returncode == 0, upgraded.stderr
        with engine.connect() as conn:
            assert conn.execute(text("SELECT role FROM users WHERE username = 'old-admin'")).scalar_one() == "admin"
    finally:
        engine.dispose()


# --- a viewer looks ----------------------------------------------------------------------------


def test_a_viewer_signs_in_and_out_like_an_admin(client, app):
    db.session.add(
        User(
            username=VIEWER_NAME, password_hash=_viewer_password_hash(), created_at=utcnow(), role=UserRole.VIEWER.value
        )
    )
    db.session.commit()
    signed = sign_in(client, VIEWER_NAME, VIEWER_PASSWORD)
    assert signed.status_code == 302 and signed.headers["Location"] == "/admin"
    assert client.get("/admin").status_code == 200
    out = client.post("/admin/logout", data={"csrf_token": csrf_token(client, "/admin")})
    assert out.status_code == 302
    assert client.get("/admin").status_code == 302  # signed out: back to the sign-in form


@pytest.mark.parametrize(
    "page",
    [
        "/admin",
        "/admin/jobs",
        "/admin/jobs?status=failed",
        "/admin/workers",
        "/admin/keys",
        "/admin/types",
        "/admin/types/email",
        "/admin/scheduled",
        "/admin/errors",
    ],
)
def test_every_page_opens_for_a_viewer(viewer, jobs_in_every_state, make_key, page):
    make_key("worker", "worker-b")
    response = viewer.get(page)
    assert response.status_code == 200
    assert '<span class="role">viewer</span>' in text_of(response)


@pytest.mark.parametrize("status", ["pending", "running", "stalled", "completed", "failed", "cancelled"])
def test_a_job_page_opens_for_a_viewer_in_every_state(viewer, jobs_in_every_state, status):
    response = viewer.get(f"/admin/jobs/{jobs_in_every_state[status]}")
    assert response.status_code == 200
    assert "View only: your account cannot change jobs." in text_of(response)


@pytest.mark.parametrize(
    "page",
    [
        "/admin",
        "/admin/jobs",
        "/admin/jobs?status=failed",
        "/admin/workers",
        "/admin/keys",
        "/admin?partial=1",
        "/admin/jobs?partial=1",
        "/admin/types",
        "/admin/types/email",
        "/admin/scheduled",
        "/admin/scheduled?partial=1",
        "/admin/errors",
        "/admin/errors?partial=1",
    ],
)
def test_a_viewers_pages_carry_no_action(viewer, jobs_in_every_state, make_key, page):
    make_key("worker", "worker-b")
    body = text_of(viewer.get(page))
    assert not ACTION_FORM.search(body), ACTION_FORM.search(body).group(0)
    for control in (
        'type="checkbox"',
        "Reap now",
        "Retry selected",
        "Retry all",
        "Revoke",
        "Create a key",
        'form="bulk-retry"',
        "Save limits",
        "Remove every limit",
        "Cancel all",
        "Delete",
        "Cancel selected",
    ):
        assert control not in body, control


@pytest.mark.parametrize("status", ["pending", "running", "failed", "cancelled"])
def test_a_viewers_job_page_offers_no_retry_cancel_or_give_back(viewer, jobs_in_every_state, status):
    body = text_of(viewer.get(f"/admin/jobs/{jobs_in_every_state[status]}"))
    assert not ACTION_FORM.search(body)
    assert not re.search(r'action="/admin/jobs/\d+/(retry|cancel|release)"', body)


def test_a_viewer_sees_each_types_pause_limits_and_history_but_no_control(viewer, client, admin):
    client.patch("/types/email", headers=admin, json={"paused": True, "concurrency_limit": 3})
    listed = text_of(viewer.get("/admin/types"))
    row = re.search(r'<tr data-type="email">(.*?)</tr>', listed, re.S).group(1)
    assert ">paused<" in row and ">3<" in row and "<form" not in row and "<button" not in row
    page = text_of(viewer.get("/admin/types/email"))
    assert "View only: your account cannot change types." in page
    assert "concurrency limit: none → 3" in page and "state: active → paused" in page
    assert 'name="concurrency_limit"' not in page and not ACTION_FORM.search(page)


def test_an_admins_pages_still_carry_the_actions(signed_in, jobs_in_every_state):
    assert "Reap now" in text_of(signed_in.get("/admin"))
    jobs_page = text_of(signed_in.get("/admin/jobs"))
    assert "Retry selected" in jobs_page and 'type="checkbox" form="bulk-retry"' in jobs_page
    assert 'action="/admin/jobs/retry"' in jobs_page
    assert f'action="/admin/jobs/{jobs_in_every_state["failed"]}/retry"' in text_of(
        signed_in.get(f"/admin/jobs/{jobs_in_every_state['failed']}")
    )
    assert '<span class="role">' not in jobs_page


# --- a viewer cannot act -----------------------------------------------------------------------


def _action_routes(app) -> list:
    """Every route of the pages that takes a POST, but signing in and out."""
    return sorted(
        (
            rule
            for rule in app.url_map.iter_rules()
            if rule.endpoint.startswith("ui.") and "POST" in rule.methods and rule.endpoint not in VIEWER_MAY_POST
        ),
        key=lambda rule: rule.rule,
    )


def test_the_action_routes_are_the_ones_the_pages_offer(app):
    # A floor, not the whole list: a route added later is refused to viewers by the same guard.
    assert {rule.endpoint for rule in _action_routes(app)} >= {
        "ui.reap_now",
        "ui.retry_jobs",
        "ui.retry_job",
        "ui.cancel_job",
        "ui.release_job",
        "ui.run_job_now",
        "ui.create_api_key",
        "ui.revoke_api_key",
        "ui.pause_type",
        "ui.resume_type",
        "ui.limit_type",
        "ui.clear_type_limits",
        "ui.bulk_jobs",
    }


def _form_for(endpoint: str, jobs: dict) -> dict:
    """What the page's own form would send to ``endpoint``, so only the role decides the answer."""
    return {
        "ui.retry_jobs": {"scope": "selected", "job_id": [jobs["failed"]]},
        "ui.bulk_jobs": {"do": "delete-selected", "job_id": [jobs["failed"]], "confirmed": "yes"},
        "ui.revoke_api_key": {"confirmed": "yes"},
        "ui.quiet_worker_process": {"confirmed": "yes"},
        "ui.stop_worker_process": {"confirmed": "yes"},
        "ui.create_api_key": {"name": "sneaky", "role": "admin", "max_priority": "", "types": ""},
        "ui.limit_type": {"concurrency_limit": "1", "rate_jobs": "", "rate_seconds": "", "key_concurrency_limit": ""},
    }.get(endpoint, {})


def test_every_action_a_viewer_sends_is_refused_with_403_even_with_a_valid_csrf_token(
    app, viewer, jobs_in_every_state, make_key, read_job
):
    worker_b = keys.authenticate(make_key("worker", "worker-b"))
    process = worker_processes.register(worker_b, worker_processes.NewProcess("box", 1, "v1", 1, ()))
    values = {
        "job_id": jobs_in_every_state["failed"],
        "name": "worker-b",
        "job_type": "email",
        "process_id": process.id,
    }
    before = {job_id: read_job(job_id) for job_id in jobs_in_every_state.values()}
    token = csrf_token(viewer, "/admin")
    for rule in _action_routes(app):
        assert set(rule.arguments) <= set(values), f"no sample value for {rule.rule}: add one above"
        path = rule.build({name: values[name] for name in rule.arguments})[1]
        response = viewer.post(path, data={**_form_for(rule.endpoint, jobs_in_every_state), "csrf_token": token})
        assert response.status_code == 403, (rule.rule, response.status_code)
        assert "may look at these pages but not change anything" in text_of(response)
    assert {job_id: read_job(job_id) for job_id in jobs_in_every_state.values()} == before
    assert all(event.actor != f"admin:{VIEWER_NAME}" for job_id in before for event in events_of(job_id))
    keys_page = text_of(viewer.get("/admin/keys"))
    assert 'data-key="sneaky"' not in keys_page and "revoked" not in keys_page
    assert "No change yet" in text_of(viewer.get("/admin/types/email"))  # no pause, no limit, no history
    assert worker_processes.get(worker_b, process.id).command == "run"


def test_the_same_forms_from_an_admin_act(signed_in, jobs_in_every_state, read_job):
    failed = jobs_in_every_state["failed"]
    token = csrf_token(signed_in, "/admin")
    response = signed_in.post(f"/admin/jobs/{failed}/retry", data={"csrf_token": token}, follow_redirects=True)
    assert response.status_code == 200 and "back in the queue" in " ".join(flashes(response))
    assert read_job(failed).status == "pending"


def test_a_viewers_refused_action_is_a_readable_page(viewer, jobs_in_every_state):
    token = csrf_token(viewer, "/admin")
    response = viewer.post("/admin/reap", data={"csrf_token": token})
    assert response.status_code == 403
    assert response.mimetype == "text/html"
    assert "Ask an admin to do this." in text_of(response)
