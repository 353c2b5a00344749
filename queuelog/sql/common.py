"""The statements and pieces that SQLite and PostgreSQL spell alike, each written once.

Written in SQLite's spelling: values are named ``:now``, and a list is ``IN (:ids)``. ``for_postgresql``
turns that into psycopg's ``%(now)s`` and ``= ANY(%(ids)s)`` (and ``%`` into ``%%``), mechanically, so a
statement here is sent as is on SQLite and in that spelling on PostgreSQL. ``{slot}`` pieces are filled
by the runner as in the dialect modules (sqlite.py says how to read them).

A statement lives here when the two dialects agree on it; sqlite.py and postgresql.py hold only what
they spell differently, each saying why. The runner looks a name up in the dialect's module first, then
here (runner.statement); tests/unit/test_sql_dialects.py checks that no dialect module copies a statement
of this one back.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

from ..states import BACKLOG, BY_ACTION, DELETABLE, FINAL, HELD, RETRYABLE, JobStatus, RunWhen
from .values import JOB_LIST, KEY_LIST, limited, only_status, status_in

_CLAIM = BY_ACTION["claim"]
(_HELD,) = HELD
_CANCEL = BY_ACTION["cancel"]
_RETRY = BY_ACTION["retry"]
_EXPIRE = BY_ACTION["expire"]
_MET, _DOOMED, _REVIVED = BY_ACTION["dependencies_met"], BY_ACTION["dependency_failed"], BY_ACTION["dependency_retried"]
# Each moves jobs out of one status: the statements below name their jobs by id and re-check it (only_status).
((_MET_FROM,), (_DOOMED_FROM,), (_REVIVED_FROM,)) = (_MET.from_statuses, _DOOMED.from_statuses, _REVIVED.from_statuses)

#: ``IN (:name)``: a list value; ``:name`` (not ``::type``, a PostgreSQL cast): a value.
_LIST = re.compile(r"\bIN \(:([A-Za-z_]\w*)\)")
_VALUE = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


def for_postgresql(sql: str) -> str:
    """``sql`` as psycopg takes it: ``%`` doubled, ``IN (:ids)`` as ``= ANY(%(ids)s)``, ``:now`` as ``%(now)s``.

    ``NOT IN (:list)`` is refused: it would read ``NOT = ANY(…)``; PostgreSQL wants ``<> ALL(…)``, so such a
    statement is the dialect's own.
    """
    if re.search(r"\bNOT IN \(:", sql):
        raise ValueError(f"NOT IN a list differs per dialect: {sql}")
    return _VALUE.sub(r"%(\1)s", _LIST.sub(r"= ANY(%(\1)s)", sql.replace("%", "%%")))


def spell(dialect: str, sql: str) -> str:
    """``sql``, written in SQLite's spelling, as ``dialect`` takes it."""
    return for_postgresql(sql) if dialect == "postgresql" else sql


def not_expired(table: str = "") -> str:
    """A job (of ``table``) that has no expires_at or whose expires_at is still ahead: the claim may hand it out.

    A job past it stays pending until the reaper cancels it (EXPIRE), and no claim takes it meanwhile.
    """
    column = f"{table}.expires_at" if table else "expires_at"
    return f"({column} IS NULL OR {column} > :now)"


#: A job a claim may take now: pending, due, and not expired. The claim picks by it; a waiting claim's
#: due-check asks it.
CLAIMABLE = f"{status_in(_CLAIM.from_statuses)} AND run_at <= :now AND {not_expired()} {{types}}"

#: The optional ``{types}``: only jobs of the claim's (or the read's) types.
TYPES = "AND type IN (:types)"

#: The holding worker's guard: running, held by this worker key, under the claim it was given, and not past
#: the run's timeout: a late complete, fail or heartbeat is refused, and the reaper fails the run as timed out.
#: The statements that use it name their jobs by id, and it checks the rest in a form no index can answer
#: (values.only_status says why). A request without a token matches no job, not one that has none.
HELD_BY = (
    f"{only_status(_HELD, ('worker_id', ':worker'), ('claim_token', ':token'))} AND claim_token IS NOT NULL"
    " AND (timeout_at IS NULL OR timeout_at > :now)"
)

