"""The statements queuelog sends to PostgreSQL that SQLite spells differently, by name; the rest are common.py's.

How to read them:
- values are named (``%(now)s``), lists included (``id = ANY(%(ids)s)``), except the claim's ``{limit}``,
  which the runner writes into the text (see CLAIM); ``{types}``, ``{claimed_before}``, ``{flow}`` /
  ``{flow_pick}`` and LOGGED's ``{stale}`` are optional pieces the runner fills with TYPES, CLAIMED_BEFORE,
  FLOW / FLOW_PICK and STALE when the caller gives those values, and leaves empty when not; ``{claim}`` and
  ``{parts}`` (LEAVE_RUNNING) hold what a move out of running writes;
- guards (the from-statuses) are spelled from ``queuelog.states``, so the table and the SQL cannot drift;
- every write returns all the job's columns, and the runner sends it inside LOGGED, which writes its
  event rows in the same statement (one round trip instead of two). Under READ COMMITTED an UPDATE
  that waited for a row lock re-checks its WHERE on the row as committed, so a guard cannot be raced.
"""

from __future__ import annotations

from ..database.channels import CHANNEL
from ..states import BY_ACTION, DELETABLE, HELD
from . import common
from .common import for_postgresql
from .postgresql_turns import (  # noqa: F401  (found here)
    FAIR_TAGS,
    FLOOR,
    IN_FLIGHT,
    IN_INDEX_ORDER,
    LIVE_TABLE,
    LOWEST_TURN,
    PLANNED_IN_INDEX_ORDER,
    turn,
)
from .values import JOB_COLUMNS, JOB_LIST, limited, only_status, status_in

#: The statements and pieces both dialects spell alike (common.py), in this module's spelling.
_common = common.SPELLED["postgresql"]
_CLAIM = BY_ACTION["claim"]
(_CLAIMED_FROM,) = _CLAIM.from_statuses
(_HELD,) = HELD
_CANCEL = BY_ACTION["cancel"]
_EXPIRE = BY_ACTION["expire"]
_RUN_NOW = BY_ACTION["run_now"]

# --- the pieces this dialect spells its own way --------------------------------------------------


def not_expired(table: str = "") -> str:
    """common.not_expired, spelled for PostgreSQL."""
    return for_postgresql(common.not_expired(table))


#: When a run of a job claimed at now must end (NULL: it has no timeout_seconds). Differs: interval
#: arithmetic on a timestamptz (SQLite's times are text, see sqlite.py).
TIMEOUT_AT = "%(now)s + timeout_seconds * interval '1 second'"

#: A heartbeat: the claim stands, its lease is renewed, never past the run's timeout_at (the lease then runs
#: out when the run times out, and the reaper finds it by its lease like any other). Differs: LEAST skips a
#: NULL (SQLite's min() does not).
CLAIM_KEPT = "heartbeat_at = %(now)s, lease_expires_at = LEAST(%(lease_until)s, timeout_at)"
#: What a move out of running may set (values.Leave). Differs: completes_each reads the job's result out of
#: jsonb (SQLite: json_extract).
LEAVE_PARTS = {
    "status": "status = %(status)s",
    "spends_retry": "retry_count = retry_count + 1",
    "stalled": "stall_count = stall_count + 1",
    "run_at": "run_at = %(run_at)s",
    "error": "error = %(error)s, error_group = %(error_group)s",
    "progress": "progress = %(progress)s",
    "completes": "result = %(result)s, completed_at = %(now)s",
    # A batch whose jobs each have their own result, in one statement: the value under the job's id.
    "completes_each": "result = %(results)s::jsonb ->> jobs.id::text, completed_at = %(now)s",
}

# --- flow control: what a claim may take of each type --------------------------------------------

_NONE_CONTROLLED = f"NOT EXISTS (SELECT 1 FROM type_settings WHERE {_common.CONTROLLED} {{types}})"
#: A type whose settings changed after the claim's time (``%(now)s``) gives the claim nothing. The claim reads
#: its time before the statement takes its snapshot, and between the two a busy server process can spend
#: a long time when it is busy (long-polls and producers competing for a few cores). Without this, a
#: claim timed while a type was paused could see the resume and take a job, and the event log would show
#: it claimed during the pause. With it, every claim is timed after each change it obeyed; a claim refused
#: this way began before the change and its long-poll, already woken by the change, claims again at once.
#: SQLite needs no such guard: a claim reads its time holding the write lock, which a change also takes.
_CHANGED_SINCE = "s.updated_at > %(now)s"
_NONE_CONTROLLED_OR_CHANGED = (
    f"NOT EXISTS (SELECT 1 FROM type_settings s WHERE ({_common.CONTROLLED} OR {_CHANGED_SINCE}) {{types}})"
)


