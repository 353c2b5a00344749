"""The tables: jobs, their event log, API keys and their enqueue ledger, admin users, their sessions and
failed sign-ins; and flow control per job type (its settings, their history, and the claims a rate limit
counts).

Models hold data only. Every change of a job's state goes through ``queuelog.queue``.

One module per concern: ``columns`` (shared column types), ``jobs``, ``keys``, ``users``, ``flow``, ``schedules``,
``processes``, ``rollups``. Every model is importable from here, and importing this package registers every table
on ``db.metadata`` (the migrations compare against it).
"""

from ..core.patterns import Priority  # priority labels live with the other shared names
from ..states import JobStatus  # the status enum lives with the state machine
from .columns import BigId, UTCDateTime
from .flow import PushSecret, PushStatus, TypeChange, TypeClaim, TypeSettings, TypeSettingsVersion
from .jobs import Job, JobDependency, JobEvent, UniqueSlot
from .keys import ApiKey, EnqueueLedger, Role
from .processes import WorkerProcess
from .rollups import ClosedDay, ClosedDayErrors, RollupMark, TypeRollup
from .schedules import Schedule
from .users import AdminSession, LoginAttempt, User, UserRole

__all__ = [
    "AdminSession",
    "ApiKey",
    "BigId",
    "ClosedDay",
    "ClosedDayErrors",
    "EnqueueLedger",
    "Job",
    "JobDependency",
    "JobEvent",
    "JobStatus",
    "LoginAttempt",
    "Priority",
    "PushSecret",
    "PushStatus",
    "Role",
    "RollupMark",
    "Schedule",
    "TypeChange",
    "TypeClaim",
    "TypeRollup",
    "TypeSettings",
    "TypeSettingsVersion",
    "UTCDateTime",
    "UniqueSlot",
    "User",
    "UserRole",
    "WorkerProcess",
]
