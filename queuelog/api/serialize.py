"""Job and event rows as the API shows them."""

from __future__ import annotations

import json

from sqlalchemy import Row

from ..auth.keys import Caller
from ..core.clock import rfc3339
from ..models import Priority, Role
from ..queue.flow import TypeState
from ..reads.queries import last_change
from ..reads.queries import links as links_of
from ..schedules import ScheduleState
from ..states import Event

#: Events whose text the server writes itself (which parent failed), never a worker's: every viewer sees it.
_SERVER_TEXT = frozenset({Event.DEPENDENCY_FAILED.value})


def may_read_error(caller: Caller, row: Row) -> bool:
    """V-10: worker error text is for admins and the worker holding the job, never for producers."""
    if caller.role == Role.ADMIN.value:
        return True
    return caller.role == Role.WORKER.value and row.worker_id == caller.name


def job_json(row: Row, caller: Caller, claim_token: bool = False, parents: list[Row] | None = None, links=None) -> dict:
    """Every schema field, priority as its label, payload/result as objects, times in RFC 3339.

    ``parents``: a claimed child's parents, with their results (fan-in). ``links``: the job's parents and
    children the caller may see (``queries.links``), shown as ids; looked up here when not given and the
    job is part of a workflow (``jobs_json`` looks them up for many jobs at once).
    """
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
        "updated_at": rfc3339(last_change(row)),
        "concurrency_key": row.concurrency_key or None,  # stored as '' when the job has none
        "unique_key": row.unique_key,
        "expires_at": rfc3339(row.expires_at),
        "timeout_seconds": row.timeout_seconds,
        "timeout_at": rfc3339(row.timeout_at),  # set by the claim: when the run must have ended
        "schedule": row.schedule,  # the schedule that enqueued it, or null
        "scheduled_for": rfc3339(row.scheduled_for),  # ... and the tick it was enqueued for
        "run_when": row.run_when,
        "progress": json.loads(row.progress) if row.progress is not None else None,
        "traceparent": row.traceparent,  # the W3C trace context it was enqueued in, or null
        "tracestate": row.tracestate,
    }
    if claim_token:
        body["claim_token"] = row.claim_token
    if parents is not None:
        body["parents"] = parents_json(parents)
    if links is None and in_workflow(row):
        links = links_of(caller, [row.id])[row.id]
    body["depends_on"] = [parent.id for parent in links.parents] if links else []
    body["dependents"] = [child.id for child in links.children] if links else []
    return body


def parents_json(parents: list[Row]) -> list[dict]:
    """A claimed child's parents: id, type, status and result each."""
    return [
        {
            "id": parent.id,
            "type": parent.type,
            "status": parent.status,
            "result": json.loads(parent.result) if parent.result is not None else None,
        }
        for parent in parents
    ]


def in_workflow(row: Row) -> bool:
    """Has the job parents or children? (Else its depends_on and dependents are empty, without a query.)"""
    return row.run_when is not None or bool(row.has_dependents)


def jobs_json(rows, caller: Caller, **options) -> list[dict]:
    """``job_json`` of each row, the workflow links of them all looked up at once."""
    links = links_of(caller, [row.id for row in rows if in_workflow(row)])
    return [job_json(row, caller, links=links.get(row.id), **options) for row in rows]


def type_json(state: TypeState) -> dict:
    """A job type (a queue) as /types shows it: its flow control and how many of its jobs wait and run."""
    settings = state.settings
    return {
        "type": state.type,
        "paused": settings.paused,
        "concurrency_limit": settings.concurrency_limit,
        "rate_limit": settings.value("rate_limit"),
        "key_concurrency_limit": settings.key_concurrency_limit,
        "unique_scope": settings.unique_scope,
        "push": push_json(state),
        "pending": state.pending,
        "running": state.running,
    }


def push_json(state: TypeState) -> dict | None:
    """A type's push target, its last delivery, and its secret only in the answer that issued it."""
    target = state.settings.push
    if target is None:
        return None
    shown = target.as_json()
    shown["last_delivery"] = state.last_delivery.as_json(rfc3339) if state.last_delivery else None
    if state.new_secret is not None:
        shown["secret"] = state.new_secret
    return shown


def event_json(row: Row, show_error: bool) -> dict:
    return {
        "id": row.id,
        "job_id": row.job_id,
        "event": row.event,
        "from_status": row.from_status,
        "to_status": row.to_status,
        "actor": row.actor,
        "attempt": row.attempt,
        "error": row.error if show_error or row.event in _SERVER_TEXT else None,
        "http_status": row.http_status,  # a push delivery's answer ("delivered"); null for every other event
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
