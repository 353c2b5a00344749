"""``flask types``: pause, resume, limit a job type (a queue), scope its dedupe windows, and set its push target."""

from __future__ import annotations

import re

import click
from flask import current_app

from ..core.errors import QueueError
from ..queue import flow
from ..queue.push_targets import (
    DEFAULT_MODE,
    DEFAULT_TIMEOUT_SECONDS,
    MAX_TIMEOUT_SECONDS,
    MIN_TIMEOUT_SECONDS,
    MODES,
    PushTarget,
    url_problem,
)
from ..states import JobStatus
from .common import _cli_actor, _fail

types_group = click.Group(
    "types", help="Job types (queues): pause, resume, limit, scope their dedupe windows, push their jobs to a URL."
)
# The bounds the API takes (queuelog/api/limits.py), repeated rather than imported: the API package is the
# HTTP side; these are the same numbers for the same settings.
MAX_LIMIT, MAX_WINDOW_SECONDS = 1_000_000, 86400


#: The columns of ``flask types list`` and of the line ``limit`` and ``unique-scope`` print (unique_scope last).
TYPE_COLUMNS = [
    "type",
    "state",
    "concurrency",
    "rate",
    "key_concurrency",
    JobStatus.PENDING.value,
    JobStatus.RUNNING.value,
    "unique_scope",
]


def _show_limits(state: flow.TypeState) -> str:
    """A type as one tab-separated line of TYPE_COLUMNS; '-' for a limit that is not set."""
    settings = state.settings
    rate = settings.rate_limit
    return "\t".join(
        [
            state.type,
            "paused" if settings.paused else "active",
            str(settings.concurrency_limit or "-"),
            f"{rate.jobs}/{rate.per_seconds}" if rate else "-",
            str(settings.key_concurrency_limit or "-"),
            str(state.pending),
            str(state.running),
            settings.unique_scope,
        ]
    )


def _change_type(job_type: str, wanted: dict) -> flow.TypeState:
    try:
        return flow.update_type(job_type, wanted, _cli_actor())
    except QueueError as error:
        _fail(error)


@types_group.command("list")
def list_types_command():
    """List every type: a header, then name, paused or active, limits ('-': none), pending, running, unique scope."""
    click.echo("\t".join(TYPE_COLUMNS))
    for state in flow.list_types():
        click.echo(_show_limits(state))


@types_group.command("pause")
@click.argument("job_type")
def pause_type_command(job_type):
    """Stop claims of a type: its jobs wait (enqueue still works); running jobs finish."""
    _change_type(job_type, {"paused": True})
    click.echo(f"paused {job_type}")


@types_group.command("resume")
@click.argument("job_type")
def resume_type_command(job_type):
    """Let a paused type's jobs be claimed again, at once."""
    _change_type(job_type, {"paused": False})
    click.echo(f"resumed {job_type}")


class RateType(click.ParamType):
    """N/S: at most N claims in any window of S seconds."""

    name = "N/S"

    def convert(self, value, param, ctx):
        if isinstance(value, flow.RateLimit):
            return value
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*s?\s*", str(value))
        if not match:
            self.fail(f"{value!r} is not N/S (e.g. 20/2: 20 claims in any 2 seconds)", param, ctx)
        jobs, seconds = int(match.group(1)), int(match.group(2))
        if not 1 <= jobs <= MAX_LIMIT:
            self.fail(f"N must be between 1 and {MAX_LIMIT}", param, ctx)
        if not 1 <= seconds <= MAX_WINDOW_SECONDS:
            self.fail(f"S must be between 1 and {MAX_WINDOW_SECONDS} seconds", param, ctx)
        return flow.RateLimit(jobs, seconds)


