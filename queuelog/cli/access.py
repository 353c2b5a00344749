"""``flask keys`` and ``flask users``: the API keys and the people who may use the queue."""

from __future__ import annotations

import sys

import click

from ..auth import keys, users
from ..auth.quotas import Quota
from ..core.clock import rfc3339
from ..core.errors import QueueError
from ..core.patterns import PRIORITY_LABELS, Priority
from ..models import Role, UserRole
from .common import _count, _fail

keys_group = click.Group("keys", help="Issue, list and revoke API keys.")


@keys_group.command("create")
@click.argument("name")
@click.option("--role", required=True, type=click.Choice([role.value for role in Role]))
@click.option(
    "--max-priority",
    type=click.Choice(PRIORITY_LABELS, case_sensitive=False),
    help="Highest priority a producer may set (default: medium).",
)
@click.option("--types", help="Comma-separated job types this key is limited to.")
@click.option(
    "--enqueue-rate",
    metavar="N/S",
    help="Producer quota: at most N jobs enqueued in any S seconds (S up to 86400); more → 429.",
)
@click.option(
    "--max-pending", metavar="M", help="Producer quota: at most M of its jobs pending or waiting at once; more → 429."
)
def create_key_command(name, role, max_priority, types, enqueue_rate, max_pending):
    """Create a key and print its secret alone on stdout (it is not shown again)."""
    try:
        secret = keys.create_key(
            name,
            role,
            max_priority,
            types.split(",") if types is not None else None,
            enqueue_rate=enqueue_rate,
            max_pending=max_pending,
        )
    except QueueError as error:
        _fail(error)
    click.echo(secret)


@keys_group.command("list")
def list_keys_command():
    """List keys: a header row, then name, role, priority ceiling (producers only: - for others, which it does
    not bind), types, quotas (rate:N/S, max-pending:M; - = none), prefix, created, last used, revoked."""
    click.echo(
        "\t".join(
            [
                "name",
                "role",
                "max_priority",
                "types",
                "enqueue_rate",
                "max_pending",
                "prefix",
                "created",
                "last_used",
                "state",
            ]
        )
    )
    for key in keys.list_keys():
        quota = Quota.of(key) or Quota()
        ceiling = Priority.label_of(key.max_priority) if key.role == Role.PRODUCER.value else "-"
        click.echo(
            "\t".join(
                [
                    key.name,
                    key.role,
                    ceiling,
                    key.allowed_types or "*",
                    f"rate:{quota.rate or '-'}",
                    f"max-pending:{quota.max_pending or '-'}",
                    key.prefix + "…",
                    rfc3339(key.created_at),
                    rfc3339(key.last_used_at) or "never",
                    ("revoked " + rfc3339(key.revoked_at)) if key.revoked_at else "active",
                ]
            )
        )


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
@click.option(
    "--password-stdin",
    is_flag=True,
    required=True,
    help="Read the password from standard input (never from the command line).",
)
@click.option(
    "--role",
    type=click.Choice([role.value for role in UserRole]),
    default=UserRole.ADMIN.value,
    show_default=True,
    help="admin: sees and acts; viewer: sees every page, changes nothing.",
)
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
        click.echo(
            "\t".join(
                [user.username, user.role, rfc3339(user.created_at), str(user.sessions), str(user.failed_sign_ins)]
            )
        )


@users_group.command("set-password")
@click.argument("username")
@click.option(
    "--password-stdin",
    is_flag=True,
    required=True,
    help="Read the new password from standard input (never from the command line).",
)
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
