"""``flask`` commands for operators and cron: keys, users, types, schedules, reap, purge.

Each is options → one call → one line.

One module per command group: ``access`` (keys, users), ``job_types`` (types), ``schedules``, ``maintenance``
(reap, purge, rollup); ``common`` holds what they share.
"""

from __future__ import annotations

from flask import Flask

from .access import keys_group, users_group
from .job_types import TYPE_COLUMNS, types_group
from .maintenance import purge_command, reap_command, rollup_command
from .schedules import SCHEDULE_COLUMNS, schedules_group

__all__ = [
    "SCHEDULE_COLUMNS",
    "TYPE_COLUMNS",
    "keys_group",
    "purge_command",
    "reap_command",
    "register_commands",
    "rollup_command",
    "schedules_group",
    "types_group",
    "users_group",
]


def register_commands(app: Flask) -> None:
    for command in (keys_group, users_group, types_group, schedules_group, reap_command, purge_command, rollup_command):
        app.cli.add_command(command)