def _rooms(held: bool) -> str:
    """The CTEs that say how many jobs of each type a claim may take now.

    - ``queues``: the types with pending jobs, each found with one seek of ix_jobs_type_claim_order (a
      loose index scan), so a claim never walks past the pending jobs of a paused or full type;
    - ``limits``: per type, paused or not, and the room each limit leaves: the concurrency limit less its
      running jobs (a running job whose lease ran out counts until it is reaped), the rate limit less the
      claims still inside its window (type_claims). With ``held``, a limited type the caller did not lock
      (``%(locked_types)s``, see FLOW_LOCK) is ``unheld``: counting without its lock could race a claim; and
      a type whose settings changed after the claim's time is ``changed`` (see _CHANGED_SINCE);
    - ``running_keys``: the running jobs per concurrency key of each type with a per-key limit;
    - ``rooms``: per type with room, how many jobs (at most ``{limit}``; none when paused, unheld or changed), and
      the keys at their limit (``blocked``), as one array the walk of the type's jobs filters by.
    A type without a type_settings row has room ``{limit}``.
    """
    unheld = f"coalesce({limited('s')} AND NOT q.type = ANY(%(locked_types)s), false)" if held else "false"
    changed = f"coalesce({_CHANGED_SINCE}, false)" if held else "false"
    return f"""queues(type) AS (
    SELECT (SELECT min(type) FROM jobs WHERE status = 'pending' {{types}} {{floor}})
    UNION ALL
    SELECT (SELECT min(type) FROM jobs WHERE status = 'pending' AND type > queues.type {{types}} {{floor}})
      FROM queues WHERE queues.type IS NOT NULL),
limits AS (
    SELECT q.type, coalesce(s.paused, false) AS paused, {unheld} AS unheld, {changed} AS changed,
           s.key_concurrency_limit AS key_limit,
           CASE WHEN s.concurrency_limit IS NOT NULL THEN s.concurrency_limit - (
               SELECT count(*) FROM jobs r WHERE r.type = q.type AND r.status = 'running') END AS concurrency_room,
           CASE WHEN s.rate_limit_jobs IS NOT NULL THEN s.rate_limit_jobs - (
               SELECT coalesce(sum(c.jobs), 0) FROM type_claims c WHERE c.type = q.type AND c.expires_at > %(now)s)
           END AS rate_room
      FROM queues q LEFT JOIN type_settings s ON s.type = q.type
     WHERE q.type IS NOT NULL),
running_keys AS (
    SELECT r.type, r.concurrency_key, count(*) AS running
      FROM limits l JOIN jobs r ON r.type = l.type AND r.status = 'running'
     WHERE l.key_limit IS NOT NULL
     GROUP BY r.type, r.concurrency_key),
rooms AS (
    SELECT l.type, LEAST(l.concurrency_room, l.rate_room, {{limit}}) AS room, l.key_limit,
           ARRAY(SELECT k.concurrency_key FROM running_keys k
                  WHERE k.type = l.type AND k.running >= l.key_limit) AS blocked
      FROM limits l
     WHERE NOT l.paused AND NOT l.unheld AND NOT l.changed AND LEAST(l.concurrency_room, l.rate_room, {{limit}}) > 0)"""


#: A pending job ``p`` of a type with room (``f``) that its concurrency key's limit does not hold back. The
#: key is compared as an expression (``|| ''``), not as the bare column: with the column's statistics (often
#: one key, or none, for most jobs) the planner takes this for a filter that leaves almost no row, and
#: then prefers reading every pending job of the type and sorting them to the ordered walk of its index.
_KEY_HAS_ROOM = "NOT (p.concurrency_key || '') = ANY(f.blocked)"


