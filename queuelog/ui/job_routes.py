"""The jobs table, one job's page, and the admin's actions on jobs (all through ``queuelog.queue``)."""

from __future__ import annotations

import json

from flask import abort, current_app, flash, redirect, render_template, request, url_for

from .. import queue
from ..core.clock import utcnow
from ..core.errors import InvalidRequest, JobNotFound, QueueError
from ..models import Priority
from ..reads.queries import links, max_job_id
from ..states import FINAL, RETRYABLE, spell
from . import bp
from .auth import actor_name
from .explain import why_not_retried
from .forms import ActionForm, BulkRetryForm, JobFilterForm
from .helpers import render_live
from .listing import JobSearch, count_retryable, find_jobs, load_job, newest_job_id, retryable_batch

PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
# One click retries at most this many jobs: each batch commits on its own, and the request stays
# well inside a proxy's timeout. The page says how many are left, and the operator clicks again.
RETRY_ALL_LIMIT = 10_000
RETRY_BATCH = 500


def search_from(form: JobFilterForm) -> JobSearch:
    data = form.data
    return JobSearch(
        status=data["status"] or None,
        type=data["type"] or None,
        priority=int(Priority.from_label(data["priority"])) if data["priority"] else None,
        worker=data["worker"] or None,
        concurrency_key=data["key"] or None,
        q=data["q"] or None,
        error=data["error"] or None,
        payload=form.payload_match,
        group=data["group"] or None,
    )


def _page_size() -> int:
    try:
        return min(MAX_PAGE_SIZE, max(1, int(request.args.get("limit", PAGE_SIZE))))
    except ValueError:
        return PAGE_SIZE


@bp.get("/admin/jobs")
def jobs():
    """Jobs newest first, filtered by status, type, priority, worker and concurrency key, or looked up by id or
    idempotency key."""
    args = request.args.copy()
    if "worker_id" in args and "worker" not in args:
        args["worker"] = args["worker_id"]  # the API's name for the same filter, so its links work here too
    form = JobFilterForm(args)
    context = {
        "form": form,
        "rows": [],
        "next_cursor": None,
        "retryable_count": 0,
        "bulk_form": BulkRetryForm(),
        "filter_args": {},
        "retry_limit": RETRY_ALL_LIMIT,
        "job_types": current_app.config["JOB_TYPES"],
        "now": utcnow(),
        "cursor": None,
        "retry_statuses": (),
    }
    if not form.validate():
        return render_template("jobs.html", **context), 400
    search = search_from(form)
    context["filter_args"] = form.query_args()
    cursor = request.args.get("cursor") or None
    try:
        context["rows"], context["next_cursor"] = find_jobs(search, _page_size(), cursor)
    except InvalidRequest:
        context["cursor_error"] = "That page link is not valid any more; showing the newest jobs instead."
        context["rows"], context["next_cursor"] = find_jobs(search, _page_size(), None)
        cursor = None
    context["cursor"] = cursor
    context["retryable_count"] = count_retryable(search, RETRY_ALL_LIMIT + 1)
    context["retry_statuses"] = search.retry_statuses()
    return render_live("jobs.html", "_jobs_live.html", **context)


