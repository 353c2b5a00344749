"""Worker processes: register, beat, deregister; an admin's quiet and stop; what the Workers page shows.

A worker key may run many processes (hosts, restarts). Each registers (``POST /workers``), beats every
``BEAT_SECONDS`` and, on a clean exit, deregisters. The beat's answer carries the process's ``command``,
which only an admin changes, and only forward:

    run   → quiet   claim nothing more; finish (and acknowledge) the jobs it holds; keep beating
    run   → stop    quiet, then exit once the held jobs are done
    quiet → stop

A process whose last beat is older than ``GONE_AFTER`` (three beats missed) is *gone*: listed apart, never
commanded, and deleted ``PRUNE_AFTER`` later by the next registration. A key has at most
QUEUELOG_MAX_WORKER_PROCESSES_PER_KEY processes online (not gone): one more registration is refused (429)
until one deregisters or goes gone. A beat is never refused, even one that brings a gone process back past
the limit: it is the process's own registration, already made. A process belongs to its key: another
key's process is 404, as if it did not exist, and a revoked key's processes are not listed at all.

A claim may name its process (``process_id``); the claim then writes it on the jobs it takes (one more
term in CLAIM), and a process told to quiet or stop is given nothing.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from flask import current_app
from sqlalchemy import Integer, and_, case, cast, delete, func, insert, select, update
from sqlalchemy.engine import Connection

from ..auth.keys import Caller
from ..core.clock import utcnow
from ..core.errors import InvalidRequest, QueueError, StateConflict
from ..database.transactions import read_connection, write_transaction
from ..models import ApiKey, Job, Role, WorkerProcess
from ..states import JobStatus

processes = WorkerProcess.__table__
keys_table = ApiKey.__table__
jobs = Job.__table__

#: How often a process beats; its answer says so, and the runner follows it.
BEAT_SECONDS = 3
#: Three beats missed (and one of grace): the process is gone.
GONE_AFTER = timedelta(seconds=4 * BEAT_SECONDS)
#: A gone process stays listed this long, then the next registration deletes it.
PRUNE_AFTER = timedelta(days=1)
#: The most jobs of one process the page links to; the count is always whole.
HELD_SHOWN = 8
#: The PostgreSQL advisory-lock namespace of a key's registrations ("qlwp"); the second key is the key's id.
#: (Two-key locks, like the enqueue's quota turns, in a namespace of their own.)
_TURN_NAMESPACE = 0x716C7770


class Command(StrEnum):
    """What a process is told by its beat."""

    RUN = "run"
    QUIET = "quiet"
    STOP = "stop"


#: The commands an admin may give, and the commands each may replace (never back to run).
MAY_FOLLOW = {Command.QUIET: (Command.RUN, Command.QUIET), Command.STOP: (Command.RUN, Command.QUIET, Command.STOP)}


class ProcessNotFound(QueueError):
    status = 404
    title = "Not found"


class ProcessLimitReached(QueueError):
    """The key has as many processes online as it may; nothing was registered. 429 with Retry-After."""

    status = 429
    title = "Too many worker processes"
    problem = "max-worker-processes-reached"

    def __init__(self, detail: str, retry_after: int, **numbers):
        super().__init__(detail, **numbers)
        self.retry_after = retry_after


@dataclass(frozen=True)
class NewProcess:
    """What a process says about itself when it registers."""

    host: str
    pid: int
    version: str
    concurrency: int
    types: tuple[str, ...]  # () = any type its key may claim


@dataclass
class ProcessState:
    """One registered process as the API and the page show it."""

    id: int
    key: str
    host: str
    pid: int
    version: str
    concurrency: int
    types: list[str]
    started_at: datetime
    heartbeat_at: datetime
    command: str
    command_by: str | None
    command_at: datetime | None
    online: bool
    held: list = field(default_factory=list)  # running jobs it claimed: (id, type, claimed_at)
    completed_hour: int = 0
    completed_day: int = 0
    failed_hour: int = 0
    failed_day: int = 0

    @classmethod
    def of_row(cls, row, now: datetime) -> ProcessState:
        return cls(
            id=row.id,
            key=row.key,
            host=row.host,
            pid=row.pid,
            version=row.version,
            concurrency=row.concurrency,
            types=json.loads(row.types),
            started_at=row.started_at,
            heartbeat_at=row.heartbeat_at,
            command=row.command,
            command_by=row.command_by,
            command_at=row.command_at,
            online=row.heartbeat_at > now - GONE_AFTER,
        )


def _listed():
    """Processes with their key's name, of live keys only (a revoked key's processes are not workers)."""
    return (
        select(processes, keys_table.c.name.label("key"))
        .join(keys_table, keys_table.c.id == processes.c.key_id)
        .where(keys_table.c.revoked_at.is_(None))
    )


def _own(conn: Connection, caller: Caller, process_id: int, now: datetime) -> ProcessState:
    row = conn.execute(_listed().where(processes.c.id == process_id, processes.c.key_id == caller.id)).first()
    if row is None:
        raise _not_found(process_id)
    return ProcessState.of_row(row, now)


def _not_found(process_id: int) -> ProcessNotFound:
    return ProcessNotFound(f"worker process {process_id} does not exist, or belongs to another key")


def register(caller: Caller, new: NewProcess) -> ProcessState:
    """A new process of the caller's key, told to run; long-gone processes are pruned on the way."""
    refused = [t for t in new.types if not caller.may_use_type(t)]
    if refused:
        raise InvalidRequest(
            [
                {"pointer": f"/types/{new.types.index(t)}", "detail": f"this key may not claim jobs of type {t!r}"}
                for t in refused
            ]
        )
    now = utcnow()
    most = current_app.config["MAX_WORKER_PROCESSES_PER_KEY"]
    with write_transaction() as conn:
        _take_turn(conn, caller.id)
        conn.execute(delete(processes).where(processes.c.heartbeat_at < now - GONE_AFTER - PRUNE_AFTER))
        _refuse_past_limit(conn, caller, most, now)
        process_id = conn.execute(
            insert(processes)
            .values(
                key_id=caller.id,
                host=new.host,
                pid=new.pid,
                version=new.version,
                concurrency=new.concurrency,
                types=json.dumps(list(new.types)),
                started_at=now,
                heartbeat_at=now,
                command=Command.RUN.value,
            )
            .returning(processes.c.id)
        ).scalar_one()
        return _own(conn, caller, process_id, now)


