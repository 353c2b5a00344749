"""``flask`` commands for operators and cron: keys, users, types, schedules, reap, purge.

Each is options → one call → one line."""
from __future__ import annotations

import getpass
import json
import re
import sys

import click
from flask import Flask, current_app

from . import keys, queue, schedules, users
from .clock import rfc3339, utcnow
from .errors import InvalidRequest, QueueError
from .models import Role, UserRole
from .ops import purge
from .patterns import PRIORITY_LABELS, Priority
from .queue import flow, rollups
from .quotas import Quota
from .states import JobStatus


def _fail(error: QueueError) -> None:
    if isinstance(error, InvalidRequest):
        message = "; ".join(f"{e['pointer'].lstrip('/')}: {e['detail']}" for e in error.errors)
    else:
        message = error.detail
    raise click.ClickException(message)


keys_group = click.Group("keys", help="Issue, list and revoke API keys.")


@keys_group.command("create")
@click.argument("name")
@click.option("--role", required=True, type=click.Choice([role.value for role in Role]))
@click.option("--max-priority", type=click.Choice(PRIORITY_LABELS, case_sensitive=False),
              help="Highest priority a producer may set (default: medium).")
@click.option("--types", help="Comma-separated job types this key is limited to.")
@click.option("--enqueue-rate", metavar="N/S",
              help="Producer quota: at most N jobs enqueued in any S seconds (S up to 86400); more → 429.")
@click.option("--max-pending", metavar="M",
              help="Producer quota: at most M of its jobs pending or waiting at once; more → 429.")
def create_key_command(name, role, max_priority, types, enqueue_rate, max_pending):
    """Create a key and print its secret alone on stdout (it is not shown again)."""
    try:
        secret = keys.create_key(name, role, max_priority, types.split(",") if types is not None else None,
                                 enqueue_rate=enqueue_rate, max_pending=max_pending)
    except QueueError as error:
        _fail(error)
    click.echo(secret)


@keys_group.command("list")
def list_keys_command():
    """List keys: a header row, then name, role, priority ceiling (producers only: - for others, which it does
    not bind), types, quotas (rate:N/S, max-pending:M; - = none), prefix, created, last used, revoked."""
    click.echo("\t".join(["name", "role", "max_priority", "types", "enqueue_rate", "max_pending", "prefix",
                           "created", "last_used", "state"]))
    for key in keys.list_keys():
        quota = Quota.of(key) or Quota()
        ceiling = Priority.label_of(key.max_priority) if key.role == Role.PRODUCER.value else "-"
        click.echo("\t".join([
            key.name, key.role, ceiling, key.allowed_types or "*",
            f"rate:{quota.rate or '-'}", f"max-pending:{quota.max_pending or '-'}",
            key.prefix + "…", rfc3339(key.created_at), rfc3339(key.last_used_at) or "never",
            ("revoked " + rfc3339(key.revoked_at)) if key.revoked_at else "active",
        ]))


@keys_group.command("revoke")
@click.argument("name")
def revoke_key_command(name):
    """Revoke a key; it is refused from the next request on."""
    if not keys.revoke_key(name):
        raise click.ClickException(f"no active key named {name!r}")
    click.echo(f"revoked {name}")


users_group = click.Group("users", help="Users of the web pages: admins, and viewers who may look but not act.")


@users_group.command("create")
@click.argument("username")
@click.option("--password-stdin", is_flag=True, required=True,
              help="Read the password from standard input (never from the command line).")
@click.option("--role", type=click.Choice([role.value for role in UserRole]), default=UserRole.ADMIN.value,
              show_default=True, help="admin: sees and acts; viewer: sees every page, changes nothing.")
def create_user_command(username, password_stdin, role):
    """Create a user of the pages (an admin unless --role viewer); the password is read from stdin."""
    password = sys.stdin.readline().rstrip("\r\n")
    try:
        users.create_user(username, password, role)
    except QueueError as error:
        _fail(error)
    click.echo(f"created {role} {username}")


