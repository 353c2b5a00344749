"""Helpers for the admin page tests: an admin account, signing in, and posting forms with their CSRF token.

A pytest plugin (``pytest_plugins`` in tests/conftest.py), so its fixtures (``admin_user``, ``signed_in``,
``viewer_client``, ``failed_job``, ``requests_in_their_own_app_context``) reach every test module without an
import; the plain helpers (``post_form``, ``sign_in``, ``text_of``, …) are imported as usual.

CSRF protection stays on in these tests (as in production): every POST carries the token that a page
of the same session rendered, exactly as a browser would send it.
"""

from __future__ import annotations

import functools
import html
import re
from datetime import datetime, timedelta

import pytest
from flask.testing import FlaskClient
from sqlalchemy import select
from werkzeug.security import generate_password_hash

from queuelog.auth import admin_sessions
from queuelog.core.clock import utcnow
from queuelog.extensions import db
from queuelog.models import JobEvent, User, UserRole
from queuelog.ui.auth import SESSION_TOKEN_KEY

ADMIN_NAME = "night-owl"
ADMIN_PASSWORD = "correct horse battery staple"
VIEWER_NAME = "onlooker"
_TOKEN = re.compile(r'name="csrf_token"(?: type="hidden")? value="([^"]+)"')


def csrf_token(client, page: str = "/admin/login") -> str:
    """The CSRF token of ``client``'s session, read from a rendered form like a browser would."""
    response = client.get(page)
    match = _TOKEN.search(response.get_data(as_text=True))
    assert match, f"no CSRF token on {page} (status {response.status_code})"
    return match.group(1)


def post_form(client, path: str, data: dict | None = None, page: str = "/admin/login", **kwargs):
    """POST ``data`` to ``path`` with a valid CSRF token for this client's session."""
    return client.post(path, data={**(data or {}), "csrf_token": csrf_token(client, page)}, **kwargs)


def sign_in(client, username: str = ADMIN_NAME, password: str = ADMIN_PASSWORD, next_url: str | None = None, **kwargs):
    """Submit the sign-in form; returns the response (302 on success)."""
    path = "/admin/login" + (f"?next={next_url}" if next_url is not None else "")
    return post_form(client, path, {"username": username, "password": password}, **kwargs)


@functools.cache
def _admin_password_hash() -> str:
    # scrypt is slow on purpose (about 0.1 s): hash the test password once per run, not once per test.
    return generate_password_hash(ADMIN_PASSWORD, method="scrypt")


@pytest.fixture
def admin_user(app):
    """An admin account (username, password), stored as ``flask users create`` stores it."""
    db.session.add(User(username=ADMIN_NAME, password_hash=_admin_password_hash(), created_at=utcnow()))
    db.session.commit()
    return ADMIN_NAME, ADMIN_PASSWORD


@pytest.fixture
def signed_in(client, admin_user):
    """The test client with the admin's session in its cookie (the sign-in form itself is tested apart)."""
    user_id = db.session.execute(db.select(User.id).filter_by(username=ADMIN_NAME)).scalar_one()
    db.session.rollback()  # end the read, so this session sees what the requests commit later
    with client.session_transaction() as session:
        session["_user_id"] = str(user_id)
        session["_fresh"] = True
        session[SESSION_TOKEN_KEY] = admin_sessions.start(user_id)  # the server-side half of a sign-in
    return client


@pytest.fixture
def viewer_client(client, app):
    """The test client signed in as a viewer, who may look but not act (a server-side session, as a sign-in makes)."""
    user = User(
        username=VIEWER_NAME, password_hash=_admin_password_hash(), created_at=utcnow(), role=UserRole.VIEWER.value
    )
    db.session.add(user)
    db.session.commit()
    user_id = user.id
    db.session.rollback()
    with client.session_transaction() as session:
        session["_user_id"] = str(user_id)
        session["_fresh"] = True
        session[SESSION_TOKEN_KEY] = admin_sessions.start(user_id)
    return client


def text_of(response) -> str:
    """The response body as text."""
    return response.get_data(as_text=True)


