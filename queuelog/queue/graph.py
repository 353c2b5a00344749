"""A workflow's graph rules: the refs of a batch are unique, each ref a depends_on names is defined by an
item of the batch, and the refs make no cycle (a workflow is a DAG).

The enqueue checks them before anything else of the queue (parents.py links and decides parents on the
assumption that they hold); a broken rule is an InvalidRequest pointing at the item's ref or depends_on entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.errors import InvalidRequest

if TYPE_CHECKING:
    from .new_jobs import NewJob


def check_graph(jobs: list[NewJob], batch: bool) -> None:
    """Refuse (422) a batch whose refs break a graph rule; every broken rule is reported at once."""
    errors = _graph_problems(jobs, batch)
    if errors:
        raise InvalidRequest(errors)


def _graph_problems(jobs: list[NewJob], batch: bool) -> list[dict]:
    """A batch's refs: each unique, each named in a depends_on defined by an item, and no cycle among them."""
    errors: list[dict] = []
    index_of: dict[str, int] = {}

    def at(index: int) -> str:
        return f"/jobs/{index}" if batch else ""

    for index, job in enumerate(jobs):
        if job.ref is None:
            continue
        if job.ref in index_of:
            errors.append(
                {
                    "pointer": f"{at(index)}/ref",
                    "detail": f"ref {job.ref!r} is already used by item {index_of[job.ref]}",
                }
            )
        else:
            index_of[job.ref] = index
    for index, job in enumerate(jobs):
        for position, parent in enumerate(job.depends_on):
            if isinstance(parent, str) and parent not in index_of:
                errors.append(
                    {
                        "pointer": f"{at(index)}/depends_on/{position}",
                        "detail": f"no item of this batch has ref {parent!r}",
                    }
                )
    if errors:
        return errors
    cycle = _find_cycle(jobs, index_of)
    if cycle is not None:
        index, position = cycle
        errors.append(
            {
                "pointer": f"{at(index)}/depends_on/{position}",
                "detail": f"depending on {jobs[index].depends_on[position]!r} makes a cycle: a workflow must be a DAG",
            }
        )
    return errors


def _find_cycle(jobs: list[NewJob], index_of: dict[str, int]) -> tuple[int, int] | None:
    """An edge (item, position in its depends_on) on a cycle of the batch's refs, or None (Kahn's algorithm)."""
    children: dict[int, list[int]] = {}
    waiting_on = [0] * len(jobs)
    for index, job in enumerate(jobs):
        for parent in job.depends_on:
            if isinstance(parent, str):
                children.setdefault(index_of[parent], []).append(index)
                waiting_on[index] += 1
    ready = [index for index, count in enumerate(waiting_on) if count == 0]
    while ready:
        for child in children.get(ready.pop(), ()):
            waiting_on[child] -= 1
            if waiting_on[child] == 0:
                ready.append(child)
    for index in range(len(jobs)):
        if waiting_on[index]:
            # Left over: on a cycle, or downstream of one. Follow unfinished parents until one repeats.
            seen: dict[int, int] = {}
            current = index
            while current not in seen:
                position = next(
                    p
                    for p, parent in enumerate(jobs[current].depends_on)
                    if isinstance(parent, str) and waiting_on[index_of[parent]]
                )
                seen[current] = position
                current = index_of[jobs[current].depends_on[position]]
            return current, seen[current]
    return None