#: What a move out of running writes (a heartbeat too, which stays running): what becomes of the worker's
#: claim (one of the three below, by values.Claim), and those LEAVE_PARTS the move sets (values.Leave).
#: Every column it does not write keeps its value. updated_at is the time of the job's last move, written
#: by CLAIM_ENDED and CLAIM_DROPPED: a heartbeat (CLAIM_KEPT) writes no column that an index holds, so on
#: PostgreSQL it can be a HOT update (the new row version on the same page, no index touched). What the API
#: and the pages show as a job's last change is the later of updated_at and heartbeat_at (reads.last_change).
LEAVE_RUNNING = "{claim}{parts}"

#: Completed or failed: the claim ends; who ran the job, and when, stays on its record.
CLAIM_ENDED = "updated_at = :now, claim_token = NULL, lease_expires_at = NULL"

#: Back to pending: every claim column cleared, the job is anybody's again.
CLAIM_DROPPED = (
    "updated_at = :now, worker_id = NULL, claimed_at = NULL, claim_token = NULL, lease_expires_at = NULL,"
    " heartbeat_at = NULL, timeout_at = NULL"
)

#: New pending jobs, one row per job; the runner writes ``{rows}`` (runner._enqueue_text): positional on SQLite
#: (``?``: SQLite finds a named value by scanning the statement's list of names, so binding a large batch
#: grows quadratically), named on PostgreSQL (``%(v0)s``, …, because LOGGED names its own). A lone job takes
#: its turn in the INSERT itself (the dialect's ``turn`` in place of its fair_tag), which spares the
#: enqueue a FAIR_TAGS statement.
ENQUEUE = f"INSERT INTO jobs ({{columns}}) VALUES {{rows}} RETURNING {JOB_LIST}"

#: A type with a limit: its claims count running jobs or recent claims, so they must take turns (FLOW_LOCK).
LIMITED = limited()

#: A type under flow control: paused, or limited. The claim's plain walk of ix_jobs_claim_order takes
#: nothing while one of its types is (the caller then sends CLAIM_PICK with FLOW).
CONTROLLED = f"(paused OR {LIMITED})"

#: FLOW's ``{flow_pick}``: the flow-controlled pick's jobs join the plain walk's.
FLOW_PICK = "UNION ALL SELECT id FROM taken"

#: The settings changed since :version, the version of type_settings the caller's copy was read at (a
#: trigger gives type_settings_version a new one with every change; no row: version 0). One primary-key
#: read of a one-row table, asked once per claim.
SETTINGS_CHANGED = "coalesce((SELECT version FROM type_settings_version WHERE id = 1), 0) <> :version"

#: A claim of a rate-limited type, counted until :expires_at; and the claims whose window has passed.
RECORD_CLAIMS = "INSERT INTO type_claims (type, jobs, expires_at) VALUES (:type, :jobs, :expires_at)"

FORGET_CLAIMS = "DELETE FROM type_claims WHERE type = :type AND expires_at <= :now"

#: The holding worker's every move: complete, fail (requeue or failed), release, and the heartbeat.
#: ``{in_flight}`` is the dialect's IN_FLIGHT (the runner always fills it).
FINISH = (
    f"UPDATE jobs SET {LEAVE_RUNNING}\n WHERE id IN (:ids) AND {HELD_BY} {{in_flight}} {{ends_alone}}"
    f"\nRETURNING {JOB_LIST}"
)

#: Failed or cancelled jobs back to pending with a clean record. Run once per from-status
#: (:from_status), so each event row says where its job came from.
RETRY = f"""
UPDATE jobs
   SET status = '{_RETRY.to_status}', retry_count = 0, stall_count = 0, worker_id = NULL, claimed_at = NULL,
       claim_token = NULL, lease_expires_at = NULL, heartbeat_at = NULL, completed_at = NULL, timeout_at = NULL,
       run_at = :now, updated_at = :now
 WHERE id IN (:ids) AND {status_in(RETRYABLE)} AND status = :from_status
RETURNING {JOB_LIST}"""

