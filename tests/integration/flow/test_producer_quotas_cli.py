"""`flask keys create NAME --role producer --enqueue-rate N/S --max-pending M`, and `flask keys list`."""

from __future__ import annotations

import re

import pytest

from tests.support.api import bearer
from tests.support.factories import assert_problem

KEY_LINE = re.compile(r"ql_[A-Za-z0-9_-]{22,}\n")


def create(runner, *args):
    return runner.invoke(args=["keys", "create", *args])


def listed(runner, name: str) -> list[str]:
    result = runner.invoke(args=["keys", "list"])
    assert result.exit_code == 0, result.output
    return next(line for line in result.stdout.splitlines() if line.startswith(name + "\t")).split("\t")


def test_a_key_created_with_quotas_is_held_to_them(runner, client):
    result = create(runner, "billing", "--role", "producer", "--enqueue-rate", "3/60", "--max-pending", "2")
    assert result.exit_code == 0, result.output
    assert KEY_LINE.fullmatch(result.stdout)  # the secret alone, as without quotas
    headers = bearer(result.stdout.strip())
    assert [client.post("/jobs", json={"type": "email"}, headers=headers).status_code for _ in range(2)] == [201, 201]
    refused = assert_problem(client.post("/jobs", json={"type": "email"}, headers=headers), 429)
    assert refused["quota"] == "max_pending"


def test_keys_list_shows_the_quotas(runner):
    create(runner, "billing", "--role", "producer", "--enqueue-rate", "100/60", "--max-pending", "1000")
    create(runner, "rated", "--role", "producer", "--enqueue-rate", "5/2")
    create(runner, "unlimited", "--role", "producer")
    assert listed(runner, "billing")[4:6] == ["rate:100/60", "max-pending:1000"]
    assert listed(runner, "rated")[4:6] == ["rate:5/2", "max-pending:-"]
    assert listed(runner, "unlimited")[4:6] == ["rate:-", "max-pending:-"]


def test_keys_list_keeps_its_other_columns_in_place(runner):
    secret = create(runner, "billing", "--role", "producer", "--max-pending", "10").stdout.strip()
    name, role, ceiling, types, rate, pending, prefix, created, last_used, state = listed(runner, "billing")
    assert (name, role, ceiling, types, rate, pending) == (
        "billing",
        "producer",
        "medium",
        "*",
        "rate:-",
        "max-pending:10",
    )
    assert prefix == secret[:9] + "…" and (last_used, state) == ("never", "active")


def test_the_rate_may_be_written_with_spaces_and_leading_zeros(runner):
    assert create(runner, "spaced", "--role", "producer", "--enqueue-rate", " 05 / 060 ").exit_code == 0
    assert listed(runner, "spaced")[4] == "rate:5/60"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--enqueue-rate", "5"], "write it as N/S (at most N jobs in any S seconds), e.g. 100/60, not '5'"),
        (["--enqueue-rate", "5/2s"], "write it as N/S"),
        (["--enqueue-rate", "five/2"], "write it as N/S"),
        (["--enqueue-rate", "-1/2"], "write it as N/S"),
        (["--enqueue-rate", "0/2"], "N (jobs) must be 1 to 1,000,000,000, not 0"),
        (["--enqueue-rate", "5/0"], "S (seconds) must be 1 to 86,400, not 0"),
        (["--enqueue-rate", "5/86401"], "S (seconds) must be 1 to 86,400, not 86401"),
        (["--enqueue-rate", "1000000001/60"], "N (jobs) must be 1 to 1,000,000,000"),
        (["--enqueue-rate", ""], "write it as N/S"),  # an empty value must not quietly mean "no limit"
        (["--max-pending", "0"], "max_pending: must be a whole number of jobs from 1 to 1,000,000,000, not '0'"),
        (["--max-pending", "-3"], "must be a whole number of jobs"),
        (["--max-pending", "2.5"], "must be a whole number of jobs"),
        (["--max-pending", "ten"], "must be a whole number of jobs"),
        (["--max-pending", " "], "must be a whole number of jobs"),
        (["--max-pending", "9" * 5000], "must be a whole number of jobs"),
    ],
)
def test_a_bad_quota_fails_with_a_clear_message_and_creates_no_key(runner, args, message):
    result = create(runner, "billing", "--role", "producer", *args)
    assert result.exit_code == 1
    assert message in result.output
    assert "Traceback" not in result.output and not KEY_LINE.search(result.stdout)
    assert runner.invoke(args=["keys", "list"]).stdout.count("\n") == 1  # the header row alone


@pytest.mark.parametrize("role", ["worker", "admin"])
@pytest.mark.parametrize("option, value", [("--enqueue-rate", "5/2"), ("--max-pending", "10")])
def test_only_producer_keys_take_quotas(runner, role, option, value):
    result = create(runner, "ops", "--role", role, option, value)
    assert result.exit_code == 1
    assert f"only producer keys take quotas, not {role} keys" in result.output
    assert runner.invoke(args=["keys", "list"]).stdout.count("\n") == 1  # the header row alone


def test_both_bad_options_are_reported_at_once(runner):
    result = create(runner, "billing", "--role", "producer", "--enqueue-rate", "x", "--max-pending", "0")
    assert result.exit_code == 1
    assert "enqueue_rate: write it as N/S" in result.output and "max_pending: must be" in result.output


def test_the_help_explains_both_options(runner):
    result = runner.invoke(args=["keys", "create", "--help"])
    assert "--enqueue-rate N/S" in result.output and "--max-pending M" in result.output
