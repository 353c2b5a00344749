"""Retry, cancel or delete many jobs at once, ticked or all matching the filters, after a confirmation
page that names the count. The page is the server's, so asking first works with JavaScript off too.

The queue decides which jobs each action takes (its statements' guards); the page only counts, beforehand,
how many the action will take and which it will leave alone, and says afterwards what happened.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from flask import flash, redirect, render_template, request, url_for

from .. import queue
from ..reads.queries import max_job_id
from ..states import BY_ACTION, DELETABLE, RETRYABLE, names, spell
from . import bp
from .auth import actor_name
from .forms import BulkActionForm, JobFilterForm
from .job_routes import MAX_PAGE_SIZE, RETRY_ALL_LIMIT, RETRY_BATCH, search_from
from .listing import JobSearch, count_matching, count_others, matching_batch, newest_job_id, statuses_of

NOT_UNDERSTOOD = "That request was not understood; nothing was changed."


@dataclass(frozen=True)
class BulkAction:
    """One action the jobs page offers in bulk: its words, the statuses it takes a job out of, the queue call."""

    name: str
    verb: str
    done: str
    statuses: frozenset
    run: Callable[[list[int], str], list]
    effect: str

    def why_left(self) -> str:
        """Why a job in another status is left alone: 'only waiting or pending jobs can be cancelled'."""
        return f"only {spell(self.statuses)} jobs can be {self.done.lower()}"

    def statuses_for(self, search: JobSearch) -> tuple[str, ...]:
        """The statuses "all matching" takes: the filtered one if the action takes it; for retry, failed
        jobs unless the filter asks for cancelled ones (as "retry all matching" always did)."""
        if search.status is not None:
            return (search.status,) if search.status in names(self.statuses) else ()
        return search.retry_statuses() if self.name == "retry" else names(self.statuses)


ACTIONS = {
    action.name: action
    for action in (
        BulkAction(
            "retry",
            "Retry",
            "Retried",
            RETRYABLE,
            queue.retry_many,
            "They go back to the queue with a fresh retry budget.",
        ),
        BulkAction(
            "cancel",
            "Cancel",
            "Cancelled",
            BY_ACTION["cancel"].from_statuses,
            queue.cancel_many,
            "No worker will claim them; an admin can retry them later.",
        ),
        BulkAction(
            "delete",
            "Delete",
            "Deleted",
            DELETABLE,
            queue.delete_many,
            "They are removed with their event logs. This cannot be undone.",
        ),
    )
}


@dataclass
class BulkPlan:
    """What the confirmation page says: how many jobs the action takes, which it leaves alone and why."""

    action: BulkAction
    scope: str  # "selected" or "matching"
    count: int  # jobs the action will take (at most limit + 1 counted)
    left: dict[str, int] = field(default_factory=dict)  # jobs left alone, by status
    missing: int = 0  # ticked jobs that do not exist (any more)
    job_ids: list[int] = field(default_factory=list)
    up_to: int | None = None
    limit: int = RETRY_ALL_LIMIT

    def shown_count(self) -> str:
        """'37', or '10,000+' past what one click does."""
        return f"{self.limit:,}+" if self.count > self.limit else f"{self.count:,}"

    def question(self) -> str:
        """'Cancel 37 jobs?'"""
        return f"{self.action.verb} {self.shown_count()} job{'s' if self.count != 1 else ''}?"


def _left_alone(left: dict[str, int], missing: int, action: BulkAction) -> str:
    """'3 running and 1 completed (only waiting or pending jobs can be cancelled); 1 no longer exists'."""
    parts = []
    if left:
        counts = ", ".join(f"{count:,} {status}" for status, count in sorted(left.items()))
        parts.append(f"{counts} ({action.why_left()})")
    if missing:
        parts.append(f"{missing:,} no longer exist{'s' if missing == 1 else ''}")
    return "; ".join(parts)


@bp.post("/admin/jobs/bulk")
def bulk_jobs():
    """Ask (a page naming the count), then retry, cancel or delete the ticked or all matching jobs."""
    form = BulkActionForm()
    filters = JobFilterForm(request.form)
    filters_valid = filters.validate()
    back = url_for("ui.jobs", **(filters.query_args() if filters_valid else {}))
    if not form.validate_on_submit() or not filters_valid:
        flash(NOT_UNDERSTOOD, "error")
        return redirect(back)
    name, scope = form.do.data.split("-")
    action = ACTIONS[name]
    if scope == "selected":
        chosen = sorted(set(form.job_id.data or []))
        if not all(1 <= job_id <= max_job_id() for job_id in chosen):
            flash(NOT_UNDERSTOOD, "error")  # the page only ever sends ids of listed jobs
            return redirect(back)
        if not chosen:
            flash(f"Tick the jobs to {action.verb.lower()} first.", "error")
            return redirect(back)
        if len(chosen) > MAX_PAGE_SIZE:
            flash(f"Tick at most {MAX_PAGE_SIZE} jobs at a time; nothing was changed.", "error")
            return redirect(back)
        plan = _plan_selected(action, chosen)
    else:
        plan = _plan_matching(action, search_from(filters), form.up_to.data or newest_job_id())
    if form.confirmed.data != "yes":
        return _confirmation(plan, filters.query_args(), back)
    if scope == "selected":
        _run_selected(action, plan.job_ids)
    else:
        _run_matching(action, search_from(filters), plan)
    return redirect(back)


def _confirmation(plan: BulkPlan, filter_args: dict[str, str], back: str):
    """The page that names the count and asks; with nothing to act on, it says so and only offers the way back."""
    action, scope = plan.action, plan.scope
    which = "ticked" if scope == "selected" else "matching"
    lines = []
    if scope == "matching" and filter_args:
        lines.append("Filter: " + ", ".join(f"{name} = {value}" for name, value in filter_args.items()) + ".")
    left = _left_alone(plan.left, plan.missing, action)
    if not plan.count:
        lines.append(f"None of the {which} jobs can be {action.done.lower()}" + (f": {left}." if left else "."))
        return render_template(
            "confirm.html", question=f"Nothing to {action.verb.lower()}", lines=lines, fields=None, back=back
        )
    lines.append(
        f"{plan.shown_count()} {which} job{'s' if plan.count != 1 else ''} will be "
        f"{action.done.lower()}. {action.effect}"
    )
    if plan.count > plan.limit:
        lines.append(f"One click takes at most {plan.limit:,}; confirm again afterwards for the rest.")
    if left:
        lines.append(f"Left alone: {left}.")
    fields = [("do", f"{action.name}-{scope}"), *filter_args.items()]
    fields += [("job_id", job_id) for job_id in plan.job_ids]
    if plan.up_to is not None:
        fields.append(("up_to", plan.up_to))
    button = f"{action.verb} {plan.shown_count()} job{'s' if plan.count != 1 else ''}"
    return render_template(
        "confirm.html",
        question=plan.question(),
        lines=lines,
        fields=fields,
        action=url_for("ui.bulk_jobs"),
        button=button,
        back=back,
        button_class="button-danger" if action.name != "retry" else "button-primary",
    )


def _plan_selected(action: BulkAction, chosen: list[int]) -> BulkPlan:
    now = statuses_of(chosen)
    takes = names(action.statuses)
    left: dict[str, int] = {}
    for status in now.values():
        if status not in takes:
            left[status] = left.get(status, 0) + 1
    return BulkPlan(
        action,
        "selected",
        count=sum(1 for s in now.values() if s in takes),
        left=left,
        missing=len(chosen) - len(now),
        job_ids=chosen,
    )


def _plan_matching(action: BulkAction, search: JobSearch, up_to: int) -> BulkPlan:
    statuses = action.statuses_for(search)
    return BulkPlan(
        action,
        "matching",
        count=count_matching(search, statuses, RETRY_ALL_LIMIT + 1, up_to),
        left=count_others(search, statuses, RETRY_ALL_LIMIT + 1, up_to),
        up_to=up_to,
    )


def _run_selected(action: BulkAction, chosen: list[int]) -> None:
    done = {row.id for row in action.run(chosen, actor_name())}
    rest = [job_id for job_id in chosen if job_id not in done]
    now = statuses_of(rest)
    left: dict[str, int] = {}
    for status in now.values():
        left[status] = left.get(status, 0) + 1
    message = f"{action.done} {len(done):,} job{'s' if len(done) != 1 else ''}."
    skipped = _left_alone(left, len(rest) - len(now), action)
    if skipped:
        message += f" Left alone {len(rest):,}: {skipped}."
    flash(message, "success" if done else "info")


def _run_matching(action: BulkAction, search: JobSearch, plan: BulkPlan) -> None:
    statuses = action.statuses_for(search)
    after, total = 0, 0
    while total < RETRY_ALL_LIMIT:
        ids = matching_batch(search, statuses, after, plan.up_to, min(RETRY_BATCH, RETRY_ALL_LIMIT - total))
        if not ids:
            break
        total += len(action.run(ids, actor_name()))
        after = ids[-1]
    message = f"{action.done} {total:,} matching job{'s' if total != 1 else ''}."
    # Counted just before the action ran (plan), so the jobs it changed are not among them.
    skipped = _left_alone(plan.left, 0, action)
    if plan.count - total > 0 and plan.count <= RETRY_ALL_LIMIT:
        moved = plan.count - total
        skipped += ("; " if skipped else "") + f"{moved:,} moved on meanwhile"
    if skipped:
        message += f" Left alone: {skipped}."
    if total >= RETRY_ALL_LIMIT and matching_batch(search, statuses, after, plan.up_to, 1):
        message += f" More match: {action.verb.lower()} again to continue (at most {RETRY_ALL_LIMIT:,} per click)."
    flash(message, "success" if total else "info")
