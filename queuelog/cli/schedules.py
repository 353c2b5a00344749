"""``flask schedules``: create, list, pause, resume, delete and run schedules."""

from __future__ import annotations

import json

import click

from .. import schedules
from ..core.clock import rfc3339
from ..core.errors import QueueError
from ..core.patterns import PRIORITY_LABELS
from .common import _cli_actor, _fail

schedules_group = click.Group("schedules", help="Schedules: jobs enqueued on a cron expression or an interval.")
#: The columns of ``flask schedules list``.
SCHEDULE_COLUMNS = ["name", "timing", "timezone", "type", "state", "next_run", "last_run", "last_job"]


def _schedule_call(call, *args):
    try:
        return call(*args)
    except QueueError as error:
        _fail(error)


@schedules_group.command("list")
def list_schedules_command():
    """List schedules: a header row, then name, cron expression or interval, timezone, job type, active or
    paused, next run (UTC; '-' while paused), last tick run and last job id ('-': none)."""
    click.echo("\t".join(SCHEDULE_COLUMNS))
    for state in schedules.list_schedules():
        spec = state.spec
        click.echo(
            "\t".join(
                [
                    spec.name,
                    spec.timing.describe(),
                    spec.timing.timezone,
                    spec.job.type,
                    "paused" if spec.paused else "active",
                    "-" if spec.paused else rfc3339(state.next_run_at),
                    rfc3339(state.last_run_at) or "-",
                    str(state.last_job_id or "-"),
                ]
            )
        )


@schedules_group.command("create")
@click.argument("name")
@click.option("--cron", help="5 fields, or 6 with the seconds first, or @hourly, @daily, @weekly, @monthly, …")
@click.option("--every-seconds", type=int, help="Instead of --cron: an interval of 1-86400 seconds.")
@click.option("--timezone", default="UTC", show_default=True, help="The IANA timezone the cron expression is read in.")
@click.option("--type", "job_type", required=True, help="The job type to enqueue (on QUEUELOG_JOB_TYPES).")
@click.option("--payload", default="{}", show_default=True, help="The job's payload, a JSON object.")
@click.option("--priority", type=click.Choice(PRIORITY_LABELS, case_sensitive=False), default="low", show_default=True)
@click.option("--max-retries", type=int, default=3, show_default=True)
@click.option("--paused", is_flag=True, help="Create it paused: it ticks once resumed.")
@click.option(
    "--catch-up",
    type=click.Choice(["one", "none"]),
    default="one",
    show_default=True,
    help="After downtime: one job for the latest missed tick, or none.",
)
def create_schedule_command(
    name, cron, every_seconds, timezone, job_type, payload, priority, max_retries, paused, catch_up
):
    """Create a schedule and print when it runs next."""
    try:
        payload_value = json.loads(payload)
    except ValueError as error:
        raise click.ClickException(f"payload: not valid JSON ({error})") from None
    fields = {
        "name": name,
        "cron": cron,
        "every_seconds": every_seconds,
        "timezone": timezone,
        "paused": paused,
        "catch_up": catch_up,
        "job": {"type": job_type, "payload": payload_value, "priority": priority, "max_retries": max_retries},
    }
    state = _schedule_call(schedules.create_schedule, fields)
    click.echo(
        f"created {state.spec.name}: "
        + ("paused" if state.spec.paused else f"next run at {rfc3339(state.next_run_at)}")
    )


@schedules_group.command("pause")
@click.argument("name")
def pause_schedule_command(name):
    """Stop a schedule's ticks (its jobs already enqueued stay)."""
    _schedule_call(schedules.update_schedule, name, {"paused": True})
    click.echo(f"paused {name}")


@schedules_group.command("resume")
@click.argument("name")
def resume_schedule_command(name):
    """Tick again, from the next tick after now: ticks missed while paused are not replayed."""
    state = _schedule_call(schedules.update_schedule, name, {"paused": False})
    click.echo(f"resumed {name}: next run at {rfc3339(state.next_run_at)}")


@schedules_group.command("delete")
@click.argument("name")
def delete_schedule_command(name):
    """Delete a schedule; the jobs it enqueued stay."""
    _schedule_call(schedules.delete_schedule, name)
    click.echo(f"deleted {name}")


@schedules_group.command("run")
@click.argument("name")
def run_schedule_command(name):
    """Enqueue the schedule's job once, now, and print its id."""
    job = _schedule_call(schedules.run_now, name, _cli_actor())
    click.echo(f"enqueued job {job.id} for {name}")
