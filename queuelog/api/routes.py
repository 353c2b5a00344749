"""API views: parse the request, make one queue call, shape the response. Nothing more."""

from __future__ import annotations

from flask import jsonify, url_for

from .. import queue
from ..core.errors import QueueError
from ..models import Role
from ..reads import queries
from ..states import FINAL, names
from ..waiting import longpoll, result_wait
from . import bp
from .auth import current_caller, require_role, require_role_or_push_token
from .body import parse_empty
from .errors import queue_refused
from .job_bodies import parse_enqueue, parse_enqueue_batch
from .query_params import parse_job_query, parse_list_query
from .serialize import event_json, job_json, jobs_json, may_read_error, parents_json
from .worker_bodies import parse_claim, parse_complete, parse_complete_batch, parse_fail, parse_heartbeat, parse_release

PRODUCER, WORKER, ADMIN = Role.PRODUCER.value, Role.WORKER.value, Role.ADMIN.value
FINAL_NAMES = names(FINAL)


@bp.post("/jobs")
@require_role(PRODUCER, ADMIN)
def enqueue_job():
    """Enqueue one job: 201 when created; 200 when the idempotency key replays an earlier request, or when the
    job falls in another's dedupe window (``unique_for``: that job, ``"deduplicated": true``; only
    ``{"deduplicated": true}``, and no Location, when the caller may not see that job)."""
    caller = current_caller()
    [(row, created, deduplicated)] = queue.enqueue(caller, [parse_enqueue()])
    if row is None:
        return jsonify(HIDDEN_HIT), 200
    response = jsonify(_marked(job_json(row, caller), deduplicated))
    response.status_code = 201 if created else 200
    response.headers["Location"] = url_for("api.get_job", job_id=row.id)
    return response


@bp.post("/jobs/batch")
@require_role(PRODUCER, ADMIN)
def enqueue_batch():
    """Enqueue up to 500 jobs all-or-nothing; 201 if any was created, else 200. An item that falls in a dedupe
    window answers, in its place, with the job holding it (``"deduplicated": true``), or only with
    ``{"deduplicated": true}`` when the caller may not see that job."""
    caller = current_caller()
    results = queue.enqueue(caller, parse_enqueue_batch(), batch=True)
    shown = iter(jobs_json([result.job for result in results if result.job is not None], caller))
    body = {
        "jobs": [
            dict(_marked(next(shown), result.deduplicated), created=result.created)
            if result.job is not None
            else dict(HIDDEN_HIT)
            for result in results
        ]
    }
    return jsonify(body), 201 if any(result.created for result in results) else 200


#: A dedupe hit on a job the caller may not see (a type's shared window): that there was one, nothing of it.
HIDDEN_HIT = {"deduplicated": True}


def _marked(body: dict, deduplicated: bool) -> dict:
    """An enqueue's answer for one job: the job, with ``"deduplicated": true`` when it is another enqueue's."""
    if deduplicated:
        body["deduplicated"] = True
    return body


@bp.get("/jobs")
@require_role(PRODUCER, ADMIN)
def list_jobs():
    """A page of jobs, newest first: a producer sees its own, an admin all."""
    caller = current_caller()
    query = parse_list_query()
    where = queries.JobFilter(
        status=query.status,
        type=query.type,
        priority=query.priority,
        worker_id=query.worker_id,
        producer_key_id=caller.id if caller.role == PRODUCER else None,
    )
    rows, next_cursor = queries.list_jobs(where, query.limit, query.cursor)
    return jsonify({"jobs": jobs_json(rows, caller), "next_cursor": next_cursor})


@bp.post("/jobs/claim")
@require_role(WORKER)
def claim_job():
    """Claim the next due job (200), or several with ``limit`` ({"jobs": [...]}); 204 when none is due.

    With ``wait`` (seconds) the request is held until a job can be claimed or the time is up; 503
    with Retry-After when this server process already holds as many waiting claims as it may.
    """
    caller = current_caller()
    asked = parse_claim(caller.name)
    rows = longpoll.claim_or_wait(
        lambda: queue.claim(
            caller,
            types=asked.types,
            limit=asked.limit or 1,
            lease_seconds=asked.lease_seconds,
            process=asked.process_id,
        ),
        asked.wait,
        asked.types or caller.allowed_types,
        give_back=queue.give_back_unanswered,
    )
    if not rows:
        return "", 204
    # A workflow's child carries its parents' results, so a fan-in handler needs no more requests.
    parents = queries.parents_of([row.id for row in rows if row.run_when is not None])
    if asked.limit is None:
        return jsonify(job_json(rows[0], caller, claim_token=True, parents=parents.get(rows[0].id)))
    shown = jobs_json(rows, caller, claim_token=True)
    for job in shown:
        if job["id"] in parents:
            job["parents"] = parents_json(parents[job["id"]])
    return jsonify({"jobs": shown})


