"""flask types: list, pause, resume, limit. One line per change, clear errors with a non-zero exit."""

from __future__ import annotations

import pytest

from tests.support.database import JOB_TYPES


def types(runner, *args):
    return runner.invoke(args=["types", *args])


def test_list_prints_a_header_and_one_line_per_configured_type(runner, make_job):
    make_job(type="report", status="pending")
    make_job(type="report", status="running")
    result = types(runner, "list")
    assert result.exit_code == 0, result.output
    header, *lines = result.stdout.splitlines()
    assert header.split("\t") == [
        "type",
        "state",
        "concurrency",
        "rate",
        "key_concurrency",
        "pending",
        "running",
        "unique_scope",
    ]
    assert [line.split("\t")[0] for line in lines] == JOB_TYPES
    assert lines[JOB_TYPES.index("report")].split("\t") == ["report", "active", "-", "-", "-", "1", "1", "producer"]


def test_pause_and_resume_print_one_line_and_change_the_type(runner, client, admin):
    result = types(runner, "pause", "email")
    assert (result.exit_code, result.stdout) == (0, "paused email\n")
    assert client.get("/types/email", headers=admin).get_json()["paused"] is True
    assert types(runner, "list").stdout.splitlines()[1].startswith("email\tpaused\t")
    result = types(runner, "resume", "email")
    assert (result.exit_code, result.stdout) == (0, "resumed email\n")
    assert client.get("/types/email", headers=admin).get_json()["paused"] is False


def test_limit_sets_the_limits_given_and_prints_the_type(runner, client, admin):
    result = types(runner, "limit", "email", "--concurrency", "3", "--rate", "20/2", "--key-concurrency", "1")
    assert result.exit_code == 0, result.output
    assert result.stdout == "email\tactive\t3\t20/2\t1\t0\t0\tproducer\n"
    shown = client.get("/types/email", headers=admin).get_json()
    assert (shown["concurrency_limit"], shown["rate_limit"], shown["key_concurrency_limit"]) == (
        3,
        {"jobs": 20, "per_seconds": 2},
        1,
    )


def test_limit_leaves_the_limits_not_named_as_they_are(runner, client, admin):
    types(runner, "limit", "email", "--concurrency", "3", "--key-concurrency", "2")
    assert types(runner, "limit", "email", "--concurrency", "5").exit_code == 0
    shown = client.get("/types/email", headers=admin).get_json()
    assert (shown["concurrency_limit"], shown["key_concurrency_limit"]) == (5, 2)


def test_limit_clear_removes_all_three_and_keeps_a_pause(runner, client, admin):
    types(runner, "pause", "email")
    types(runner, "limit", "email", "--concurrency", "3", "--rate", "5/60", "--key-concurrency", "2")
    result = types(runner, "limit", "email", "--clear")
    assert result.exit_code == 0, result.output
    shown = client.get("/types/email", headers=admin).get_json()
    assert (shown["paused"], shown["concurrency_limit"], shown["rate_limit"], shown["key_concurrency_limit"]) == (
        True,
        None,
        None,
        None,
    )


def test_changes_from_the_command_line_are_in_the_history_with_who_made_them(runner, client, admin):
    types(runner, "limit", "email", "--concurrency", "3")
    [entry] = client.get("/types/email/history", headers=admin).get_json()["history"]
    assert entry["actor"].startswith("cli")
    assert entry["changes"] == {"concurrency_limit": {"old": None, "new": 3}}


@pytest.mark.parametrize(
    "args, mentions",
    [
        (["pause", "parcel"], "not on this server's QUEUELOG_JOB_TYPES"),
        (["resume", "parcel"], "not on this server's QUEUELOG_JOB_TYPES"),
        (["limit", "parcel", "--concurrency", "1"], "not on this server's QUEUELOG_JOB_TYPES"),
        (["limit", "email"], "give --concurrency, --rate or --key-concurrency, or --clear"),
        (["limit", "email", "--clear", "--concurrency", "2"], "give it alone"),
        (["limit", "email", "--concurrency", "0"], "--concurrency"),
        (["limit", "email", "--key-concurrency", "-1"], "--key-concurrency"),
        (["limit", "email", "--rate", "20"], "is not N/S"),
        (["limit", "email", "--rate", "0/2"], "N must be between 1"),
        (["limit", "email", "--rate", "20/0"], "S must be between 1 and 86400"),
        (["limit", "email", "--rate", "20/86401"], "S must be between 1 and 86400"),
    ],
)
def test_a_bad_command_fails_with_a_clear_message_and_changes_nothing(runner, client, admin, args, mentions):
    result = types(runner, *args)
    assert result.exit_code != 0
    assert mentions in result.output
    assert client.get("/types/email/history", headers=admin).get_json() == {"history": []}