def _take_turn(conn: Connection, key_id: int) -> None:
    """The key's registrations take turns until commit, so two cannot both see room for one (PostgreSQL; on
    SQLite the write transaction holds the database's write lock from its first statement)."""
    if conn.dialect.name == "postgresql":
        conn.execute(select(func.pg_advisory_xact_lock(cast(_TURN_NAMESPACE, Integer), cast(key_id, Integer))))


def _refuse_past_limit(conn: Connection, caller: Caller, most: int, now: datetime) -> None:
    """ProcessLimitReached if the key has ``most`` processes online already."""
    online, oldest_beat = conn.execute(
        select(func.count(), func.min(processes.c.heartbeat_at)).where(
            processes.c.key_id == caller.id, processes.c.heartbeat_at > now - GONE_AFTER
        )
    ).one()
    if online < most:
        return
    # A place frees when one deregisters (any time) or goes gone: the one that beat longest ago first.
    wait = max(1, math.ceil((oldest_beat + GONE_AFTER - now).total_seconds()))
    raise ProcessLimitReached(
        f"key {caller.name!r} has {online} worker processes online and may have at most {most} "
        f"(QUEUELOG_MAX_WORKER_PROCESSES_PER_KEY); register again once one deregisters or stops beating",
        wait,
        limit=most,
        online=online,
    )


def beat(caller: Caller, process_id: int) -> ProcessState:
    """The process is alive: note the time, answer with its command. A gone process that beats is back."""
    now = utcnow()
    with write_transaction() as conn:
        done = conn.execute(
            update(processes)
            .where(processes.c.id == process_id, processes.c.key_id == caller.id)
            .values(heartbeat_at=now)
        )
        if not done.rowcount:
            raise _not_found(process_id)
        return _own(conn, caller, process_id, now)


def deregister(conn: Connection, caller: Caller, process_id: int) -> list[int]:
    """A clean exit: the process leaves the list at once. Returns the ids of the jobs still ``running`` under
    it, which the caller's transaction gives back (``queue.operations.deregister_process``)."""
    done = conn.execute(delete(processes).where(processes.c.id == process_id, processes.c.key_id == caller.id))
    if not done.rowcount:
        raise _not_found(process_id)
    return list(
        conn.execute(
            select(jobs.c.id).where(jobs.c.process_id == process_id, jobs.c.status == JobStatus.RUNNING.value)
        ).scalars()
    )