def _first_due(queue: str, with_room: bool) -> str:
    """``true`` if the type of row ``queue`` has a due pending job (whose key has room, ``with_room``), else
    NULL: a walk of its index that stops at the first. A scalar subquery with a LIMIT, not EXISTS: the
    planner turns an EXISTS into a join, and joined the pending jobs of every type (a scan) to the types."""
    key = f" AND {_KEY_HAS_ROOM.replace('f.blocked', queue + '.blocked')}" if with_room else ""
    return (
        f"(SELECT true FROM jobs p WHERE p.type = {queue}.type AND p.status = 'pending'"
        f" AND p.run_at <= %(now)s AND {not_expired('p')}{key} {{floor}}"
        " ORDER BY p.priority DESC, p.fair_tag, p.id LIMIT 1)"
    )


#: The flow-controlled pick, CLAIM's ``{flow}``: ``by_type`` walks each type with room along
#: ix_jobs_type_claim_order (one seek per type; the LIMIT is the claim's own, so the planner sees a short
#: ordered walk), passing over the jobs of keys at their limit; ``taken`` keeps the first ``room`` of each
#: type, drops those beyond their key's remaining room, and the first {limit} of the rest in claim order.
#: Differs: a LATERAL walk locked FOR UPDATE SKIP LOCKED, the blocked keys an array (SQLite: INDEXED BY).
FLOW = f"""{_rooms(held=True)},
by_type AS (
    SELECT j.*, f.room, f.key_limit,
           row_number() OVER (PARTITION BY j.type ORDER BY j.priority DESC, j.fair_tag, j.id) AS nth_of_type
      FROM rooms f CROSS JOIN LATERAL (
           SELECT p.id, p.type, p.concurrency_key, p.priority, p.fair_tag FROM jobs p
            WHERE p.type = f.type AND p.status = 'pending' AND p.run_at <= %(now)s AND {not_expired("p")}
              AND {_KEY_HAS_ROOM} {{floor}}
            ORDER BY p.priority DESC, p.fair_tag, p.id
            LIMIT {{limit}}
              FOR UPDATE OF p SKIP LOCKED) j),
taken AS (
    SELECT b.id FROM (
        SELECT b.*, coalesce(k.running, 0) AS key_running,
               row_number() OVER (PARTITION BY b.type, b.concurrency_key
                                  ORDER BY b.priority DESC, b.fair_tag, b.id) AS nth_of_key
          FROM by_type b LEFT JOIN running_keys k ON k.type = b.type AND k.concurrency_key = b.concurrency_key
         WHERE b.nth_of_type <= b.room) b
     WHERE b.key_limit IS NULL OR b.nth_of_key <= b.key_limit - b.key_running
     ORDER BY b.priority DESC, b.fair_tag, b.id
     LIMIT {{limit}}),"""
#: With FLOW the plain walk takes nothing, whatever type_settings says now: the caller's copy of the settings
#: may be older than a lifted limit, and then both picks would run, each ``{limit}`` jobs long (the walk's
#: rows are locked, so the flow pick's SKIP LOCKED passes over them to the next ones): a claim of one job
#: marked two running. The flow pick alone covers every type (a type without settings has room ``{limit}``).
#: Differs: PostgreSQL's walk filters in its WHERE (SQLite's, in its LIMIT).
WALK_OFF = "AND false"

#: LOGGED's ``{stale}`` for CLAIM: a row of NULLs (no job has a NULL id) says "shaped by an old copy of the
#: settings: took nothing".
#: Differs: a whole row of NULLs for LOGGED's SELECT (SQLite: one id).
STALE = f"UNION ALL SELECT {', '.join(['NULL'] * len(JOB_COLUMNS))} WHERE {_common.SETTINGS_CHANGED}"

