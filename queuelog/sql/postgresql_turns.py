"""PostgreSQL's statements about turns (``fair_tag``) and the live table, a part of postgresql.py (which imports
them, and where the runner finds them): the turn a new job takes, where a claim's walk of the turns may start,
and the filter that keeps a statement on the live table.
"""

from __future__ import annotations

from ..core.patterns import Priority
from ..states import FINAL
from .values import status_not_in

#: A statement that can only act on jobs in flight says so in a form the planner prunes by: it then plans
#: and reads the live table alone, not every day of history beside it (docs/storage.md), so its cost does not
#: grow with the days kept. It also checks nothing: every job it names by id and status is in flight anyway.
#: Written as the statuses it is not: ``<>`` is no operator of an index, so no index under status can serve it,
#: and the statement finds its jobs by the primary key (values.only_status says why that matters).
#: Differs: SQLite keeps one table (empty there).
IN_FLIGHT = f"AND {status_not_in(FINAL)}"

#: The live table itself, for the claim's update, whose jobs stay in it (pending to running): named, it needs
#: no filter at all. A move out of the live table (FINISH, TAKE_BACK) updates ``jobs``, which moves the row.
LIVE_TABLE = "jobs_live"


def turn(job_type: str, key: str, priority: str, floor: str) -> str:
    """The turn a new job of (``job_type``, concurrency ``key``, ``priority``) takes: the later of the key's
    next turn and the head of the type's queue (or, with nothing pending, the newest job's id), the head read
    from ``floor`` up (queue/served_turns.py). One seek each.

    Differs, so that the enqueue reads the live table alone (IN_FLIGHT says why): the newest id is the id
    sequence's last value, which no job's id exceeds; and a key's last turn is read among its jobs in flight
    (the live table, named).
    A key whose jobs have all finished thus joins at the head of the queue, as a new key does, even where a
    turn it took before (in another type's queue) lay further on; SQLite reads that turn among all its jobs.
    The key's last turn is read from ``floor`` up, like the head: below it, it could not be the later of the
    two (the head, or the newest id, is at or above ``floor``), and a held snapshot leaves the dead entries of
    the key's finished jobs there, which a walk down from its newest turn would read one by one.

    Each is asked as the first turn in the order of the index meant for it (ix_jobs_type_claim_order,
    ix_jobs_key_turns), and planned so that only such an index serves it (IN_INDEX_ORDER).

    Cast to the columns' types: a lone row's INSERT passes its own values, which PostgreSQL must type alike
    in both places."""
    job_type, key, priority = f"({job_type})::varchar", f"({key})::varchar", f"({priority})::integer"
    floor = f"({floor})::bigint"
    return f"""GREATEST(
    COALESCE(
        (SELECT fair_tag FROM jobs WHERE status = 'pending' AND type = {job_type} AND priority = {priority}
            AND fair_tag >= {floor} ORDER BY fair_tag LIMIT 1),
        (SELECT last_value FROM jobs_id_seq WHERE is_called),
        0),
    (SELECT fair_tag + 1 FROM {LIVE_TABLE} WHERE concurrency_key = {key} AND priority = {priority}
        AND fair_tag >= {floor} ORDER BY fair_tag DESC LIMIT 1))"""


#: ``turn`` for each (type, concurrency key, priority) of an enqueue of several jobs (groups, a JSON list of
#: [type, key, priority, floor]), in the order asked.
#: Differs: jsonb_array_elements and casts (SQLite: json_each).
FAIR_TAGS = f"""
WITH asked AS (
    SELECT n, item->>0 AS type, item->>1 AS concurrency_key, (item->>2)::integer AS priority,
           (item->>3)::bigint AS floor
      FROM jsonb_array_elements(%(groups)s::jsonb) WITH ORDINALITY AS g(item, n))
SELECT {turn("a.type", "a.concurrency_key", "a.priority", "a.floor")}
  FROM asked a ORDER BY a.n"""


#: The optional ``{floor}`` of CLAIM, its flow-controlled pick (FLOW) and SOMETHING_DUE: the walks of the
#: pending jobs start at this process's claim floor (waiting/claim_floor.py), no claimable job's turn being
#: below it. A condition on the index's own column: the walk passes over the entries below it, those a held
#: snapshot keeps of jobs claimed since, without reading their rows.
#: Differs: only PostgreSQL keeps such entries (SQLite has no floor).
FLOOR = "AND fair_tag >= %(floor)s"

#: The claim floor's read (claim_floor.py): the lowest turn from ``%(from_turn)s`` of the pending jobs due before
#: ``%(horizon)s``, at any priority (for each priority one walk of ix_jobs_claim_order, from its first entry at that
#: turn, to its first such job), and never above the newest id: a job enqueued after this read takes at least that
#: turn (``turn``) when no other is pending before it, so it is above the floor even before its announcement
#: reaches this process. NULL: no job was ever made.
_LEVELS = ", ".join(f"({int(priority)})" for priority in Priority)
LOWEST_TURN = f"""SELECT LEAST(
  (SELECT min(first.fair_tag) FROM (VALUES {_LEVELS}) AS level(priority)
     CROSS JOIN LATERAL (SELECT fair_tag FROM jobs WHERE status = 'pending' AND priority = level.priority
                           AND fair_tag >= %(from_turn)s AND run_at <= %(horizon)s
                         ORDER BY fair_tag LIMIT 1) AS first),
  (SELECT last_value FROM jobs_id_seq WHERE is_called))"""

#: How the reads that must take one index are planned here: with sorting ruled out, for the statement's session
#: only (the runner sets it before and resets it after the statements of PLANNED_IN_INDEX_ORDER). Each such read
#: asks for the first entry in an order that only the index meant for it gives (a waiting claim's next-due read,
#: common.NEXT_RUN_AT_SEEK; the turn of a new job, ``turn``); any other way would sort what it read. Asking for
#: the order is not enough by itself: analyzed under load, the live table shows a handful of rows, the planner then
#: costs a sort of one row at nothing and every index of it alike, and may walk another index whole, every entry
#: a held snapshot keeps there included (docs/performance.md).
#: JIT goes off with it: a plan that cannot avoid a sort (FAIR_TAGS returns its turns in the order asked) carries
#: the planner's penalty for it in its cost, which would otherwise have each run compiled.
#: Differs: SQLite's planner takes the index that gives the order.
IN_INDEX_ORDER = ("SET enable_sort = off; SET jit = off", "RESET enable_sort; RESET jit")
PLANNED_IN_INDEX_ORDER = frozenset({"NEXT_RUN_AT", "ENQUEUE", "FAIR_TAGS"})
