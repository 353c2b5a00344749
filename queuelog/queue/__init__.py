"""The queue's operations: the only code that changes a job's state.

Each operation decides; a statement of ``queuelog.sql`` carries the decision out. An operation picks
the transition of ``states.TRANSITIONS`` that the request asks for, the values it writes, the event it
logs, and, when the guarded statement matched nothing, the refusal: 404 when there is no such job (for
this caller), 409 when the job's state does not allow the move. Guards live in the statements' WHERE
clauses and each statement writes its event rows with it, so there is no read-then-write race.

Views, CLI commands and pages call these functions; none of them writes ``status`` itself.

- ``enqueueing.py``: enqueue, with idempotency keys (``enqueue_in`` does it inside a caller's transaction: a
  schedule's tick, whose job commits with the compare-and-set that fires it);
- ``operations.py``: the claim; the holding worker's complete, fail, heartbeat and release; the server's
  give-back of a claim nobody received;
- ``actions.py``: a producer's or admin's cancel; an admin's retry, bulk cancel and delete, and "run now";
- ``reaping.py``: the reaper;
- ``graph.py``: the rules of a workflow batch's refs (unique, each defined, no cycle), checked first;
- ``moves.py``: what they share: the values of each way out of running, the event row, the refusal.
"""

from .actions import cancel, cancel_many, delete_many, retry, retry_many, run_now
from .enqueueing import Enqueued, NewJob, enqueue
from .moves import REAPER, SERVER
from .operations import (
    Completion,
    backoff_delay,
    claim,
    complete,
    complete_many,
    deregister_process,
    fail,
    give_back_unanswered,
    heartbeat,
    release,
)
from .reaping import ReapReport, reap

__all__ = [
    "REAPER",
    "SERVER",
    "Completion",
    "Enqueued",
    "NewJob",
    "ReapReport",
    "backoff_delay",
    "cancel",
    "cancel_many",
    "claim",
    "complete",
    "complete_many",
    "delete_many",
    "deregister_process",
    "enqueue",
    "fail",
    "give_back_unanswered",
    "heartbeat",
    "reap",
    "release",
    "retry",
    "retry_many",
    "run_now",
]
