"""What the commands share: a refusal as one line of error, a count in words, who a change is made by."""

from __future__ import annotations

import getpass

import click

from ..core.errors import InvalidRequest, QueueError


def _fail(error: QueueError) -> None:
    if isinstance(error, InvalidRequest):
        message = "; ".join(f"{e['pointer'].lstrip('/')}: {e['detail']}" for e in error.errors)
    else:
        message = error.detail
    raise click.ClickException(message)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _cli_actor() -> str:
    """How a type's history names a change made from the command line."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no user name for this uid (a bare container)
        return "cli"
