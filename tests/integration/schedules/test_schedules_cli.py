"""flask schedules: list, create, pause, resume, delete, run. One line each, clear errors, non-zero exit."""

from __future__ import annotations

import re

import pytest

RFC3339 = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"


def schedules(runner, *args):
    return runner.invoke(args=["schedules", *args])


def test_create_prints_the_next_run_and_the_api_shows_every_option(runner, client, admin):
    result = schedules(
        runner,
        "create",
        "nightly-report",
        "--cron",
        "0 3 * * *",
        "--timezone",
        "Europe/Berlin",
        "--type",
        "report",
        "--payload",
        '{"kind": "daily"}',
        "--priority",
        "high",
        "--max-retries",
        "5",
        "--catch-up",
        "none",
    )
    assert result.exit_code == 0, result.output
    assert re.fullmatch(f"created nightly-report: next run at {RFC3339}\n", result.stdout)
    shown = client.get("/schedules/nightly-report", headers=admin).get_json()
    assert shown["cron"] == "0 3 * * *" and shown["timezone"] == "Europe/Berlin" and shown["catch_up"] == "none"
    assert shown["job"] == {"type": "report", "payload": {"kind": "daily"}, "priority": "high", "max_retries": 5}


def test_create_paused_with_an_interval(runner, client, admin):
    result = schedules(runner, "create", "fast", "--every-seconds", "10", "--type", "noop", "--paused")
    assert (result.exit_code, result.stdout) == (0, "created fast: paused\n")
    shown = client.get("/schedules/fast", headers=admin).get_json()
    assert shown["every_seconds"] == 10 and shown["paused"] is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cron", "61 * * * *", "--type", "noop"], "cron: is not a valid cron expression: bad minute"),
        (["--cron", "* * * * *", "--type", "nope"], "job/type: must be a job type on this server's QUEUELOG_JOB_TYPES"),
        (["--cron", "* * * * *", "--type", "noop", "--timezone", "Nowhere/Town"], "timezone: unknown timezone"),
        (
            ["--cron", "* * * * *", "--type", "noop", "--timezone", "localtime"],
            "timezone: 'localtime' means different things on different hosts",
        ),
        (["--type", "noop"], "cron: give either cron (a cron expression) or every_seconds"),
        (["--cron", "* * * * *", "--every-seconds", "5", "--type", "noop"], "cron: give either cron or every_seconds"),
        (["--every-seconds", "0", "--type", "noop"], "every_seconds: must be an integer from 1 to 86,400"),
        (["--cron", "* * * * *", "--type", "noop", "--payload", "{nope"], "payload: not valid JSON"),
        (["--cron", "* * * * *", "--type", "noop", "--payload", "[1]"], "job/payload: must be a JSON object"),
    ],
)
def test_bad_input_is_a_clear_error_and_a_non_zero_exit(runner, args, message):
    result = schedules(runner, "create", "bad", *args)
    assert result.exit_code != 0
    assert message in result.output
    assert schedules(runner, "list").stdout.splitlines()[1:] == []


def test_a_name_in_use_is_refused(runner):
    assert schedules(runner, "create", "twice", "--every-seconds", "5", "--type", "noop").exit_code == 0
    result = schedules(runner, "create", "twice", "--every-seconds", "5", "--type", "noop")
    assert result.exit_code != 0 and "a schedule named 'twice' already exists" in result.output


def test_list_prints_a_header_and_one_line_per_schedule(runner):
    schedules(runner, "create", "b-cron", "--cron", "@daily", "--timezone", "Europe/Berlin", "--type", "report")
    schedules(runner, "create", "a-interval", "--every-seconds", "30", "--type", "noop", "--paused")
    header, *lines = schedules(runner, "list").stdout.splitlines()
    assert header.split("\t") == ["name", "timing", "timezone", "type", "state", "next_run", "last_run", "last_job"]
    assert lines[0].split("\t") == ["a-interval", "every 30 s", "UTC", "noop", "paused", "-", "-", "-"]
    name, timing, zone, job_type, state, next_run, last_run, last_job = lines[1].split("\t")
    assert (name, timing, zone, job_type, state, last_run, last_job) == (
        "b-cron",
        "@daily",
        "Europe/Berlin",
        "report",
        "active",
        "-",
        "-",
    )
    assert re.fullmatch(RFC3339, next_run)


def test_pause_resume_run_and_delete_print_one_line_each(runner, client, admin):
    schedules(runner, "create", "nightly", "--cron", "@daily", "--type", "report")
    assert (schedules(runner, "pause", "nightly").stdout) == "paused nightly\n"
    assert client.get("/schedules/nightly", headers=admin).get_json()["paused"] is True
    assert re.fullmatch(f"resumed nightly: next run at {RFC3339}\n", schedules(runner, "resume", "nightly").stdout)
    result = schedules(runner, "run", "nightly")
    assert result.exit_code == 0
    job_id = int(re.fullmatch(r"enqueued job (\d+) for nightly\n", result.stdout).group(1))
    job = client.get(f"/jobs/{job_id}", headers=admin).get_json()
    assert job["schedule"] == "nightly" and job["type"] == "report"
    assert schedules(runner, "list").stdout.splitlines()[1].endswith(f"\t{job_id}")
    assert schedules(runner, "delete", "nightly").stdout == "deleted nightly\n"
    assert client.get("/schedules/nightly", headers=admin).status_code == 404


@pytest.mark.parametrize("command", ["pause", "resume", "delete", "run"])
def test_an_unknown_schedule_is_an_error(runner, command):
    result = schedules(runner, command, "nope")
    assert result.exit_code != 0 and "schedule 'nope' does not exist" in result.output