#: An admin's bulk cancel: those of the ids that are pending, marked cancelled (CANCEL for one job).
CANCEL_MANY = (
    f"UPDATE jobs SET status = '{_CANCEL.to_status}', updated_at = :now"
    f" WHERE id IN (:ids) AND {status_in(_CANCEL.from_statuses)} AND status = :from_status"
    f" RETURNING {JOB_LIST}"
)

#: Pending jobs past their expires_at, cancelled by the reaper (EXPIRABLE finds them by ix_jobs_pending_expiry;
#: EXPIRE re-checks each, so a job claimed in between is left alone).
EXPIRE = (
    f"UPDATE jobs SET status = '{_EXPIRE.to_status}', updated_at = :now"
    f" WHERE id IN (:ids) AND {status_in(_EXPIRE.from_statuses)} AND expires_at <= :now RETURNING {JOB_LIST}"
)

#: A slot's scope is the id of the key whose window it is, or 0 for a type whose producers share one window
#: (unique_scope "type", queue/enqueueing.py says why producers have their own by default).
#: Take the (type, scope, key) slot for a new job, unless it is held: its job enqueued after :cutoff (now less
#: the new request's unique_for) and not finished. A row back: the slot is this enqueue's (its job_id is set once the
#: job is inserted, in the same transaction); none: answer with the holder's job (UNIQUE_HOLDER).
#: Why two enqueues of one key never both create a job: on SQLite the transaction holds the write lock, so
#: the check and the take are one step. On PostgreSQL (any number of servers) the primary key makes the
#: second INSERT wait for the first's transaction, then take the DO UPDATE path on the row as committed,
#: which it locks and re-checks. The job that the first just inserted is not in the second's snapshot, so
#: the EXISTS (finished) reads false and the slot counts as held: a race errs towards answering with that job.
UNIQUE_TAKE = f"""
INSERT INTO unique_slots (type, scope, unique_key, job_id, enqueued_at)
VALUES (:type, :scope, :key, NULL, :now)
ON CONFLICT (type, scope, unique_key) DO UPDATE SET job_id = NULL, enqueued_at = excluded.enqueued_at
 WHERE unique_slots.enqueued_at <= :cutoff OR unique_slots.job_id IS NULL
    OR EXISTS (SELECT 1 FROM jobs WHERE jobs.id = unique_slots.job_id AND {status_in(FINAL)})
RETURNING type"""

#: One slot: the statements below name it as UNIQUE_TAKE's conflict target does.
SLOT = "type = :type AND scope = :scope AND unique_key = :key"

#: The job holding a (type, scope, key) slot.
UNIQUE_HOLDER = f"SELECT {JOB_LIST} FROM jobs WHERE id = (SELECT job_id FROM unique_slots WHERE {SLOT})"

#: The job a taken slot now belongs to.
UNIQUE_SET = f"UPDATE unique_slots SET job_id = :job WHERE {SLOT}"

#: A parent ``p`` that holds its waiting child (the updated row, ``jobs``) back: not completed, and, unless
#: the child runs once its parents merely finished, not final either. Sought through the child's edges (the
#: primary key), one parent at a time.
HOLDS_BACK = (
    f"p.status <> '{JobStatus.COMPLETED}' AND (jobs.run_when = '{RunWhen.COMPLETED}' OR NOT p.{status_in(FINAL)})"
)

#: Waiting jobs whose every parent is done as their run_when asks: pending now, claimable at their run_at.
PROMOTE = f"""
UPDATE jobs
   SET status = '{_MET.to_status}', updated_at = :now
 WHERE id IN (:ids) AND {only_status(_MET_FROM)}
   AND NOT EXISTS (SELECT 1 FROM job_dependencies d JOIN jobs p ON p.id = d.parent_id
                    WHERE d.child_id = jobs.id AND {HOLDS_BACK})
RETURNING {JOB_LIST}"""

#: Waiting children whose parents broke (BROKEN_PARENTS), cancelled.
DOOM = (
    f"UPDATE jobs SET status = '{_DOOMED.to_status}', updated_at = :now"
    f" WHERE id IN (:ids) AND {only_status(_DOOMED_FROM)} RETURNING {JOB_LIST}"
)

