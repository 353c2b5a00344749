"""A workflow's enqueue: the new jobs' parents checked and locked, the new jobs made waiting, their edges
written and each decided at once (queue/dependencies.py moves them on as their parents finish).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from .. import sql
from ..auth.keys import Caller
from ..core.errors import InvalidRequest
from ..states import BY_ACTION, RunWhen
from . import dependencies
from .steps import _AsItem, _Deduped, _Earlier, _Hidden, _Insert, _SameWindow, _Step

if TYPE_CHECKING:
    from .new_jobs import Enqueued, NewJob

ENQUEUE_WAITING = BY_ACTION["enqueue_waiting"]


def _with_parents(conn, caller: Caller, new_jobs: list[NewJob], steps: list, batch: bool) -> list:
    """The steps, with each new job that has parents made ``waiting`` (run_when set), and each new job that
    a new job of this batch depends on marked as having dependents.

    The existing parents (job ids, and items answered with an earlier job) are marked and locked first
    (MARK_PARENTS): each must exist and be the caller's to see, else the request is refused (422, pointing
    at the id), and none can finish unseen before this transaction commits. A ref to an item answered by a
    job the caller may not see is refused too, pointing at the depends_on entry that names the ref.
    """
    existing, depended_on, problems = _parents_named(new_jobs, steps, batch)
    if existing:
        found = {mark.id: mark for mark in sql.mark_parents(conn, list(existing))}
        problems += [
            {"pointer": pointer, "detail": f"job {parent_id} does not exist"}
            for parent_id, pointers in existing.items()
            for pointer in pointers
            if parent_id not in found or not caller.owns_or_oversees(found[parent_id].producer_key_id)
        ]
    if problems:
        raise InvalidRequest(sorted(problems, key=lambda problem: problem["pointer"]))
    shaped = []
    for index, (job, step) in enumerate(zip(new_jobs, steps, strict=True)):
        if isinstance(step, _Insert):
            row = step.row
            if job.depends_on:
                row = row._replace(
                    status=ENQUEUE_WAITING.to_status.value, run_when=job.run_when or RunWhen.COMPLETED.value
                )
            if index in depended_on:
                row = row._replace(has_dependents=True)
            step = _Insert(row)
        shaped.append(step)
    return shaped


def _parents_named(
    new_jobs: list[NewJob], steps: list, batch: bool
) -> tuple[dict[int, list[str]], set[int], list[dict]]:
    """What the new jobs' depends_on name: existing jobs (id → the pointers naming it), the items of this
    batch that new items depend on, and the refused refs (to an item answered by a job the caller may not
    see, whose id it must not learn nor depend on)."""
    ref_index = {job.ref: index for index, job in enumerate(new_jobs) if job.ref is not None}
    existing: dict[int, list[str]] = {}
    depended_on: set[int] = set()
    refused: list[dict] = []
    for index, (job, step) in enumerate(zip(new_jobs, steps, strict=True)):
        if not isinstance(step, _Insert):
            continue
        for position, parent in enumerate(job.depends_on):
            pointer = f"/jobs/{index}/depends_on/{position}" if batch else f"/depends_on/{position}"
            if not isinstance(parent, str):
                existing.setdefault(parent, []).append(pointer)
                continue
            parent_index = _answered_by(steps, ref_index[parent])
            parent_step = steps[parent_index]
            if isinstance(parent_step, _Hidden):
                refused.append(
                    {
                        "pointer": pointer,
                        "detail": f"the item with ref {parent!r} was deduplicated into "
                        "a job this key may not see: it cannot be a parent",
                    }
                )
            elif isinstance(parent_step, _Earlier | _Deduped):
                # the caller's own earlier job, or the job holding the item's dedupe window: MARK_PARENTS checks
                # that the caller may see it, as it checks a parent named by its id
                existing.setdefault(parent_step.job.id, []).append(pointer)
            else:
                depended_on.add(parent_index)
    return existing, depended_on, refused


def _answered_by(steps: list[_Step], index: int) -> int:
    """The item whose step answers item ``index``: an item repeating an earlier one, or in its dedupe window,
    is answered by that one (which may in turn be in another's window)."""
    while isinstance(steps[index], _AsItem | _SameWindow):
        index = steps[index].index
    return index


def _link(conn, new_jobs: list[NewJob], steps: list, answers: list[Enqueued], now: datetime) -> list[Enqueued]:
    """The new jobs' edges to their parents; then each new waiting job with a parent made before this request
    is decided at once (its parents may all be final already: it is pending, or cancelled, before the request
    is answered). A job whose parents are all new in this request waits: none of them is final yet."""
    # A ref answered by no job the caller may see names no parent (_with_parents refused any depends_on on it).
    ids_by_ref = {
        job.ref: answers[index].job.id
        for index, job in enumerate(new_jobs)
        if job.ref is not None and answers[index].job is not None
    }
    made = {answer.job.id for step, answer in zip(steps, answers, strict=True) if isinstance(step, _Insert)}
    edges: list[tuple[int, int]] = []
    undecided: list[int] = []
    for job, step, answer in zip(new_jobs, steps, answers, strict=True):
        if isinstance(step, _Insert) and job.depends_on:
            child = answer.job.id
            parents = dict.fromkeys(ids_by_ref[p] if isinstance(p, str) else p for p in job.depends_on)
            edges += [(child, parent) for parent in parents]
            if not made.issuperset(parents):
                undecided.append(child)
    sql.insert_dependencies(conn, edges)
    decided = dependencies.settle(conn, undecided, now)
    return [answer._replace(job=decided.get(answer.job.id, answer.job)) for answer in answers]