def get(caller: Caller, process_id: int) -> ProcessState:
    """One process: a worker key's own, any of a live key for an admin key."""
    now = utcnow()
    query = _listed().where(processes.c.id == process_id)
    if caller.role != Role.ADMIN.value:
        query = query.where(processes.c.key_id == caller.id)
    with read_connection() as conn:
        row = conn.execute(query).first()
    if row is None:
        raise _not_found(process_id)
    return ProcessState.of_row(row, now)


def list_for(caller: Caller | None) -> list[ProcessState]:
    """Processes of live keys, online first, newest first: a worker key's own; all for an admin (None: the page)."""
    now = utcnow()
    query = _listed()
    if caller is not None and caller.role != Role.ADMIN.value:
        query = query.where(processes.c.key_id == caller.id)
    with read_connection() as conn:
        rows = conn.execute(query.order_by(processes.c.started_at.desc(), processes.c.id.desc())).all()
    states = [ProcessState.of_row(row, now) for row in rows]
    return sorted(states, key=lambda state: not state.online)


def give_command(process_id: int, command: Command, actor: str) -> ProcessState:
    """An admin tells an online process to quiet or stop; its next beat (within BEAT_SECONDS) hears it.

    Guarded in the statement: only a listed, online process, and only forward (quiet never undoes a stop).
    """
    now = utcnow()
    with write_transaction() as conn:
        live_key = (
            select(keys_table.c.id)
            .where(keys_table.c.id == processes.c.key_id, keys_table.c.revoked_at.is_(None))
            .exists()
        )
        done = conn.execute(
            update(processes)
            .where(
                processes.c.id == process_id,
                live_key,
                processes.c.heartbeat_at > now - GONE_AFTER,
                processes.c.command.in_([c.value for c in MAY_FOLLOW[command]]),
            )
            .values(command=command.value, command_by=actor, command_at=now)
        )
        row = conn.execute(_listed().where(processes.c.id == process_id)).first()
    if row is None:
        raise _not_found(process_id)
    state = ProcessState.of_row(row, now)
    if not done.rowcount:
        why = "is gone (no heartbeat lately)" if not state.online else f"is already told to {state.command}"
        raise StateConflict(f"worker process {process_id} {why}", command=state.command, online=state.online)
    return state


def claim_command(conn: Connection, caller: Caller, process_id: int) -> Command:
    """Inside a claim's transaction: the named process's command (404 if it is not one of the caller's).

    404, as every /workers route answers for an unknown process or another key's: an id no schema can check.
    """
    command = conn.execute(
        select(processes.c.command).where(processes.c.id == process_id, processes.c.key_id == caller.id)
    ).scalar()
    if command is None:
        raise _not_found(process_id)
    return Command(command)


def with_work(states: list[ProcessState]) -> list[ProcessState]:
    """Fill in what each process holds now and what it finished in the last hour and day.

    Finished counts are of jobs whose last claim the process made and that ended completed or failed (a
    failed attempt that went back to pending is not counted), read from ix_jobs_process_status alone.
    """
    if not states:
        return states
    now = utcnow()
    by_id = {state.id: state for state in states}
    hour_ago, day_ago = now - timedelta(hours=1), now - timedelta(days=1)
    running, completed, failed = JobStatus.RUNNING.value, JobStatus.COMPLETED.value, JobStatus.FAILED.value
    with read_connection() as conn:
        held = conn.execute(
            select(jobs.c.id, jobs.c.type, jobs.c.claimed_at, jobs.c.process_id)
            .where(jobs.c.process_id.is_not(None), jobs.c.process_id.in_(list(by_id)), jobs.c.status == running)
            .order_by(jobs.c.id)
        ).all()
        counts = conn.execute(
            select(
                jobs.c.process_id,
                jobs.c.status,
                func.count(),
                func.sum(case((jobs.c.updated_at >= hour_ago, 1), else_=0)),
            )
            .where(
                and_(
                    jobs.c.process_id.is_not(None),
                    jobs.c.process_id.in_(list(by_id)),
                    jobs.c.status.in_([completed, failed]),
                    jobs.c.updated_at >= day_ago,
                )
            )
            .group_by(jobs.c.process_id, jobs.c.status)
        ).all()
    for row in held:
        by_id[row.process_id].held.append(row)
    for process_id, status, day, hour in counts:
        state = by_id[process_id]
        if status == completed:
            state.completed_day, state.completed_hour = day, int(hour or 0)
        else:
            state.failed_day, state.failed_hour = day, int(hour or 0)
    return states