#: An admin retried jobs (:ids): their children that a dependency failure cancelled (their last event says
#: so) wait again. The last event is one seek of ix_job_events_job_id per child.
REVIVE = f"""
UPDATE jobs
   SET status = '{_REVIVED.to_status}', updated_at = :now
 WHERE id IN (SELECT d.child_id FROM job_dependencies d WHERE d.parent_id IN (:ids))
   AND {only_status(_REVIVED_FROM)}
   AND (SELECT e.event FROM job_events e WHERE e.job_id = jobs.id ORDER BY e.id DESC LIMIT 1)
       = '{_DOOMED.event}'
RETURNING {JOB_LIST}"""

#: One job, to explain a refusal or to weigh a failure against its retries.
JOB = f"SELECT {JOB_LIST} FROM jobs WHERE id = :id"

#: A producer's jobs under these idempotency keys: an enqueue repeated under a key answers with them.
JOBS_BY_KEY = f"SELECT {JOB_LIST} FROM jobs WHERE producer_key_id = :producer AND idempotency_key IN (:keys)"

#: STALLED's optional ``{claimed_before}``: also the runs claimed before it, however alive.
CLAIMED_BEFORE = "OR claimed_at < :claimed_before"

#: CLAIM's ``{process_runs}``, only when the claim names its worker process: that process is the claiming key's and
#: told to run (an admin's quiet or stop: nothing is claimed). A primary-key probe in the claim itself, so
#: naming a process adds no statement; a claim that names none only writes process_id = NULL besides.
PROCESS_RUNS = (
    "AND EXISTS (SELECT 1 FROM worker_processes WHERE id = :process AND key_id = :key_id AND command = 'run')"
)

#: A job that a job still waiting, pending or running depends on is never purged: its child would lose its
#: parent (and its result). Looked up only for jobs that have dependents.
NEEDED = (
    "NOT (has_dependents AND EXISTS (SELECT 1 FROM job_dependencies d JOIN jobs c ON c.id = d.child_id"
    f" WHERE d.parent_id = jobs.id AND NOT c.{status_in(FINAL)}))"
)

#: Purging's second and third steps (PURGEABLE found the ids): the events, then the jobs, re-checked.
PURGE_EVENTS = "DELETE FROM job_events WHERE job_id IN (:ids)"

PURGE_JOBS = f"DELETE FROM jobs WHERE id IN (:ids) AND status = :status AND updated_at < :cutoff AND {NEEDED}"

#: After a delete or a purge: the workflow edges and dedupe slots of the jobs that went. On PostgreSQL no
#: foreign key cascades to them (``jobs`` is partitioned there, docs/storage.md); on SQLite these find none.
FORGET_EDGES = (
    "DELETE FROM job_dependencies WHERE (child_id IN (:ids) OR parent_id IN (:ids))"
    " AND NOT (EXISTS (SELECT 1 FROM jobs WHERE jobs.id = job_dependencies.child_id)"
    " AND EXISTS (SELECT 1 FROM jobs WHERE jobs.id = job_dependencies.parent_id))"
)
FORGET_SLOTS = (
    "DELETE FROM unique_slots WHERE job_id IN (:ids)"
    " AND NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.id = unique_slots.job_id)"
)

#: An admin's delete, after the dialect's DELETE_EVENTS: the jobs, each re-checked.
DELETE_JOBS = f"DELETE FROM jobs WHERE id IN (:ids) AND {status_in(DELETABLE)} AND {NEEDED} RETURNING {JOB_LIST}"

#: The API key behind a request (live or revoked), on every request.
KEY_BY_DIGEST = f"SELECT {KEY_LIST} FROM api_keys WHERE digest = :digest"

# --- producer quotas (queuelog/quotas.py) ----------------------------------------------------------------
# Sent only for a key with a quota, inside its enqueue's transaction, where no other enqueue of the key runs
# between the check and the insert: on SQLite the transaction began IMMEDIATE and holds the write lock, on
# PostgreSQL it took QUOTA_TURN first. Every ledger read is an index seek on (key_id, at, running_total);
# rows up to :cutoff have left the rate's window.