@users_group.command("list")
def list_users_command():
    """List users: a header row, then username, role, created, live sessions, recent failed sign-ins."""
    click.echo("\t".join(["username", "role", "created", "sessions", "failed_sign_ins"]))
    for user in users.list_users():
        click.echo("\t".join([user.username, user.role, rfc3339(user.created_at), str(user.sessions),
                               str(user.failed_sign_ins)]))


@users_group.command("set-password")
@click.argument("username")
@click.option("--password-stdin", is_flag=True, required=True,
              help="Read the new password from standard input (never from the command line).")
def set_password_command(username, password_stdin):
    """Give a user a new password (read from stdin); every session of that admin ends."""
    password = sys.stdin.readline().rstrip("\r\n")
    try:
        ended = users.set_password(username, password)
    except QueueError as error:
        _fail(error)
    click.echo(f"changed the password of {username}, ended {_count(ended, 'session')}")


@users_group.command("delete")
@click.argument("username")
def delete_user_command(username):
    """Delete a user (admin or viewer); every session of that user ends."""
    try:
        role, ended = users.delete_user(username)
    except QueueError as error:
        _fail(error)
    click.echo(f"deleted {role} {username}, ended {_count(ended, 'session')}")


@users_group.command("unlock")
@click.argument("username")
def unlock_user_command(username):
    """Forget an admin's failed sign-ins from every address, so no address is refused for them."""
    try:
        cleared = users.unlock(username)
    except QueueError as error:
        _fail(error)
    click.echo(f"unlocked {username}, cleared {_count(cleared, 'failed sign-in')}")


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


types_group = click.Group("types", help="Job types (queues): pause, resume, limit, scope their dedupe windows.")
# The bounds the API takes (queuelog/api/schemas.py), repeated rather than imported: the API package is the
# HTTP side; these are the same numbers for the same settings.
MAX_LIMIT, MAX_WINDOW_SECONDS = 1_000_000, 86400


def _cli_actor() -> str:
    """How a type's history names a change made from the command line."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):   # no user name for this uid (a bare container)
        return "cli"


#: The columns of ``flask types list`` and of the line ``limit`` and ``unique-scope`` print (unique_scope last).
TYPE_COLUMNS = ["type", "state", "concurrency", "rate", "key_concurrency", JobStatus.PENDING.value,
                JobStatus.RUNNING.value, "unique_scope"]


def _show_limits(state: flow.TypeState) -> str:
    """A type as one tab-separated line of TYPE_COLUMNS; '-' for a limit that is not set."""
    settings = state.settings
    rate = settings.rate_limit
    return "\t".join([
        state.type, "paused" if settings.paused else "active", str(settings.concurrency_limit or "-"),
        f"{rate.jobs}/{rate.per_seconds}" if rate else "-", str(settings.key_concurrency_limit or "-"),
        str(state.pending), str(state.running), settings.unique_scope,
    ])


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
@click.option("--key-concurrency", type=click.IntRange(1, MAX_LIMIT),
              help="Most running jobs per concurrency key of the type.")
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


@click.command("reap")
@click.option("--older-than", type=click.IntRange(min=1),
              help="Also reap jobs claimed more than this many seconds ago.")
@click.option("--dry-run", is_flag=True, help="Say what would be reaped, change nothing.")
def reap_command(older_than, dry_run):
    """Give back running jobs whose worker died (lease expired) or whose run timed out, and cancel pending jobs
    past their expires_at; safe to run from cron every minute."""
    report = queue.reap(older_than=older_than, dry_run=dry_run)
    verb = "would reap" if dry_run else "reaped"
    # The extra parts only when they happened: the line stays what scripts read before they existed.
    extra = "".join(f"; {len(ids)} {what}" for what, ids in (("timed out", report.timed_out),
                                                                ("expired", report.expired)) if ids)
    click.echo(f"{verb} {report.total} jobs: {len(report.requeued)} requeued, "
               f"{len(report.failed)} failed, {len(report.quarantined)} quarantined{extra}")


@click.command("purge")
@click.option("--older-than", help="Age of the finished jobs to delete: 30s, 15m, 12h, 7d … "
                                   "(default: QUEUELOG_RETENTION, 7d).")
@click.option("--status", "statuses", default=",".join(purge.FINISHED), show_default=True,
              help="Comma-separated finished statuses to purge.")
@click.option("--batch", type=click.IntRange(1, purge.MAX_BATCH), default=purge.DEFAULT_BATCH, show_default=True,
              help="Jobs deleted per transaction.")
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
    click.echo(f"purged {report.jobs} jobs ({report.events} events)"
               + (f"; pruned {pruned} rollup rows" if pruned else ""))


@click.command("rollup")
@click.option("--most", type=click.IntRange(1, 10_080), default=rollups.MOST_MINUTES, show_default=True,
              help="Minutes rolled up at most.")
def rollup_command(most):
    """Fold the closed minutes of the event log into the type rollups (the dashboard's chart, the types'
    wait and run times). Every server's ticker does this each minute; this is for cron, or to catch up."""
    rolled = rollups.roll_up(utcnow(), most)
    if rolled.minutes:
        click.echo(f"rolled up {rolled.minutes} minute{'s' if rolled.minutes != 1 else ''} through "
                   f"{rolled.last_minute:%Y-%m-%d %H:%M} UTC")
    else:
        click.echo(f"nothing to roll up: rolled up through {rolled.last_minute:%Y-%m-%d %H:%M} UTC")


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
        click.echo("\t".join([
            spec.name, spec.timing.describe(), spec.timing.timezone, spec.job.type,
            "paused" if spec.paused else "active", "-" if spec.paused else rfc3339(state.next_run_at),
            rfc3339(state.last_run_at) or "-", str(state.last_job_id or "-"),
        ]))