@types_group.command("limit")
@click.argument("job_type")
@click.option("--concurrency", type=click.IntRange(1, MAX_LIMIT), help="Most jobs of the type running at once.")
@click.option("--rate", type=RateType(), help="Most claims N in any window of S seconds, as N/S (e.g. 20/2).")
@click.option(
    "--key-concurrency", type=click.IntRange(1, MAX_LIMIT), help="Most running jobs per concurrency key of the type."
)
@click.option("--clear", is_flag=True, help="Remove all three limits.")
def limit_type_command(job_type, concurrency, rate, key_concurrency, clear):
    """Set a type's limits (those not named stay as they are), or remove them all with --clear."""
    given = {"concurrency_limit": concurrency, "rate_limit": rate, "key_concurrency_limit": key_concurrency}
    given = {field: value for field, value in given.items() if value is not None}
    if clear and given:
        raise click.UsageError("--clear removes every limit: give it alone")
    if not clear and not given:
        raise click.UsageError("give --concurrency, --rate or --key-concurrency, or --clear")
    wanted = dict.fromkeys(("concurrency_limit", "rate_limit", "key_concurrency_limit")) if clear else given
    click.echo(_show_limits(_change_type(job_type, wanted)))


@types_group.command("unique-scope")
@click.argument("job_type")
@click.argument("scope", type=click.Choice(flow.UNIQUE_SCOPES))
def unique_scope_command(job_type, scope):
    """Whose dedupe windows (unique_for) a type keeps: producer (each key its own, the default) or type (one)."""
    click.echo(_show_limits(_change_type(job_type, {"unique_scope": scope})))


def _show_push(state: flow.TypeState) -> str:
    """A type's push target as one line: where, how, within what time; or that workers pull its jobs."""
    target = state.settings.push
    if target is None:
        return f"{state.type}: no push target (workers claim its jobs)"
    return f"{state.type}: push to {target.url} ({target.mode}, timeout {target.timeout_seconds} s)"


def _show_secret(secret: str, why: str) -> None:
    """The secret alone on the last line of stdout (a script takes it with ``tail -n 1``); the warning on stderr,
    so it reaches a person without landing in what the script keeps."""
    click.echo(f"{why} It will not be shown again: store it where the target reads it now.", err=True)
    click.echo(secret)


@types_group.command("push")
@click.argument("job_type")
@click.argument("url", required=False)
@click.option(
    "--mode",
    type=click.Choice(MODES),
    help=f"sync: the target's 2xx completes the job; async: a 2xx accepts it, the target finishes it later "
    f"(default {DEFAULT_MODE}).",
)
@click.option(
    "--timeout",
    type=click.IntRange(MIN_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS),
    metavar="S",
    help=f"Seconds a delivery waits for the target's answer, {MIN_TIMEOUT_SECONDS}-{MAX_TIMEOUT_SECONDS} "
    f"(default {DEFAULT_TIMEOUT_SECONDS}).",
)
@click.option("--clear", is_flag=True, help="Remove the push target and forget its signing secrets.")
@click.option("--rotate", is_flag=True, help="Issue a new signing secret; the old one signs beside it for 24 h.")
def push_type_command(job_type, url, mode, timeout, clear, rotate):
    """Push a type's jobs to URL (set as a whole, like PATCH's push: an option not given takes its default),
    remove the target with --clear, or rotate its signing secret with --rotate.

    The change that sets a first target prints its signing secret, once.
    """
    if sum((url is not None, clear, rotate)) != 1:
        raise click.UsageError("give a URL, or --clear, or --rotate: exactly one of them")
    if (mode is not None or timeout is not None) and url is None:
        raise click.UsageError("--mode and --timeout go with a URL")
    if rotate:
        try:
            state = flow.rotate_push_secret(job_type, _cli_actor())
        except QueueError as error:
            _fail(error)
        click.echo(_show_push(state))
        _show_secret(state.new_secret, "A new signing secret; the previous one keeps signing beside it for 24 h.")
        return
    target = None
    if url is not None:
        # The API's own check (SSRF: public addresses only unless QUEUELOG_PUSH_ALLOW_PRIVATE), before any change.
        problem = url_problem(url, current_app.config["PUSH_ALLOW_PRIVATE"])
        if problem:
            raise click.BadParameter(problem, param_hint="URL")
        target = PushTarget(url, mode or DEFAULT_MODE, timeout or DEFAULT_TIMEOUT_SECONDS)
    state = _change_type(job_type, {"push": target})
    click.echo(_show_push(state))
    if state.new_secret:
        _show_secret(state.new_secret, "Its signing secret (webhook-signature, Standard Webhooks).")