#: The claim: pick the next due jobs in claim order and mark them running, in one statement.
#: Claim order is priority, then fair_tag (concurrency keys take turns: see queue/enqueueing.py), then id.
#: FOR UPDATE SKIP LOCKED lets concurrent claimers pass each other's rows instead of queueing behind
#: them, and no row is locked by two claimers. The pick is a MATERIALIZED CTE, run exactly once: as a
#: plain ``IN (subquery)`` the planner may choose a nested-loop semi join that re-runs the LIMIT
#: subquery for every pending row; each rerun skips the rows this statement already updated and
#: yields the next one, so a single claim of one job marked every due job running. The UPDATE
#: re-checks the status itself, so a job can never be handed out twice. It finds the picked rows by their ids,
#: one seek each, and re-checks the status in a form no index answers (values.only_status says why).
#:
#: Flow control: the plain walk takes nothing while a type of the claim is paused or limited (a one-time
#: filter on the small type_settings), and the caller, which knows of such types, fills ``{flow}`` and
#: ``{flow_pick}`` with FLOW and FLOW_PICK: then the pick goes type by type, within each type's room.
#: A caller unaware of a new pause or limit thus claims nothing rather than too much; and it does not stay
#: unaware: when the settings changed since the caller's copy was read (SETTINGS_CHANGED, in this statement's
#: snapshot) the claim takes nothing at all, and LOGGED's ``{stale}`` (STALE) adds a row of NULLs that says so:
#: the caller reads the settings again and claims anew (sql.claim). The check is a one-time filter (an
#: InitPlan): when it fails, the pick is not run.
#:
#: ``{limit}`` is written into the text, not sent as a value: with a LIMIT it cannot see, the planner
#: costs a prepared claim's generic plan as if it read a tenth of the pending jobs, keeps planning every
#: claim afresh, and planning was most of a claim's time. With the number in the text,
#: the generic plan is the custom one, and a connection plans its claim once per number.
#:
#: Why no claim can run a 4th job of a type limited to 3: under READ COMMITTED every statement reads a
#: snapshot taken when it starts, and two claims counting running jobs at once would both see room for
#: one more. So a claim of a limited type first locks the type's type_settings row (FLOW_LOCK, its own
#: statement, FOR UPDATE: it waits for any other claim holding it to commit), and only then runs this
#: statement, whose snapshot therefore holds every job the previous holder claimed. A limited type the
#: claim did not lock has no room here (``unheld``). Locking inside this statement would not do: a row
#: lock waited for in mid-statement re-reads that one row, not the counts.
#: Differs: one UPDATE … RETURNING with a MATERIALIZED pick (SQLite: three statements). A template: its slots
#: are filled by the runner; queuelog/sql/rendered/claim.postgresql.sql is the statement as sent.
CLAIM = f"""
WITH RECURSIVE {{flow}}
picked AS MATERIALIZED (
    SELECT id FROM (SELECT id FROM jobs
                     WHERE {_common.CLAIMABLE} AND {_NONE_CONTROLLED_OR_CHANGED} {{walk_off}} {{floor}}
                     ORDER BY priority DESC, fair_tag, id
                     LIMIT {{limit}}
                       FOR UPDATE SKIP LOCKED) walked
    {{flow_pick}})
UPDATE {LIVE_TABLE} AS jobs
   SET status = '{_CLAIM.to_status}', worker_id = %(worker)s, claim_token = %(token)s, claimed_at = %(now)s,
       heartbeat_at = %(now)s, process_id = %(process)s, timeout_at = {TIMEOUT_AT},
       lease_expires_at = LEAST(%(lease_until)s, {TIMEOUT_AT}), updated_at = %(now)s
 WHERE NOT {_common.SETTINGS_CHANGED} AND {only_status(_CLAIMED_FROM)} {{process_runs}}
   AND id = ANY(ARRAY(SELECT id FROM picked))
RETURNING {JOB_LIST}"""

#: The limits of a claim's limited types (``{types}``: of those it may take), locked for the rest of the
#: claim's transaction, in one order so that two claims never wait for each other in a circle. Sent
#: before CLAIM, which then counts with a snapshot taken after the lock was granted (see CLAIM).
#: Differs: FOR UPDATE (SQLite's write lock already makes claims take turns).
FLOW_LOCK = (
    f"SELECT type, concurrency_limit, rate_limit_jobs, rate_limit_seconds, key_concurrency_limit"
    f" FROM type_settings WHERE {_common.LIMITED} {{types}} ORDER BY type FOR UPDATE"
)


#: FINISH's optional piece: only a job whose move needs nothing after it (no children to decide, no producer
#: waiting for it, not of a limited type whose waiting claims its freed slot must wake), so that the move can
#: be a statement on its own.
#: Differs: ``<> ALL`` of a typed array (SQLite: NOT IN a list).
ENDS_ALONE = "AND NOT has_dependents AND NOT watched AND type <> ALL(%(limited)s::text[])"

