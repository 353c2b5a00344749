"""Who acts on a job that the server pushed to a target: the server's own delivery, and the target itself.

A push delivery holds its job as the worker ``push:<type>`` (no API key's name has a colon). An async target
holds no API key: it completes, fails or heartbeats the job with the claim token it was sent, and that token is
the capability, for the job's current attempt only. The moves are the holding worker's own (``operations``),
guarded by worker and token in their statement, so a token from an attempt since reaped moves nothing (409).
"""

from __future__ import annotations

from ..auth.keys import Caller
from ..core.patterns import Priority
from ..database.transactions import read_connection
from ..models import Role
from ..reads.queries import max_job_id
from ..sql import job as job_row
from . import flow
from .push_targets import WORKER_PREFIX, worker_name


def push_caller(job_type: str) -> Caller:
    """The worker a push delivery of ``job_type`` claims and acts as."""
    return Caller(
        id=0,
        name=worker_name(job_type),
        role=Role.WORKER.value,
        max_priority=max(Priority),
        allowed_types=(job_type,),
        acts_as=worker_name(job_type),
    )


def token_holder(job_id: int) -> Caller | None:
    """Who a request bearing no API key acts as on job ``job_id``: the push worker of its type, when the type
    has a push target or the job is held by a push delivery; None otherwise (the request needs a key)."""
    if not 0 < job_id <= max_job_id():
        return None
    with read_connection() as conn:
        job = job_row(conn, job_id)
    if job is None:
        return None
    pushed = job.type in flow.controlled().pushed or (job.worker_id or "").startswith(WORKER_PREFIX)
    return push_caller(job.type) if pushed else None
