"""``flask reap``, ``flask purge`` and ``flask rollup``: the upkeep to run from cron."""

from __future__ import annotations

import click
from flask import current_app

from .. import queue
from ..core.clock import utcnow
from ..ops import purge
from ..queue import rollups


@click.command("reap")
@click.option(
    "--older-than", type=click.IntRange(min=1), help="Also reap jobs claimed more than this many seconds ago."
)
@click.option("--dry-run", is_flag=True, help="Say what would be reaped, change nothing.")
def reap_command(older_than, dry_run):
    """Give back running jobs whose worker died (lease expired) or whose run timed out, and cancel pending jobs
    past their expires_at; safe to run from cron every minute."""
    report = queue.reap(older_than=older_than, dry_run=dry_run)
    verb = "would reap" if dry_run else "reaped"
    # The extra parts only when they happened: the line stays what scripts read before they existed.
    extra = "".join(
        f"; {len(ids)} {what}" for what, ids in (("timed out", report.timed_out), ("expired", report.expired)) if ids
    )
    click.echo(
        f"{verb} {report.total} jobs: {len(report.requeued)} requeued, "
        f"{len(report.failed)} failed, {len(report.quarantined)} quarantined{extra}"
    )


@click.command("purge")
@click.option(
    "--older-than", help="Age of the finished jobs to delete: 30s, 15m, 12h, 7d … (default: QUEUELOG_RETENTION, 7d)."
)
@click.option(
    "--status",
    "statuses",
    default=",".join(purge.FINISHED),
    show_default=True,
    help="Comma-separated finished statuses to purge.",
)
@click.option(
    "--batch",
    type=click.IntRange(1, purge.MAX_BATCH),
    default=purge.DEFAULT_BATCH,
    show_default=True,
    help="Jobs deleted per transaction.",
)
def purge_command(older_than, statuses, batch):
    """Delete finished jobs (and their events) older than the retention, in small batches; safe while serving.

    Also prunes the type rollups: minutes older than 48 hours, hours older than 8 days.
    """
    try:
        age = purge.parse_duration(current_app.config["RETENTION"] if older_than is None else older_than)
    except ValueError as error:
        hint = "QUEUELOG_RETENTION" if older_than is None else "--older-than"
        raise click.BadParameter(str(error), param_hint=hint) from error
    try:
        chosen = purge.parse_statuses(statuses)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--status") from error
    report = purge.purge(age, chosen, batch)
    pruned = rollups.prune(utcnow())
    click.echo(
        f"purged {report.jobs} jobs ({report.events} events)" + (f"; pruned {pruned} rollup rows" if pruned else "")
    )


@click.command("rollup")
@click.option(
    "--most",
    type=click.IntRange(1, 10_080),
    default=rollups.MOST_MINUTES,
    show_default=True,
    help="Minutes rolled up at most.",
)
def rollup_command(most):
    """Fold the closed minutes of the event log into the type rollups (the dashboard's chart, the types'
    wait and run times). Every server's ticker does this each minute; this is for cron, or to catch up."""
    rolled = rollups.roll_up(utcnow(), most)
    if rolled.minutes:
        click.echo(
            f"rolled up {rolled.minutes} minute{'s' if rolled.minutes != 1 else ''} through "
            f"{rolled.last_minute:%Y-%m-%d %H:%M} UTC"
        )
    else:
        click.echo(f"nothing to roll up: rolled up through {rolled.last_minute:%Y-%m-%d %H:%M} UTC")
