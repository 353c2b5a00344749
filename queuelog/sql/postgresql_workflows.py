"""PostgreSQL's statements for workflows (queue/dependencies.py): waiting jobs and their parents, each one
that SQLite spells differently; postgresql.py names them with the rest (the runner looks them up there).
"""

from __future__ import annotations

from ..states import BROKEN, BY_ACTION, RunWhen, names
from .values import JOB_LIST, only_status

_MET, _DOOMED = BY_ACTION["dependencies_met"], BY_ACTION["dependency_failed"]
((_WAITING,), (_DOOMED_FROM,)) = (_MET.from_statuses, _DOOMED.from_statuses)

#: The parents an enqueue names, marked as having dependents (so their finishing looks for children), with
#: what the enqueue checks: that each exists, who may see it, and whether it is final already.
#: Each parent's row is locked in id order (two enqueues naming the same parents cannot deadlock), so
#: a parent's finishing, which updates that row, either commits before this read (the enqueue sees it
#: final) or waits for the enqueue to commit (and then finds the new child).
#: Differs: the parents are locked in id order (SQLite's write lock holds them).
MARK_PARENTS = (
    "UPDATE jobs SET has_dependents = true"
    " WHERE id IN (SELECT id FROM jobs WHERE id = ANY(%(ids)s) ORDER BY id FOR UPDATE)"
    " RETURNING id, status, producer_key_id"
)

#: A workflow's edges: ``child_id`` runs after ``parent_id``.
#: Differs: psycopg's positional %s (SQLite: ?).
INSERT_DEPENDENCIES = "INSERT INTO job_dependencies (child_id, parent_id) VALUES (%s, %s)"

#: The waiting children of jobs that just reached a final state (ix_job_dependencies_parent_child, then each
#: child by its id: its status is only re-checked, values.only_status says why), each locked, in id order,
#: until the transaction ends. Two parents of one child finishing at once would otherwise each see the other
#: still unfinished (neither has committed) and leave the child waiting for ever; locked, the second decides
#: only once the first has committed, and sees it (READ COMMITTED takes a new snapshot per statement, and
#: re-checks ``waiting`` on a row it had to wait for).
#: Differs: the children are locked FOR UPDATE (SQLite's write lock holds them).
WAITING_CHILDREN = (
    f"SELECT c.id FROM jobs c"
    f" WHERE c.id IN (SELECT d.child_id FROM job_dependencies d WHERE d.parent_id = ANY(%(ids)s))"
    f" AND {only_status(_WAITING, of='c')} ORDER BY c.id FOR UPDATE OF c"
)

#: Waiting jobs that must run after their parents completed, and the parents that failed or were
#: cancelled: each such child is cancelled (DOOM), naming its first broken parent. Both statuses are compared
#: as expressions: as bare columns the planner may walk every failed job, or every waiting one, by the status
#: index (there are few, by its statistics) instead of seeking the children and their parents by id. The
#: statistics cannot know of the waiting jobs a workflow's batch makes: it decides them before it commits. The
#: ids are given to both sides of the first join, as the planner does not carry a list across an equality.
_BROKEN_NAMES = "(" + ", ".join(f"'{name}'" for name in names(BROKEN)) + ")"
#: Differs: the status compared as an expression, for the planner (see above).
BROKEN_PARENTS = (
    f"SELECT d.child_id, d.parent_id, p.status FROM job_dependencies d"
    f" JOIN jobs c ON c.id = d.child_id JOIN jobs p ON p.id = d.parent_id"
    f" WHERE d.child_id = ANY(%(ids)s) AND c.id = ANY(%(ids)s) AND {only_status(_DOOMED_FROM, of='c')}"
    f" AND c.run_when = '{RunWhen.COMPLETED}' AND (p.status || '') IN {_BROKEN_NAMES}"
    f" ORDER BY d.child_id, d.parent_id"
)

#: A producer waits for this job's end (GET /jobs/{id}?wait=S): its finishing wakes every server process.
#: Differs: a boolean literal (SQLite: 1).
WATCH = f"UPDATE jobs SET watched = true WHERE id = %(id)s RETURNING {JOB_LIST}"
