"""The Workers page's processes: online and gone apart, what each holds and finished, Quiet and Stop."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from sqlalchemy import update

from queuelog.auth import keys
from queuelog.core.clock import utcnow
from queuelog.extensions import db
from queuelog.models import WorkerProcess
from queuelog.queue import worker_processes
from tests.support.ui import csrf_token, flashes, post_form, text_of

# Each request runs in its own app context, as on a server (tests/support/ui.py).
pytestmark = pytest.mark.usefixtures("requests_in_their_own_app_context")

table = WorkerProcess.__table__


@pytest.fixture
def register(make_key):
    """register(key_name, host, beat_ago=None) → a process id of that worker key (made on first use)."""
    callers: dict = {}

    def _register(key_name: str, host: str, beat_ago: timedelta | None = None) -> int:
        if key_name not in callers:
            callers[key_name] = keys.authenticate(make_key("worker", key_name))
        process_id = worker_processes.register(
            callers[key_name],
            worker_processes.NewProcess(host=host, pid=100, version="queuelog-worker 0.1.0", concurrency=2, types=()),
        ).id
        if beat_ago is not None:
            with db.engine.begin() as conn:
                conn.execute(update(table).where(table.c.id == process_id).values(heartbeat_at=utcnow() - beat_ago))
        return process_id

    return _register


def _section(body: str, start: str, end: str) -> str:
    begin = body.index(start)
    return body[begin : body.index(end, begin)]


def command_of(process_id: int) -> str:
    with db.engine.connect() as conn:
        return conn.execute(db.select(table.c.command).where(table.c.id == process_id)).scalar_one()


def test_online_and_gone_processes_are_listed_apart(signed_in, register):
    register("mailer-1", "box-online")
    register("mailer-1", "box-gone", beat_ago=timedelta(minutes=5))
    body = text_of(signed_in.get("/admin/workers"))
    online = _section(body, 'id="processes-title"', 'id="gone-title"')
    gone = _section(body, 'id="gone-title"', 'id="keys-title"')
    assert "box-online:100" in online and "box-gone" not in online
    assert "box-gone:100" in gone


def test_a_process_shows_the_jobs_it_holds_and_what_it_finished_in_the_last_hour_and_day(signed_in, register, make_job):
    process_id = register("mailer-1", "box-1")
    now = utcnow()
    held = make_job(status="running", worker_id="mailer-1", process_id=process_id)
    make_job(status="running", worker_id="mailer-1")  # claimed without naming a process: not this one's
    make_job(status="completed", process_id=process_id, updated_at=now - timedelta(minutes=5))
    make_job(status="completed", process_id=process_id, updated_at=now - timedelta(hours=5))
    make_job(status="completed", process_id=process_id, updated_at=now - timedelta(days=2))
    make_job(status="failed", process_id=process_id, updated_at=now - timedelta(hours=2))
    row = _section(text_of(signed_in.get("/admin/workers")), f'data-process="{process_id}"', "</tr>")
    assert re.findall(r'href="/admin/jobs/(\d+)"', row) == [str(held)]
    cells = re.findall(r'<td class="num[^"]*">([^<]*)</td>', row)
    assert cells == ["1 / 2", "0 / 1"]


def test_a_revoked_keys_processes_are_not_listed(signed_in, register):
    register("retired", "old-box")
    keys.revoke_key("retired")
    assert "old-box" not in text_of(signed_in.get("/admin/workers"))


def test_stop_asks_on_a_page_naming_the_process_then_tells_it(signed_in, register):
    process_id = register("mailer-1", "box-1")
    asked = post_form(signed_in, f"/admin/workers/{process_id}/stop", page="/admin/workers")
    assert asked.status_code == 200 and "Stop worker process box-1:100?" in text_of(asked)
    assert command_of(process_id) == "run"
    done = post_form(
        signed_in,
        f"/admin/workers/{process_id}/stop",
        {"confirmed": "yes"},
        page="/admin/workers",
        follow_redirects=True,
    )
    assert command_of(process_id) == "stop"
    assert any("Told worker process box-1:100 to stop" in message for message in flashes(done))


def test_quiet_on_a_gone_process_changes_nothing_and_says_why(signed_in, register):
    process_id = register("mailer-1", "box-1", beat_ago=timedelta(minutes=5))
    done = post_form(
        signed_in,
        f"/admin/workers/{process_id}/quiet",
        {"confirmed": "yes"},
        page="/admin/workers",
        follow_redirects=True,
    )
    assert command_of(process_id) == "run"
    assert any("is gone" in message for message in flashes(done))


def test_a_viewer_sees_the_processes_but_no_action_and_is_refused_with_a_valid_token(viewer_client, register):
    process_id = register("mailer-1", "box-1")
    body = text_of(viewer_client.get("/admin/workers"))
    assert "box-1:100" in body and "/quiet" not in body and "/stop" not in body
    token = csrf_token(viewer_client, "/admin/workers")
    for command in ("quiet", "stop"):
        refused = viewer_client.post(
            f"/admin/workers/{process_id}/{command}", data={"csrf_token": token, "confirmed": "yes"}
        )
        assert refused.status_code == 403
    assert command_of(process_id) == "run"