_SPAN_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def span_seconds(shown: str) -> tuple[int, int]:
    """A span as the pages show it ('45s', '4m 12s', '3h 05m', '2d 4h'): its seconds, and the seconds of its
    last unit (what the page floored away)."""
    parts = re.findall(r"(\d+)([dhms])", shown)
    assert parts, f"not a span: {shown!r}"
    return sum(int(n) * _SPAN_UNITS[unit] for n, unit in parts), _SPAN_UNITS[parts[-1][1]]


def shows_age(shown: str, age: timedelta, since: datetime) -> bool:
    """Whether ``shown`` (a page's '5m 02s ago') is ``age`` as of some moment from ``since`` until now.

    A page reads its own clock when it renders, later than the test's by however long the machine took to
    get there (seconds, on a loaded CI machine), so the test asks for a range, not one exact string.
    """
    seconds, unit = span_seconds(shown)
    elapsed = (utcnow() - since).total_seconds()
    return age.total_seconds() - unit < seconds <= age.total_seconds() + elapsed


def events_of(job_id: int) -> list:
    """The job's event rows as stored, oldest first (read on a fresh connection)."""
    with db.engine.connect() as conn:
        return conn.execute(select(JobEvent.__table__).where(JobEvent.job_id == job_id).order_by(JobEvent.id)).all()


def flashes(response) -> list[str]:
    """The flash messages a page shows."""
    return [html.unescape(m) for m in re.findall(r'<p class="flash flash-\w+">(.*?)</p>', text_of(response), re.S)]


@pytest.fixture
def failed_job(client, worker, enqueue, claim):
    """failed_job(error=..., **enqueue_body) → id of a job that went through the API to failed."""

    def _make(error: str = "boom", **body) -> int:
        job = enqueue(max_retries=0, **body)
        claimed = claim(types=[job["type"]])
        assert claimed["id"] == job["id"]
        response = client.post(
            f"/jobs/{job['id']}/fail",
            headers=worker,
            json={"claim_token": claimed["claim_token"], "error": error, "retryable": False},
        )
        assert response.status_code == 200, response.get_json()
        return job["id"]

    return _make


class _OwnContextClient(FlaskClient):
    """Runs each request in its own app context, as a server does.

    The ``app`` fixture keeps an app context open for the whole test, and a request pushed inside it
    would share its ``g`` with every other request of the test: the signed-in user and the CSRF token
    cached there would leak from one request into the next and hide session bugs.
    """

    def open(self, *args, **kwargs):
        with self.application.app_context():
            return super().open(*args, **kwargs)


@pytest.fixture
def requests_in_their_own_app_context(app):
    """Make the ``client`` fixture's requests independent of each other (see _OwnContextClient).

    A page test module asks for it for all its tests:
    ``pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")``.
    """
    previous = app.test_client_class
    app.test_client_class = _OwnContextClient
    yield
    app.test_client_class = previous


# --- reading what the pages show -----------------------------------------------------------------

#: A span as the dashboard shows it: "2h 05m", "3d 4h", "12s".
SPAN = re.compile(r"^(?:(\d+)d )?(?:(\d+)h )?(?:(\d+)m )?(?:(\d+)s)?$")


def seconds_of(shown: str) -> int:
    """'2h 05m' → 7500: the dashboard's span back to seconds (to its precision)."""
    days, hours, minutes, seconds = (int(part or 0) for part in SPAN.fullmatch(shown.strip()).groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def cells(body: str, job_type: str) -> dict[str, str]:
    """The list's row for a type: its cells' text by data-field."""
    row = re.search(rf'<tr data-type="{re.escape(job_type)}">(.*?)</tr>', body, re.S)
    assert row, f"no row for type {job_type}"
    return {
        name: _text(value)
        for name, value in re.findall(r'<td[^>]*data-field="(\w+)"[^>]*>(.*?)</td>', row.group(1), re.S)
    }


def _text(fragment: str) -> str:
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", fragment))).strip()


def history_rows(body: str) -> list[str]:
    """The type page's "who changed what" rows, as text, newest first."""
    return [_text(row) for row in re.findall(r"<tr data-change>(.*?)</tr>", body, re.S)]


def field_errors(body: str) -> list[str]:
    return [html.unescape(error) for error in re.findall(r'<span class="field-error">(.*?)</span>', body)]


def api_type(client, admin, job_type: str = "email") -> dict:
    response = client.get(f"/types/{job_type}", headers=admin)
    assert response.status_code == 200
    return response.get_json()