@bp.post("/admin/jobs/retry")
def retry_jobs():
    """Retry the ticked jobs, or every retryable job matching the filters, in one action."""
    form = BulkRetryForm()
    filters = JobFilterForm(request.form)
    back = url_for("ui.jobs", **(filters.query_args() if filters.validate() else {}))
    if not form.validate_on_submit() or not filters.validate():
        flash("That retry request was not understood; nothing was changed.", "error")
        return redirect(back)
    if form.scope.data == "selected":
        chosen = sorted(set(form.job_id.data or []))
        if not all(1 <= job_id <= max_job_id() for job_id in chosen):
            # The page only ever sends ids of listed jobs; anything else was typed or forged.
            flash("That retry request was not understood; nothing was changed.", "error")
            return redirect(back)
        if not chosen:
            flash("Tick the failed jobs to retry first (or use “retry all matching”).", "error")
            return redirect(back)
        if len(chosen) > MAX_PAGE_SIZE:
            flash(
                f"Tick at most {MAX_PAGE_SIZE} jobs at a time (or use “retry all matching”); nothing was changed.",
                "error",
            )
            return redirect(back)
        retried = queue.retry_many(chosen, actor_name())
        skipped = len(chosen) - len(retried)
        message = f"Retried {len(retried)} job{'s' if len(retried) != 1 else ''}."
        if skipped:
            message += (
                f" {skipped} of the selected jobs {'were' if skipped != 1 else 'was'} "
                f"no longer {spell(RETRYABLE)} and left as is."
            )
        flash(message, "success" if retried else "info")
        return redirect(back)
    search = search_from(filters)
    up_to, after, total = newest_job_id(), 0, 0
    while total < RETRY_ALL_LIMIT:
        ids = retryable_batch(search, after, up_to, min(RETRY_BATCH, RETRY_ALL_LIMIT - total))
        if not ids:
            break
        total += len(queue.retry_many(ids, actor_name()))
        after = ids[-1]
    remaining = len(retryable_batch(search, after, up_to, 1)) if total >= RETRY_ALL_LIMIT else 0
    message = f"Retried {total} matching job{'s' if total != 1 else ''}."
    if remaining:
        message += f" More match: retry again to continue (at most {RETRY_ALL_LIMIT} per click)."
    flash(message, "success" if total else "info")
    return redirect(back)


def trace_id(traceparent: str | None) -> str | None:
    """The trace a job was enqueued in: the second field of its W3C traceparent (version-trace_id-parent_id-flags),
    what a tracing tool finds the producer's and the workers' spans by; None when the job carries none."""
    fields = (traceparent or "").split("-")
    return fields[1] if len(fields) > 1 and fields[1] else None


def _abort_unless_storable(job_id: int) -> None:
    """An id the id column cannot hold names no job: 404, as the API answers, not a driver error (500)."""
    if job_id > max_job_id():
        abort(404, description=f"job {job_id} does not exist")


@bp.get("/admin/jobs/<int:job_id>")
def job(job_id: int):
    """Everything about one job: fields, payload, result, last error, full event log, fitting actions."""
    _abort_unless_storable(job_id)
    now = utcnow()
    try:
        row, history, reading = load_job(job_id, now)
    except JobNotFound as error:
        abort(404, description=error.detail)
    graph = links(None, [job_id])[job_id]
    progress = json.loads(row.progress) if row.progress is not None else None
    unfinished = [parent for parent in graph.parents if parent.status not in FINAL]
    return render_live(
        "job.html",
        "_job_live.html",
        job=row,
        history=history,
        action_form=ActionForm(),
        failure=why_not_retried(row, history),
        now=now,
        graph=graph,
        progress=progress,
        reading=reading,
        unfinished=unfinished,
        trace_id=trace_id(row.traceparent),
    )


def _job_action(job_id: int, action, done: str):
    """Run one queue action for the signed-in admin; a refusal (409, 404) becomes a message, not an error page."""
    _abort_unless_storable(job_id)
    if ActionForm().validate_on_submit():
        try:
            action(job_id, actor_name())
        except QueueError as error:
            flash(error.detail[:1].upper() + error.detail[1:] + ".", "error")
        else:
            flash(done.format(id=job_id), "success")
    return redirect(url_for("ui.job", job_id=job_id))


@bp.post("/admin/jobs/<int:job_id>/retry")
def retry_job(job_id: int):
    """failed or cancelled → pending."""
    return _job_action(job_id, queue.retry, "Job {id} is back in the queue with a fresh retry budget.")


@bp.post("/admin/jobs/<int:job_id>/cancel")
def cancel_job(job_id: int):
    """waiting or pending → cancelled."""
    return _job_action(job_id, queue.cancel, "Job {id} is cancelled; no worker will claim it.")


@bp.post("/admin/jobs/<int:job_id>/release")
def release_job(job_id: int):
    """running → pending: take the job back from its worker without counting a failure."""
    return _job_action(
        job_id, queue.release, "Job {id} was given back to the queue; its worker's claim no longer counts."
    )