@bp.get("/jobs/<int:job_id>")
@require_role(PRODUCER, WORKER, ADMIN)
def get_job(job_id: int):
    """One job, if the caller may see it (else 404, never 403: V-09), with the ids of its parents and children.

    With ``?wait=S`` (0 < S ≤ 30) the answer waits until the job is final, or S seconds, whichever is first.
    """
    caller = current_caller()
    wait = parse_job_query()
    row = queries.get_job(caller, job_id)
    if wait and row.status not in FINAL_NAMES:
        row = result_wait.wait_for_end(row, wait)
    return jsonify(job_json(row, caller))


@bp.get("/jobs/<int:job_id>/events")
@require_role(PRODUCER, WORKER, ADMIN)
def job_events(job_id: int):
    """The job's event log, oldest first."""
    caller = current_caller()
    job, history = queries.job_events(caller, job_id)
    show_error = may_read_error(caller, job)
    return jsonify({"events": [event_json(row, show_error) for row in history]})


@bp.post("/jobs/<int:job_id>/heartbeat")
@require_role_or_push_token(WORKER)
def heartbeat_job(job_id: int):
    """Extend the holding worker's lease."""
    caller, beat = current_caller(), parse_heartbeat()
    row = queue.heartbeat(caller, job_id, beat.token, beat.lease_seconds, beat.progress)
    return jsonify(job_json(row, caller))


@bp.post("/jobs/complete")
@require_role(WORKER)
def complete_jobs():
    """Complete up to 100 held jobs in one request: one outcome per item, in order, HTTP 200 overall."""
    caller = current_caller()
    items = parse_complete_batch()
    outcomes = queue.complete_many(caller, [(item.id, item.token, item.result) for item in items])
    results = []
    for item, outcome in zip(items, outcomes, strict=True):
        if isinstance(outcome, QueueError):
            results.append({"id": item.id, "status": outcome.status, "problem": queue_refused(outcome).get_json()})
        else:
            results.append({"id": item.id, "status": 200, "job": job_json(outcome, caller)})
    return jsonify({"results": results})


@bp.post("/jobs/<int:job_id>/complete")
@require_role_or_push_token(WORKER)
def complete_job(job_id: int):
    """Mark the held job completed, with an optional result object."""
    caller, done = current_caller(), parse_complete()
    return jsonify(job_json(queue.complete(caller, job_id, done.token, done.result), caller))


@bp.post("/jobs/<int:job_id>/fail")
@require_role_or_push_token(WORKER)
def fail_job(job_id: int):
    """Record a failure: back to pending while retries remain, else failed."""
    caller, failure = current_caller(), parse_fail()
    row = queue.fail(caller, job_id, failure.token, failure.error, failure.retryable)
    return jsonify(job_json(row, caller))


@bp.post("/jobs/<int:job_id>/release")
@require_role(WORKER)
def release_job(job_id: int):
    """Give a held job back to the queue without counting a failure."""
    caller, release = current_caller(), parse_release()
    return jsonify(job_json(queue.release(job_id, caller.actor, caller=caller, token=release.token), caller))


@bp.post("/jobs/<int:job_id>/cancel")
@require_role(PRODUCER, ADMIN)
def cancel_job(job_id: int):
    """Cancel a pending job: a producer its own, an admin any."""
    caller = current_caller()
    parse_empty()
    owner = caller.id if caller.role == PRODUCER else None
    return jsonify(job_json(queue.cancel(job_id, caller.actor, owner_key_id=owner), caller))


@bp.post("/jobs/<int:job_id>/retry")
@require_role(ADMIN)
def retry_job(job_id: int):
    """Put a failed or cancelled job back to pending with its retries reset."""
    caller = current_caller()
    parse_empty()
    return jsonify(job_json(queue.retry(job_id, caller.actor), caller))
