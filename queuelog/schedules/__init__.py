"""Schedules: jobs enqueued on a cron expression or at a fixed interval, exactly once per tick.

- ``timing.py``: when a schedule ticks (cronsim for cron expressions, DST included);
- ``spec.py``: what a schedule is made of, and the one check the API, the CLI and the pages share;
- ``operations.py``: create, read, change, delete, run now;
- ``firing.py``: ``fire_due``, the compare-and-sets that let exactly one server process enqueue each tick's
  job, a batch of due schedules in one write transaction;
- ``ticker.py``: the thread in every server process that fires due schedules a few times a second.
"""

from .firing import fire_due
from .operations import (
    ScheduleExists,
    ScheduleLimitReached,
    ScheduleNotFound,
    ScheduleState,
    create_schedule,
    delete_schedule,
    get_schedule,
    last_jobs,
    list_schedules,
    page_of_schedules,
    run_now,
    update_schedule,
)
from .spec import Spec, check_spec

__all__ = [
    "ScheduleExists",
    "ScheduleLimitReached",
    "ScheduleNotFound",
    "ScheduleState",
    "Spec",
    "check_spec",
    "create_schedule",
    "delete_schedule",
    "fire_due",
    "get_schedule",
    "last_jobs",
    "list_schedules",
    "page_of_schedules",
    "run_now",
    "update_schedule",
]