@schedules_group.command("create")
@click.argument("name")
@click.option("--cron", help="5 fields, or 6 with the seconds first, or @hourly, @daily, @weekly, @monthly, …")
@click.option("--every-seconds", type=int, help="Instead of --cron: an interval of 1-86400 seconds.")
@click.option("--timezone", default="UTC", show_default=True, help="The IANA timezone the cron expression is read in.")
@click.option("--type", "job_type", required=True, help="The job type to enqueue (on QUEUELOG_JOB_TYPES).")
@click.option("--payload", default="{}", show_default=True, help="The job's payload, a JSON object.")
@click.option("--priority", type=click.Choice(PRIORITY_LABELS, case_sensitive=False), default="low",
              show_default=True)
@click.option("--max-retries", type=int, default=3, show_default=True)
@click.option("--paused", is_flag=True, help="Create it paused: it ticks once resumed.")
@click.option("--catch-up", type=click.Choice(["one", "none"]), default="one", show_default=True,
              help="After downtime: one job for the latest missed tick, or none.")
def create_schedule_command(name, cron, every_seconds, timezone, job_type, payload, priority, max_retries, paused,
                            catch_up):
    """Create a schedule and print when it runs next."""
    try:
        payload_value = json.loads(payload)
    except ValueError as error:
        raise click.ClickException(f"payload: not valid JSON ({error})") from None
    fields = {"name": name, "cron": cron, "every_seconds": every_seconds, "timezone": timezone, "paused": paused,
              "catch_up": catch_up, "job": {"type": job_type, "payload": payload_value, "priority": priority,
                                            "max_retries": max_retries}}
    state = _schedule_call(schedules.create_schedule, fields)
    click.echo(f"created {state.spec.name}: " + (
        "paused" if state.spec.paused else f"next run at {rfc3339(state.next_run_at)}"))


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


def register_commands(app: Flask) -> None:
    for command in (keys_group, users_group, types_group, schedules_group, reap_command, purge_command,
                    rollup_command):
        app.cli.add_command(command)