#: Running jobs taken back without their worker: by the reaper (the claim it found stalled), by the server
#: (a claim whose client hung up before the answer), by an admin's give-back (%(token)s NULL: whatever
#: claim is current).
#: Differs: the NULL token is cast, so psycopg's untyped NULL has a type.
TAKE_BACK = (
    f"UPDATE jobs SET {_common.LEAVE_RUNNING}\n WHERE id = ANY(%(ids)s) AND {only_status(_HELD)}"
    f" AND (%(token)s::text IS NULL OR claim_token = %(token)s) {IN_FLIGHT}\nRETURNING {JOB_LIST}"
)

#: A waiting or pending job will not run (run once per from-status, so its event says which); a producer
#: may cancel only its own (owner), an admin any (owner NULL).
#: Differs: the NULL owner is cast, so psycopg's untyped NULL has a type.
CANCEL = (
    f"UPDATE jobs SET status = '{_CANCEL.to_status}', updated_at = %(now)s"
    f" WHERE id = %(id)s AND {status_in(_CANCEL.from_statuses)} AND status = %(from_status)s"
    f" AND (%(owner)s::integer IS NULL OR producer_key_id = %(owner)s) RETURNING {JOB_LIST}"
)

#: An admin's "Run now": a pending job scheduled for later (or waiting out a backoff) becomes due now.
#: Differs: LEAST (SQLite: min()).
RUN_NOW = (
    f"UPDATE jobs SET run_at = LEAST(run_at, %(now)s), updated_at = %(now)s"
    f" WHERE id = %(id)s AND {status_in(_RUN_NOW.from_statuses)} RETURNING {JOB_LIST}"
)

# --- the event rows -----------------------------------------------------------------------------------

_LOGGING = (
    "WITH changed AS ({statement}), "
    "logged AS (INSERT INTO job_events (job_id, event, from_status, to_status, actor, attempt, error, at) "
    "SELECT id, %(log_event)s, %(log_from)s, status, %(log_actor)s, retry_count, %(log_error)s, %(log_at)s "
    "FROM changed)"
)
#: A write and the event row of each job it returns, as one statement (a data-modifying CTE).
LOGGED = f"{_LOGGING} SELECT {JOB_LIST} FROM changed {{stale}}"
#: LOGGED for new jobs, which also wakes the waiting claims of every server process: the NOTIFY that
#: ``wakeup.jobs_ready`` would send as a statement of its own, without its round trip. Like NOTIFY it is
#: delivered at commit. It is sent once the jobs exist (no row to join, no notification). Its payload is the
#: lowest turn of the new jobs: each process's claim floor drops to it (waiting/claim_floor.py).
LOGGED_AND_ANNOUNCED = (
    f"{_LOGGING}, announced AS (SELECT pg_notify('{CHANNEL}', (SELECT min(fair_tag) FROM changed)::text))"
    f" SELECT {JOB_LIST} FROM changed CROSS JOIN announced"
)

# --- workflows (queue/dependencies.py): waiting jobs and their parents, in postgresql_workflows.py ------
from .postgresql_workflows import (  # noqa: E402,F401  (the runner finds a dialect's statements here)
    BROKEN_PARENTS,
    INSERT_DEPENDENCIES,
    MARK_PARENTS,
    WAITING_CHILDREN,
    WATCH,
)

# --- the reads the operations decide by ---------------------------------------------------------------

#: Is anything claimable (at or above the claim floor, ``{floor}``, as the claim would take it)? Asked by a
#: waiting claim before it runs the claim. Under flow control a job is
#: claimable only where its type has room and its key too, so a waiting claim sleeps through a pause or a
#: full limit instead of claiming nothing every second. (Always with the flow part: this read is not on a
#: hot path, and it needs no copy of the settings to be right.)
#: Differs: scalar subqueries with a LIMIT for PostgreSQL's planner (SQLite: CASE and INDEXED BY).
SOMETHING_DUE = f"""
WITH RECURSIVE {_rooms(held=False)}
SELECT EXISTS (SELECT 1 FROM jobs WHERE {_common.CLAIMABLE} AND {_NONE_CONTROLLED} {{floor}})
    OR EXISTS (SELECT 1 FROM rooms f WHERE {_first_due("f", with_room=True)})"""