#: The key's quota state in one read: the ledger's newest running total and its time, the running total
#: before the window's first row, the oldest row's time (rows that left the window are deleted now and
#: then, not on every enqueue), and the key's waiting and pending jobs counted up to :most (LIMIT 0: not
#: counted). The statuses are spelled out: SQLite uses ix_jobs_backlog_producer only for a WHERE saying what
#: its WHERE says. The subquery is named (``pending``): PostgreSQL requires it, SQLite allows it.
QUOTA_STATE = f"""
SELECT (SELECT running_total FROM enqueue_ledger WHERE key_id = :key
         ORDER BY at DESC, running_total DESC LIMIT 1),
       (SELECT at FROM enqueue_ledger WHERE key_id = :key ORDER BY at DESC, running_total DESC LIMIT 1),
       (SELECT running_total - jobs FROM enqueue_ledger WHERE key_id = :key AND at > :cutoff
         ORDER BY at, running_total LIMIT 1),
       (SELECT at FROM enqueue_ledger WHERE key_id = :key ORDER BY at, running_total LIMIT 1),
       (SELECT count(*) FROM (SELECT 1 FROM jobs WHERE producer_key_id = :key
                                 AND {status_in(BACKLOG)} LIMIT :most) AS pending)"""

#: When the window's row holding the key's :total-th job was written: once it leaves, a refused request fits.
QUOTA_FREES_AT = (
    "SELECT at FROM enqueue_ledger WHERE key_id = :key AND at > :cutoff AND running_total >= :total"
    " ORDER BY at, running_total LIMIT 1"
)

#: One enqueue of a rate-limited key: when, how many jobs, and the key's running total with them.
QUOTA_RECORD = "INSERT INTO enqueue_ledger (key_id, at, jobs, running_total) VALUES (:key, :at, :jobs, :total)"

#: Ledger rows that left the key's rate window.
QUOTA_FORGET = "DELETE FROM enqueue_ledger WHERE key_id = :key AND at <= :cutoff"


# --- a waiting claim's sleep (longpoll) ------------------------------------------------------------------

#: The earliest run_at still to come of a pending job of one type (``{type}``, a value the runner names per
#: seek) and priority (``{priority}``, a whole number written into the text): the first entry of its range of
#: ix_jobs_type_status_priority (type, status, priority, run_at), one seek however many jobs are scheduled;
#: the minimum over all pending jobs of a type would read every one of them, at every wake-up.
#: Asked as "the first in run_at order", not as MIN(run_at): only that index gives the order, which PostgreSQL's
#: planning of this read then requires (IN_INDEX_ORDER in postgresql_turns.py says why).
NEXT_RUN_AT_SEEK = (
    f"SELECT (SELECT run_at FROM jobs WHERE type = {{type}} AND status = '{JobStatus.PENDING}'"
    " AND priority = {priority} AND run_at > :now ORDER BY run_at LIMIT 1) AS run_at"
)
#: The earliest of several seeks (``{seeks}``: NEXT_RUN_AT_SEEKs joined by UNION ALL), in one read.
NEXT_RUN_AT = "SELECT MIN(run_at) AS run_at FROM ({seeks}) AS firsts"

# The dialects' ``turn`` (sqlite.turn, postgresql.turn), spelled apart, say where a new job's turn may
# start: right after the key's last turn at that priority (any type, any status: a key's turns only grow),
# and not before the head of the type's queue at that priority, the turn of its first pending job. A key
# with nothing waiting thus joins at the head and is taken within one round of the keys waiting there. A
# type with nothing pending has no head: a job then starts at the newest job's id, which no turn given so
# far exceeds (a key's turns grow by one per job, ids at least as fast), so the turns of a queue that was
# idle never start over behind those of keys that were busy before. One seek each.


def names() -> list[str]:
    """The statements and pieces written here (upper-case names), in order."""
    return [
        name
        for name, value in globals().items()
        if name.isupper() and isinstance(value, str) and name not in {"JOB_LIST", "KEY_LIST"}
    ]


#: Every name of ``names()`` as each dialect's module spells it: ``SPELLED["postgresql"].CLAIMABLE``.
SPELLED = {
    "sqlite": SimpleNamespace(**{name: globals()[name] for name in names()}),
    "postgresql": SimpleNamespace(**{name: for_postgresql(globals()[name]) for name in names()}),
}
