"""Waiting for a job's end: ``GET /jobs/{id}?wait=S`` answers as soon as the job is final, or after S seconds
with its state then, so a producer waits for a result without polling.

The request marks the job ``watched`` (WATCH, one short write), so the transaction that makes it final
announces it (``wakeup.jobs_finished``: NOTIFY on PostgreSQL, a datagram on SQLite), and the waiters of
every server process wake at once; jobs nobody waits for cost no announcement. Marked first and read
after, the end cannot slip between: a job that finished before the mark is seen final by the mark's own
RETURNING. Between checks the request holds no connection, only a place among the process's waiting
requests (``waiting_places``), and a recheck now and then finds what no announcement reached; at each
look, a producer that hung up ends the wait and frees the place, as a waiting claim's worker does.
"""

from __future__ import annotations

import time

from .. import sql
from ..core.errors import JobNotFound
from ..database.transactions import read_connection, retried_when_moved, write_transaction
from ..states import FINAL, names
from .waiting_places import client_gone, waiting_place
from .wakeup import shutting_down, waker_for_current_app

_FINAL_NAMES = frozenset(names(FINAL))


def wait_for_end(row, seconds: float):
    """The job ``row`` (one its caller may see) once final, or as it is after ``seconds``."""
    with waiting_place("ask"):
        waker = waker_for_current_app().finished
        deadline = time.monotonic() + seconds
        seen = waker.generation
        row = _watched(row.id)
        while row is not None and row.status not in _FINAL_NAMES and not shutting_down():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            waker.wait(seen, min(remaining, waker.current_recheck()))
            seen = waker.generation
            if client_gone():
                break  # nobody to answer: the place goes to a request that has a client
            with read_connection() as conn:
                row = sql.job(conn, row.id)
    if row is None:  # purged while we waited
        raise JobNotFound("the job does not exist")
    return row


@retried_when_moved
def _watched(job_id: int):
    """Mark the job watched (its end wakes this process's waiters); the job as it is now, or None."""
    with write_transaction() as conn:
        return sql.watch(conn, job_id)