#: After a claim that came back short: each type of the claim with due jobs that flow control held back,
#: and the first reason that held them (for queuelog_claims_limited_total).
#: Differs: scalar subqueries with a LIMIT for PostgreSQL's planner (SQLite: EXISTS and INDEXED BY).
FLOW_REFUSALS = f"""
WITH RECURSIVE {_rooms(held=False)}
SELECT l.type, CASE WHEN l.paused THEN 'paused' WHEN l.concurrency_room <= 0 THEN 'concurrency'
                    WHEN l.rate_room <= 0 THEN 'rate' ELSE 'key_concurrency' END AS reason
  FROM limits l LEFT JOIN rooms f ON f.type = l.type
 WHERE (l.paused OR l.concurrency_room <= 0 OR l.rate_room <= 0
        OR (f.type IS NOT NULL AND {_first_due("f", with_room=True)} IS NULL))
   AND {_first_due("l", with_room=False)}
 ORDER BY l.type"""

#: Pending jobs whose expires_at has passed, for the reaper; one another reaper is cancelling is skipped.
#: Differs: FOR UPDATE SKIP LOCKED (reapers on several servers; SQLite: INDEXED BY).
EXPIRABLE = (
    f"SELECT {JOB_LIST} FROM jobs WHERE {status_in(_EXPIRE.from_statuses)} AND expires_at <= %(now)s"
    " ORDER BY id FOR UPDATE SKIP LOCKED"
)

#: Running jobs whose lease ran out (or claimed before claimed_before), for the reaper; a job another
#: reaper is taking back right now is skipped, not waited for.
#: Differs: FOR UPDATE SKIP LOCKED (reapers on several servers).
STALLED = (
    f"SELECT {JOB_LIST} FROM jobs WHERE {status_in(HELD)}"
    " AND (lease_expires_at < %(now)s {claimed_before}) ORDER BY id FOR UPDATE SKIP LOCKED"
)

#: Purging (`flask purge`): the oldest finished jobs of one status, unchanged since cutoff, a batch at a
#: time, locked until commit so an admin's retry cannot turn one back into a pending job before the
#: delete (a job it holds is skipped, for the next run); then their events, then the jobs, re-checked.
#: Differs: FOR UPDATE SKIP LOCKED (SQLite's write lock holds the batch).
PURGEABLE = (
    f"SELECT id FROM jobs WHERE status = %(status)s AND updated_at < %(cutoff)s AND {_common.NEEDED}"
    " ORDER BY updated_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED"
)

#: An admin's delete: those of the ids in a final status go, events first (not every database cascades the
#: foreign key), then the jobs, each re-checked. A running or pending job is never deleted, nor one that a
#: live job still depends on (_NEEDED, as for purge). FOR UPDATE: the jobs stay locked until the transaction
#: ends, so none is retried between the two (its events gone, itself kept).
#: Differs: the jobs locked FOR UPDATE (SQLite's write lock holds them).
DELETE_EVENTS = (
    f"DELETE FROM job_events WHERE job_id IN (SELECT id FROM jobs WHERE id = ANY(%(ids)s)"
    f" AND {status_in(DELETABLE)} AND {_common.NEEDED} FOR UPDATE)"
)

# --- producer quotas (queuelog/quotas.py) ----------------------------------------------------------------
# Sent only for a key with a quota, inside its enqueue's transaction, after QUOTA_TURN. Every ledger read
# is an index seek on (key_id, at, running_total); rows up to cutoff have left the rate's window.

#: The key's enqueues take turns: a transaction-scoped advisory lock on (namespace, key id), taken before
#: the enqueue reads anything and held until it commits, so the next one sees what this one stored.
#: (SQLite needs none: the enqueue's IMMEDIATE transaction holds the database's write lock.)
QUOTA_TURN = "SELECT pg_advisory_xact_lock(%(namespace)s::integer, %(key)s::integer)"

# --- the database's health (ops/db_health.py), PostgreSQL's alone, in postgresql_health.py --------------
from .postgresql_health import OLDEST_TRANSACTION, TABLE_HEALTH  # noqa: E402,F401  (found here, as above)
