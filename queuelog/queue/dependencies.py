"""Workflows: jobs that wait for other jobs (``depends_on``), decided in the transaction that moves a parent.

A job enqueued with parents is ``waiting``: no claim takes it. Whenever jobs reach a final state, the
operation that moved them calls ``after_final`` in its own transaction (``moves.changed``), which decides
their waiting children at once:

- every parent done as the child's run_when asks (``completed``: every parent completed; ``finished``:
  every parent final, whichever way) → ``pending`` (event ``dependencies_met``), and waiting claims wake;
- run_when ``completed`` and a parent failed or was cancelled → ``cancelled`` (event ``dependency_failed``,
  naming that parent), which in turn decides the cancelled job's own children, and so on down the graph;
- else it keeps waiting.

An admin's retry of a failed or cancelled parent (``revive``) makes the descendants its failure cancelled
wait again. Only jobs with ``has_dependents`` are looked at, so a job outside any workflow costs nothing
more when it finishes. Every statement seeks the job_dependencies indexes: no table is scanned.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.engine import Connection

from .. import sql
from ..ops import observe_changes
from ..sql import JobRow, Log
from ..states import BY_ACTION, FINAL, Actor, JobStatus, Transition
from ..waiting import wakeup

MET, DOOMED, REVIVED = (BY_ACTION[a] for a in ("dependencies_met", "dependency_failed", "dependency_retried"))
SERVER = Actor.SERVER.value
_FINAL_NAMES = frozenset(status.value for status in FINAL)


def after_final(conn: Connection, rows: Sequence[JobRow], now: datetime) -> None:
    """Those of ``rows`` that reached a final state: decide their waiting children, and on down the graph."""
    parents = [row.id for row in rows if row.has_dependents and row.status in _FINAL_NAMES]
    if parents:
        settle(conn, sql.waiting_children(conn, parents), now)


def settle(conn: Connection, ids: Sequence[int], now: datetime) -> dict[int, JobRow]:
    """Decide the waiting jobs ``ids`` (and, for those cancelled, their waiting children in turn).

    Returns the jobs it moved, by id, as they are now. A loop, not recursion: a long chain cannot exhaust
    the stack.
    """
    moved: dict[int, JobRow] = {}
    frontier = list(ids)
    while frontier:
        log = _log(MET, SERVER, now)
        promoted = sql.promote(conn, frontier, now, log)
        _moved(conn, MET, promoted, log)
        moved.update((row.id, row) for row in promoted)
        first_broken: dict[int, sql.BrokenParent] = {}
        for broken in sql.broken_parents(conn, frontier):
            first_broken.setdefault(broken.child_id, broken)
        by_parent: dict[tuple[int, str], list[int]] = {}
        for broken in first_broken.values():
            by_parent.setdefault((broken.parent_id, broken.status), []).append(broken.child_id)
        doomed: list[JobRow] = []
        for (parent_id, status), children in sorted(by_parent.items()):
            log = _log(DOOMED, SERVER, now, error=f"parent job {parent_id} {status}")
            rows = sql.doom(conn, children, now, log)
            _moved(conn, DOOMED, rows, log)
            doomed += rows
        moved.update((row.id, row) for row in doomed)
        parents = [row.id for row in doomed if row.has_dependents]
        frontier = sql.waiting_children(conn, parents) if parents else []
    return moved


def revive(conn: Connection, rows: Sequence[JobRow], actor: str, now: datetime) -> None:
    """Jobs ``rows`` an admin just retried: the descendants their failure cancelled wait again.

    Level by level: a revived child that another parent's failure still dooms is cancelled again (and its
    own children stay as they are); the others' cancelled children are revived in turn.
    """
    parents = [row.id for row in rows if row.has_dependents]
    while parents:
        log = _log(REVIVED, actor, now)
        revived = sql.revive(conn, parents, now, log)
        _moved(conn, REVIVED, revived, log)
        decided = settle(conn, [row.id for row in revived], now)
        parents = [row.id for row in revived if row.has_dependents and row.id not in decided]


def _log(transition: Transition, actor: str, now: datetime, error: str | None = None) -> Log:
    (from_status,) = transition.from_statuses
    return Log(transition.event.value, from_status.value, actor, now, error)


def _moved(conn: Connection, transition: Transition, rows: list[JobRow], log: Log) -> None:
    """Count and log the moves; wake waiting claims for jobs now pending, waiting producers for jobs now final."""
    if not rows:
        return
    observe_changes([(row, log.from_status, log.event, log.actor, log.error) for row in rows])
    if transition.to_status is JobStatus.PENDING:
        wakeup.jobs_ready(conn, lowest_turn=min(row.fair_tag for row in rows))
    elif transition.to_status in FINAL and any(row.watched for row in rows):
        wakeup.jobs_finished(conn)
