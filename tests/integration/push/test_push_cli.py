"""flask types push: set a type's push target (its first one prints the signing secret, once), clear it, rotate
its secret; a bad URL, mode or timeout is a clear error with a non-zero exit, and changes nothing."""

from __future__ import annotations

import pytest

from queuelog.core.clock import utcnow
from queuelog.database.transactions import read_connection
from queuelog.queue import flow, push_targets

HOOK = "https://example.com/hook"  # public; this machine resolves no names, and an unresolved one is accepted


def push(runner, *args):
    return runner.invoke(args=["types", "push", *args])


def current_secrets(job_type: str = "email") -> list[str]:
    """The secrets the type's deliveries are signed with now, the current one first (as the dispatcher reads them)."""
    with read_connection() as conn:
        return push_targets.signing_secrets(conn, job_type, utcnow())


def test_push_sets_the_target_and_prints_it_then_the_secret_alone_on_the_last_line(runner, client, admin):
    result = push(runner, "email", HOOK, "--mode", "async", "--timeout", "5")
    assert result.exit_code == 0, result.output
    target_line, secret = result.stdout.splitlines()
    assert target_line == f"email: push to {HOOK} (async, timeout 5 s)"
    assert secret == current_secrets()[0]  # the secret deliveries are signed with
    assert "It will not be shown again" in result.stderr
    assert client.get("/types/email", headers=admin).get_json()["push"]["url"] == HOOK


def test_push_without_options_takes_the_default_mode_and_timeout(runner):
    result = push(runner, "email", HOOK)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == f"email: push to {HOOK} (sync, timeout 30 s)"
    assert flow.get_type("email").settings.push == push_targets.PushTarget(HOOK, "sync", 30)


def test_the_secret_is_never_printed_again(runner, client, admin):
    secret = push(runner, "email", HOOK).stdout.splitlines()[-1]
    for args in (["email", "https://example.com/other"], ["email", "https://example.com/other"]):
        again = push(runner, *args)
        assert again.exit_code == 0 and secret not in again.output
        assert again.stdout.splitlines() == ["email: push to https://example.com/other (sync, timeout 30 s)"]
    assert secret not in runner.invoke(args=["types", "list"]).output
    assert secret not in client.get("/types/email", headers=admin).get_data(as_text=True)
    assert current_secrets() == [secret]  # still the one deliveries are signed with


def test_clear_removes_the_target_and_forgets_its_secrets(runner):
    first = push(runner, "email", HOOK).stdout.splitlines()[-1]
    result = push(runner, "email", "--clear")
    assert (result.exit_code, result.stdout) == (0, "email: no push target (workers claim its jobs)\n")
    assert flow.get_type("email").settings.push is None
    assert current_secrets() == []
    second = push(runner, "email", HOOK).stdout.splitlines()[-1]  # a new target gets a new secret
    assert second.startswith("whsec_") and second != first


def test_rotate_prints_a_new_secret_and_the_old_one_keeps_signing(runner):
    old = push(runner, "email", HOOK).stdout.splitlines()[-1]
    result = push(runner, "email", "--rotate")
    assert result.exit_code == 0, result.output
    target_line, new = result.stdout.splitlines()
    assert target_line == f"email: push to {HOOK} (sync, timeout 30 s)"
    assert current_secrets() == [new, old]
    assert "It will not be shown again" in result.stderr


def test_rotate_without_a_target_is_an_error(runner):
    result = push(runner, "email", "--rotate")
    assert result.exit_code == 1
    assert "job type 'email' has no push target to rotate the secret of" in result.stderr


def test_changes_are_in_the_history_as_made_from_the_command_line(runner):
    push(runner, "email", HOOK)
    [entry] = flow.history("email")
    assert entry.actor.startswith("cli")
    assert entry.changes == {"push": {"old": None, "new": {"url": HOOK, "mode": "sync", "timeout_seconds": 30}}}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["http://127.0.0.1/x"], "not a public address"),
        (["http://[::1]:8080/x"], "not a public address"),
        (["ftp://x"], "must be an http:// or https:// URL"),
        (["https://"], "must name a host"),
        ([HOOK, "--mode", "sometimes"], "'sometimes' is not one of 'sync', 'async'"),
        ([HOOK, "--timeout", "0"], "0 is not in the range 1<=x<=900"),
        ([HOOK, "--timeout", "901"], "901 is not in the range 1<=x<=900"),
    ],
)
def test_a_bad_target_is_a_clear_error_and_changes_nothing(runner, args, message):
    result = push(runner, "email", *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert result.stdout == ""
    assert flow.get_type("email").settings.push is None
    assert flow.history("email") == []


@pytest.mark.parametrize("config_overrides", [{"PUSH_ALLOW_PRIVATE": True}], indirect=True)
def test_a_private_address_is_accepted_when_push_allow_private_is_on(runner):
    result = push(runner, "email", "http://127.0.0.1:8080/hook")
    assert result.exit_code == 0, result.output
    assert flow.get_type("email").settings.push.url == "http://127.0.0.1:8080/hook"


@pytest.mark.parametrize(
    "args",
    [[], [HOOK, "--clear"], ["--clear", "--rotate"], [HOOK, "--rotate"], ["--clear", "--mode", "async"]],
    ids=["neither", "url-and-clear", "clear-and-rotate", "url-and-rotate", "clear-with-mode"],
)
def test_a_url_and_clear_together_or_neither_is_a_usage_error(runner, args):
    result = push(runner, "email", *args)
    assert result.exit_code == 2, result.output
    assert "Usage:" in result.stderr
    assert flow.get_type("email").settings.push is None


def test_an_unknown_type_is_an_error(runner):
    result = push(runner, "nope", HOOK)
    assert result.exit_code == 1
    assert "job type 'nope' is not on this server's QUEUELOG_JOB_TYPES" in result.stderr
