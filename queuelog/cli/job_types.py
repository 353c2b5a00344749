"""``flask types``: pause, resume, limit a job type (a queue), and scope its dedupe windows."""

from __future__ import annotations

import re

import click

from ..core.errors import QueueError
from ..queue import flow
from ..states import JobStatus
from .common import _cli_actor, _fail

types_group = click.Group("types", help="Job types (queues): pause, resume, limit, scope their dedupe windows.")
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
