"""Job and event rows as the API shows them."""
from __future__ import annotations

import json

from sqlalchemy import Row

from ..clock import rfc3339
from ..keys import Caller
from ..models import Priority, Role
from ..queue.flow import TypeState
from ..schedules import ScheduleState


def may_read_error(caller: Caller, row: Row) -> bool:
    """V-10: worker error text is for admins and the worker holding the job, never for producers."""
    if caller.role == Role.ADMIN.value:
        return True
    return caller.role == Role.WORKER.value and row.worker_id == caller.name


def job_json(row: Row, caller: Caller, claim_token: bool = False) -> dict:
    """Every schema field, priority as its label, payload/result as objects, times in RFC 3339."""
    body = {
        "id": row.id,
        "type": row.type,
        "status": row.status,
        "priority": Priority.label_of(row.priority),
        "payload": json.loads(row.payload),
        "result": json.loads(row.result) if row.result is not None else None,
        "retry_count": row.retry_count,
        "max_retries": row.max_retries,
        "stall_count": row.stall_count,
        "idempotency_key": row.idempotency_key,
        "producer": row.producer,
        "worker_id": row.worker_id,
        "error": row.error if may_read_error(caller, row) else None,
        "run_at": rfc3339(row.run_at),
        "claimed_at": rfc3339(row.claimed_at),
        "heartbeat_at": rfc3339(row.heartbeat_at),
        "lease_expires_at": rfc3339(row.lease_expires_at),
        "completed_at": rfc3339(row.completed_at),
        "created_at": rfc3339(row.created_at),
        "updated_at": rfc3339(row.updated_at),
        "concurrency_key": row.concurrency_key or None,   # stored as '' when the job has none
        "unique_key": row.unique_key,
        "expires_at": rfc3339(row.expires_at),
        "timeout_seconds": row.timeout_seconds,
        "timeout_at": rfc3339(row.timeout_at),     # set by the claim: when the run must have ended
        "schedule": row.schedule,                         # the schedule that enqueued it, or null
        "scheduled_for": rfc3339(row.scheduled_for),      # ... and the tick it was enqueued for
    }
    if claim_token:
        body["claim_token"] = row.claim_token
    return body


def type_json(state: TypeState) -> dict:
    """A job type (a queue) as /types shows it: its flow control and how many of its jobs wait and run."""
    settings = state.settings
    return {
        "type": state.type,
        "paused": settings.paused,
        "concurrency_limit": settings.concurrency_limit,
        "rate_limit": settings.value("rate_limit"),
        "key_concurrency_limit": settings.key_concurrency_limit,
        "pending": state.pending,
        "running": state.running,
    }


def event_json(row: Row, show_error: bool) -> dict:
    return {
        "id": row.id,
        "job_id": row.job_id,
        "event": row.event,
        "from_status": row.from_status,
        "to_status": row.to_status,
        "actor": row.actor,
        "attempt": row.attempt,
        "error": row.error if show_error else None,
        "at": rfc3339(row.at),
    }


def schedule_json(state: ScheduleState) -> dict:
    """A schedule as /schedules shows it; ``next_run_at`` is null while it is paused (it does not tick)."""
    spec = state.spec
    return {
        "name": spec.name,
        "cron": spec.timing.cron,
        "every_seconds": spec.timing.every_seconds,
        "timezone": spec.timing.timezone,
        "job": spec.job.as_json(),
        "paused": spec.paused,
        "catch_up": spec.catch_up,
        "next_run_at": None if spec.paused else rfc3339(state.next_run_at),
        "last_run_at": rfc3339(state.last_run_at),
        "last_job_id": state.last_job_id,
        "created_at": rfc3339(state.created_at),
        "updated_at": rfc3339(state.updated_at),
    }
