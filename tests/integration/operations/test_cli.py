"""The operator commands: keys, users, reap. Script-friendly output and exit codes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select

from queuelog.auth.users import verify_password
from queuelog.core.clock import utcnow
from queuelog.models import ApiKey, User
from tests.support.api import bearer
from tests.support.factories import assert_problem, event_rows, expire_lease
from tests.support.paths import REPO_ROOT
from tests.support.ui import sign_in

ROOT = REPO_ROOT
KEY_LINE = re.compile(r"ql_[A-Za-z0-9_-]{22,}\n")
REAP_LINE = re.compile(r"(reaped|would reap) \d+ jobs: \d+ requeued, \d+ failed, \d+ quarantined\n")


def _create(runner, *args):
    return runner.invoke(args=["keys", "create", *args])


# --- keys ----------------------------------------------------------------------------------------


def test_keys_create_prints_the_secret_alone_and_it_works_as_a_bearer_key(runner, client):
    result = _create(runner, "billing", "--role", "producer")
    assert result.exit_code == 0, result.output
    assert KEY_LINE.fullmatch(result.stdout)
    secret = result.stdout.strip()
    assert client.post("/jobs", json={"type": "email"}, headers=bearer(secret)).status_code == 201


@pytest.mark.parametrize("role, path, method", [("worker", "/jobs/claim", "POST"), ("admin", "/jobs", "GET")])
def test_keys_create_gives_the_key_its_role(runner, client, role, path, method):
    secret = _create(runner, f"a-{role}", "--role", role).stdout.strip()
    assert client.open(path, method=method, headers=bearer(secret)).status_code in {200, 204}


def test_keys_create_with_max_priority_and_types(runner, client):
    secret = _create(
        runner, "urgent-reports", "--role", "producer", "--max-priority", "critical", "--types", "report,noop"
    ).stdout.strip()
    headers = bearer(secret)
    assert client.post("/jobs", json={"type": "report", "priority": "critical"}, headers=headers).status_code == 201
    assert_problem(client.post("/jobs", json={"type": "email"}, headers=headers), 403)


@pytest.mark.parametrize(
    "args, mentions",
    [
        (["x", "--role", "superuser"], "--role"),
        (["x"], "--role"),
        (["x", "--role", "producer", "--max-priority", "extreme"], "--max-priority"),
        (["bad name!", "--role", "producer"], "name"),
        (["x", "--role", "producer", "--types", ""], "types"),  # an empty limit must not mean "any type"
        (["x", "--role", "worker", "--types", " , "], "types"),
    ],
)
def test_keys_create_with_bad_options_fails_with_a_clear_message(runner, args, mentions):
    result = _create(runner, *args)
    assert result.exit_code != 0
    assert mentions in result.output
    assert "Traceback" not in result.output
    assert not KEY_LINE.search(result.stdout)


def test_keys_create_refuses_a_duplicate_name(runner):
    assert _create(runner, "dup", "--role", "worker").exit_code == 0
    result = _create(runner, "dup", "--role", "worker")
    assert result.exit_code == 1
    assert "already exists" in result.output


def test_keys_list_shows_the_prefix_and_never_the_secret(runner):
    secret = _create(runner, "listed", "--role", "worker").stdout.strip()
    result = runner.invoke(args=["keys", "list"])
    assert result.exit_code == 0
    line = next(line for line in result.stdout.splitlines() if line.startswith("listed"))
    assert "worker" in line and "active" in line
    assert secret[:9] in line  # ql_ and the first characters: enough to recognise it
    assert secret not in result.stdout and secret[3:] not in result.stdout


def test_keys_list_starts_with_a_header_row(runner):
    _create(runner, "listed", "--role", "worker")
    header = runner.invoke(args=["keys", "list"]).stdout.splitlines()[0]
    assert header.split("\t") == [
        "name",
        "role",
        "max_priority",
        "types",
        "enqueue_rate",
        "max_pending",
        "prefix",
        "created",
        "last_used",
        "state",
    ]


@pytest.mark.parametrize("role, ceiling", [("producer", "medium"), ("worker", "-"), ("admin", "-")])
def test_keys_list_shows_a_priority_ceiling_only_where_it_binds(runner, role, ceiling):
    _create(runner, "k", "--role", role)
    line = next(line for line in runner.invoke(args=["keys", "list"]).stdout.splitlines() if line.startswith("k\t"))
    assert line.split("\t")[2] == ceiling


def test_keys_revoke_refuses_the_key_from_the_next_request(runner, client):
    secret = _create(runner, "leaving", "--role", "producer").stdout.strip()
    assert client.get("/jobs", headers=bearer(secret)).status_code == 200
    result = runner.invoke(args=["keys", "revoke", "leaving"])
    assert (result.exit_code, result.stdout) == (0, "revoked leaving\n")
    assert_problem(client.get("/jobs", headers=bearer(secret)), 401)
    listed = runner.invoke(args=["keys", "list"]).stdout
    assert "revoked" in next(line for line in listed.splitlines() if line.startswith("leaving"))


def test_keys_revoke_of_an_unknown_key_fails(runner):
    result = runner.invoke(args=["keys", "revoke", "nobody"])
    assert result.exit_code == 1
    assert "nobody" in result.output


# --- users ---------------------------------------------------------------------------------------


def test_users_create_reads_the_password_from_stdin(runner, app):
    result = runner.invoke(args=["users", "create", "ops", "--password-stdin"], input="a long passphrase\n")
    assert result.exit_code == 0, result.output
    assert result.stdout == "created admin ops\n"
    assert "passphrase" not in result.output
    assert verify_password("ops", "a long passphrase") is not None
    assert verify_password("ops", "wrong") is None


def test_users_create_refuses_a_short_password(runner):
    result = runner.invoke(args=["users", "create", "ops", "--password-stdin"], input="short\n")
    assert result.exit_code == 1
    assert "password" in result.output


def test_users_create_stores_only_a_hash(runner, app):
    runner.invoke(args=["users", "create", "ops", "--password-stdin"], input="a long passphrase\n")
    from queuelog.extensions import db

    stored = db.session.execute(select(User.password_hash).where(User.username == "ops")).scalar_one()
    assert "a long passphrase" not in stored and stored.startswith("scrypt:")


def _make_user(runner, name: str, password: str = "a long passphrase") -> None:
    result = runner.invoke(args=["users", "create", name, "--password-stdin"], input=password + "\n")
    assert result.exit_code == 0, result.output


def test_users_list_prints_a_header_and_one_row_per_user(runner):
    _make_user(runner, "ops")
    _make_user(runner, "night-owl")
    result = runner.invoke(args=["users", "list"])
    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.splitlines()
    assert header.split("\t") == ["username", "role", "created", "sessions", "failed_sign_ins"]
    assert [row.split("\t")[0] for row in rows] == ["night-owl", "ops"]
    assert all(re.fullmatch(r"[^\t]+\tadmin\t\d{4}-\d\d-\d\dT[^\t]+Z\t0\t0", row) for row in rows), rows


def test_users_list_with_no_users_prints_only_the_header(runner):
    result = runner.invoke(args=["users", "list"])
    assert result.exit_code == 0
    assert result.stdout == "username\trole\tcreated\tsessions\tfailed_sign_ins\n"


def test_users_delete_removes_the_user(runner, app):
    _make_user(runner, "ops")
    result = runner.invoke(args=["users", "delete", "ops"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "deleted admin ops, ended 0 sessions\n"
    assert verify_password("ops", "a long passphrase") is None


def test_users_delete_names_a_viewer_as_a_viewer(runner):
    result = runner.invoke(
        args=["users", "create", "auditor", "--role", "viewer", "--password-stdin"], input="a long passphrase\n"
    )
    assert result.exit_code == 0, result.output
    result = runner.invoke(args=["users", "delete", "auditor"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "deleted viewer auditor, ended 0 sessions\n"


def test_users_set_password_reads_the_new_password_from_stdin(runner, app):
    _make_user(runner, "ops")
    result = runner.invoke(args=["users", "set-password", "ops", "--password-stdin"], input="another passphrase\n")
    assert result.exit_code == 0, result.output
    assert result.stdout == "changed the password of ops, ended 0 sessions\n"
    assert "another" not in result.output
    assert verify_password("ops", "another passphrase") is not None
    assert verify_password("ops", "a long passphrase") is None


def test_users_set_password_refuses_a_short_password_and_keeps_the_old_one(runner, app):
    _make_user(runner, "ops")
    result = runner.invoke(args=["users", "set-password", "ops", "--password-stdin"], input="short\n")
    assert result.exit_code == 1
    assert "password" in result.output and "Traceback" not in result.output
    assert verify_password("ops", "a long passphrase") is not None


def test_users_unlock_clears_the_failed_sign_ins_of_that_user(runner, client):
    _make_user(runner, "ops")
    for _ in range(3):
        sign_in(client, username="ops", password="wrong password!")
    assert runner.invoke(args=["users", "list"]).stdout.splitlines()[1].endswith("\t3")
    result = runner.invoke(args=["users", "unlock", "ops"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "unlocked ops, cleared 3 failed sign-ins\n"
    assert runner.invoke(args=["users", "list"]).stdout.splitlines()[1].endswith("\t0")


@pytest.mark.parametrize(
    "args", [["delete", "nobody"], ["unlock", "nobody"], ["set-password", "nobody", "--password-stdin"]]
)
def test_users_commands_on_an_unknown_user_fail_with_a_clear_message(runner, args):
    result = runner.invoke(args=["users", *args], input="a long passphrase\n")
    assert result.exit_code == 1
    assert "no user named 'nobody'" in result.output
    assert "Traceback" not in result.output


# --- reap ----------------------------------------------------------------------------------------


def test_reap_prints_one_line_and_exits_0(runner, make_job, read_job):
    stuck = make_job(status="running")
    expire_lease(stuck)
    result = runner.invoke(args=["reap"])
    assert result.exit_code == 0
    assert result.stdout == "reaped 1 jobs: 1 requeued, 0 failed, 0 quarantined\n"
    assert read_job(stuck).status == "pending"


def test_reap_with_nothing_to_do_still_exits_0(runner, make_job):
    make_job(status="running")  # lease still running
    result = runner.invoke(args=["reap"])
    assert (result.exit_code, result.stdout) == (0, "reaped 0 jobs: 0 requeued, 0 failed, 0 quarantined\n")


def test_reap_counts_each_outcome(runner, make_job):
    expire_lease(make_job(status="running"))
    expire_lease(make_job(status="running", retry_count=3, max_retries=3))
    expire_lease(make_job(status="running", stall_count=2))
    result = runner.invoke(args=["reap"])
    assert REAP_LINE.fullmatch(result.stdout)
    assert result.stdout == "reaped 3 jobs: 1 requeued, 1 failed, 1 quarantined\n"


def test_reap_dry_run_changes_nothing(runner, make_job, read_job):
    stuck = make_job(status="running")
    expire_lease(stuck)
    before, events_before = read_job(stuck), len(event_rows(stuck))
    result = runner.invoke(args=["reap", "--dry-run"])
    assert result.exit_code == 0
    assert result.stdout == "would reap 1 jobs: 1 requeued, 0 failed, 0 quarantined\n"
    assert read_job(stuck) == before
    assert len(event_rows(stuck)) == events_before


def test_reap_older_than_takes_jobs_claimed_long_ago_even_with_a_live_lease(runner, make_job, read_job):
    long_ago = utcnow() - timedelta(seconds=120)
    old = make_job(status="running", claimed_at=long_ago)
    recent = make_job(status="running", claimed_at=utcnow() - timedelta(seconds=10))
    assert runner.invoke(args=["reap"]).stdout.startswith("reaped 0 jobs")
    result = runner.invoke(args=["reap", "--older-than", "60"])
    assert result.stdout == "reaped 1 jobs: 1 requeued, 0 failed, 0 quarantined\n"
    assert (read_job(old).status, read_job(recent).status) == ("pending", "running")


@pytest.mark.parametrize("value", ["0", "-5", "soon"])
def test_reap_refuses_a_bad_older_than(runner, value):
    result = runner.invoke(args=["reap", "--older-than", value])
    assert result.exit_code == 2
    assert "--older-than" in result.output


# --- the real command line -----------------------------------------------------------------------


def test_flask_keys_create_from_the_repo_root_creates_the_schema_and_prints_only_the_key(tmp_path):
    database = tmp_path / "fresh.db"
    env = {name: value for name, value in os.environ.items() if not name.startswith("QUEUELOG_")}
    env.update(QUEUELOG_DATABASE_URL=f"sqlite:///{database}", QUEUELOG_JOB_TYPES="email,report")
    flask = Path(sys.executable).with_name("flask")
    completed = subprocess.run(
        [str(flask), "--app", "app", "keys", "create", "ci-producer", "--role", "producer"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    assert KEY_LINE.fullmatch(completed.stdout), completed.stdout
    engine = create_engine(f"sqlite:///{database}")
    try:
        with engine.connect() as conn:
            row = conn.execute(select(ApiKey.__table__).where(ApiKey.__table__.c.name == "ci-producer")).one()
    finally:
        engine.dispose()
    assert row.role == "producer"
    assert completed.stdout.strip().startswith(row.prefix)
