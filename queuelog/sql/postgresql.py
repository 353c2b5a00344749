"""Every statement queuelog sends to PostgreSQL about jobs, by name; sqlite.py holds the same names.

How to read them:
- values are named (``%(now)s``), lists included (``id = ANY(%(ids)s)``); ``{types}`` and
  ``{claimed_before}`` are optional pieces the runner fills with TYPES and CLAIMED_BEFORE when the
  caller gives those values, and leaves empty when not; ``{claim}`` and ``{parts}`` (LEAVE_RUNNING) hold
  what a move out of running writes;
- guards (the from-statuses) are spelled from ``queuelog.states``, so the table and the SQL cannot drift;
- every write returns all the job's columns, and the runner sends it inside LOGGED, which writes its
  event rows in the same statement (one round trip instead of two). Under READ COMMITTED an UPDATE
  that waited for a row lock re-checks its WHERE on the row as committed, so a guard cannot be raced.
"""
from __future__ import annotations

from ..states import BY_ACTION, HELD, RETRYABLE, JobStatus
from .values import JOB_LIST, KEY_LIST, status_in

_CLAIM = BY_ACTION["claim"]
_CANCEL = BY_ACTION["cancel"]
_RETRY = BY_ACTION["retry"]

# --- the shared pieces: each condition written once ----------------------------------------------

#: A job a claim may take now: pending and due. The claim picks by it; a waiting claim's due-check asks it.
CLAIMABLE = f"{status_in(_CLAIM.from_statuses)} AND run_at <= %(now)s {{types}}"
TYPES = "AND type = ANY(%(types)s)"

#: The holding worker's guard: running, held by this worker key, under the claim it was given.
HELD_BY = f"{status_in(HELD)} AND worker_id = %(worker)s AND claim_token = %(token)s"

#: What a move out of running writes (a heartbeat too, which stays running): the time, what becomes of the
#: worker's claim (one of the three below, by values.Claim), and those LEAVE_PARTS the move sets
#: (values.Leave). Every column it does not write keeps its value.
LEAVE_RUNNING = "updated_at = %(now)s, {claim}{parts}"
#: A heartbeat: the claim stands, its lease is renewed.
CLAIM_KEPT = "heartbeat_at = %(now)s, lease_expires_at = %(lease_until)s"
#: Completed or failed: the claim ends; who ran the job, and when, stays on its record.
CLAIM_ENDED = "claim_token = NULL, lease_expires_at = NULL"
#: Back to pending: every claim column cleared, the job is anybody's again.
CLAIM_DROPPED = ("worker_id = NULL, claimed_at = NULL, claim_token = NULL, lease_expires_at = NULL,"
                 " heartbeat_at = NULL")
LEAVE_PARTS = {
    "status": "status = %(status)s",
    "spends_retry": "retry_count = retry_count + 1",
    "stalled": "stall_count = stall_count + 1",
    "run_at": "run_at = %(run_at)s",
    "error": "error = %(error)s",
    "completes": "result = %(result)s, completed_at = %(now)s",
}

# --- the writes -------------------------------------------------------------------------------------

#: New pending jobs, one row per job. Values are named (%(v0)s, …) because LOGGED names its own.
ENQUEUE = f"INSERT INTO jobs ({{columns}}) VALUES {{rows}} RETURNING {JOB_LIST}"

#: The claim: pick the next due jobs in claim order and mark them running, in one statement.
#: FOR UPDATE SKIP LOCKED lets concurrent claimers pass each other's rows instead of queueing behind
#: them, and no row is locked by two claimers. The pick is a MATERIALIZED CTE, run exactly once: as a
#: plain ``IN (subquery)`` the planner may choose a nested-loop semi join that re-runs the LIMIT
#: subquery for every pending row; each rerun skips the rows this statement already updated and
#: yields the next one, so a single claim of one job marked every due job running. The UPDATE
#: re-checks the status itself, so a job can never be handed out twice.
CLAIM = f"""
WITH picked AS MATERIALIZED (
    SELECT id FROM jobs
     WHERE {CLAIMABLE}
     ORDER BY priority DESC, id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED)
UPDATE jobs
   SET status = '{_CLAIM.to_status}', worker_id = %(worker)s, claim_token = %(token)s, claimed_at = %(now)s,
       heartbeat_at = %(now)s, lease_expires_at = %(lease_until)s, updated_at = %(now)s
 WHERE {status_in(_CLAIM.from_statuses)} AND id IN (SELECT id FROM picked)
RETURNING {JOB_LIST}"""

#: The holding worker's every move: complete, fail (requeue or failed), release, and the heartbeat.
FINISH = f"UPDATE jobs SET {LEAVE_RUNNING}\n WHERE id = ANY(%(ids)s) AND {HELD_BY}\nRETURNING {JOB_LIST}"

#: Running jobs taken back without their worker: by the reaper (the claim it found stalled), by the server
#: (a claim whose client hung up before the answer), by an admin's give-back (%(token)s NULL: whatever
#: claim is current).
TAKE_BACK = (f"UPDATE jobs SET {LEAVE_RUNNING}\n WHERE id = ANY(%(ids)s) AND {status_in(HELD)}"
             f" AND (%(token)s::text IS NULL OR claim_token = %(token)s)\nRETURNING {JOB_LIST}")

#: A pending job will not run; a producer may cancel only its own (owner), an admin any (owner NULL).
CANCEL = (f"UPDATE jobs SET status = '{_CANCEL.to_status}', updated_at = %(now)s"
          f" WHERE id = %(id)s AND {status_in(_CANCEL.from_statuses)}"
          f" AND (%(owner)s::integer IS NULL OR producer_key_id = %(owner)s) RETURNING {JOB_LIST}")

#: Failed or cancelled jobs back to pending with a clean record. Run once per from-status
#: (%(from_status)s), so each event row says where its job came from.
RETRY = f"""
UPDATE jobs
   SET status = '{_RETRY.to_status}', retry_count = 0, stall_count = 0, worker_id = NULL, claimed_at = NULL,
       claim_token = NULL, lease_expires_at = NULL, heartbeat_at = NULL, completed_at = NULL,
       run_at = %(now)s, updated_at = %(now)s
 WHERE id = ANY(%(ids)s) AND {status_in(RETRYABLE)} AND status = %(from_status)s
RETURNING {JOB_LIST}"""

#: A write and the event row of each job it returns, as one statement (a data-modifying CTE).
LOGGED = ("WITH changed AS ({statement}), "
          "logged AS (INSERT INTO job_events (job_id, event, from_status, to_status, actor, attempt, error, at) "
          "SELECT id, %(log_event)s, %(log_from)s, status, %(log_actor)s, retry_count, %(log_error)s, %(log_at)s "
          f"FROM changed) SELECT {JOB_LIST} FROM changed")

# --- the reads the operations decide by ---------------------------------------------------------------

#: Is anything claimable? Asked by a waiting claim before it runs the claim.
SOMETHING_DUE = f"SELECT EXISTS (SELECT 1 FROM jobs WHERE {CLAIMABLE})"

#: One job, to explain a refusal or to weigh a failure against its retries.
JOB = f"SELECT {JOB_LIST} FROM jobs WHERE id = %(id)s"

#: A producer's jobs under these idempotency keys: an enqueue repeated under a key answers with them.
JOBS_BY_KEY = (f"SELECT {JOB_LIST} FROM jobs"
               " WHERE producer_key_id = %(producer)s AND idempotency_key = ANY(%(keys)s)")

#: Running jobs whose lease ran out (or claimed before claimed_before), for the reaper; a job another
#: reaper is taking back right now is skipped, not waited for.
STALLED = (f"SELECT {JOB_LIST} FROM jobs WHERE {status_in(HELD)}"
           " AND (lease_expires_at < %(now)s {claimed_before}) ORDER BY id FOR UPDATE SKIP LOCKED")
CLAIMED_BEFORE = "OR claimed_at < %(claimed_before)s"

#: Purging (`flask purge`): the oldest finished jobs of one status, unchanged since cutoff, a batch at a
#: time, locked until commit so an admin's retry cannot turn one back into a pending job before the
#: delete (a job it holds is skipped, for the next run); then their events, then the jobs, re-checked.
PURGEABLE = ("SELECT id FROM jobs WHERE status = %(status)s AND updated_at < %(cutoff)s"
             " ORDER BY updated_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED")
PURGE_EVENTS = "DELETE FROM job_events WHERE job_id = ANY(%(ids)s)"
PURGE_JOBS = "DELETE FROM jobs WHERE id = ANY(%(ids)s) AND status = %(status)s AND updated_at < %(cutoff)s"

#: The API key behind a request (live or revoked), on every request.
KEY_BY_DIGEST = f"SELECT {KEY_LIST} FROM api_keys WHERE digest = %(digest)s"

# --- producer quotas (queuelog/quotas.py) ----------------------------------------------------------------
# Sent only for a key with a quota, inside its enqueue's transaction, after QUOTA_TURN. Every ledger read
# is an index seek on (key_id, at, running_total); rows up to cutoff have left the rate's window.

#: The key's enqueues take turns: a transaction-scoped advisory lock on (namespace, key id), taken before
#: the enqueue reads anything and held until it commits, so the next one sees what this one stored.
#: (SQLite needs none: the enqueue's IMMEDIATE transaction holds the database's write lock.)
QUOTA_TURN = "SELECT pg_advisory_xact_lock(%(namespace)s::integer, %(key)s::integer)"

#: The key's quota state in one read: the ledger's newest running total and its time, the running total
#: before the window's first row, the oldest row's time (rows that left the window are deleted now and
#: then, not on every enqueue), and the key's pending jobs counted up to most (LIMIT 0: not counted).
QUOTA_STATE = f"""
SELECT (SELECT running_total FROM enqueue_ledger WHERE key_id = %(key)s
         ORDER BY at DESC, running_total DESC LIMIT 1),
       (SELECT at FROM enqueue_ledger WHERE key_id = %(key)s ORDER BY at DESC, running_total DESC LIMIT 1),
       (SELECT running_total - jobs FROM enqueue_ledger WHERE key_id = %(key)s AND at > %(cutoff)s
         ORDER BY at, running_total LIMIT 1),
       (SELECT at FROM enqueue_ledger WHERE key_id = %(key)s ORDER BY at, running_total LIMIT 1),
       (SELECT count(*) FROM (SELECT 1 FROM jobs WHERE producer_key_id = %(key)s
                                 AND {status_in({JobStatus.PENDING})} LIMIT %(most)s) AS pending)"""

#: When the window's row holding the key's total-th job was written: once it leaves, a refused request fits.
QUOTA_FREES_AT = ("SELECT at FROM enqueue_ledger WHERE key_id = %(key)s AND at > %(cutoff)s"
                  " AND running_total >= %(total)s ORDER BY at, running_total LIMIT 1")

#: One enqueue of a rate-limited key: when, how many jobs, and the key's running total with them.
QUOTA_RECORD = ("INSERT INTO enqueue_ledger (key_id, at, jobs, running_total)"
                " VALUES (%(key)s, %(at)s, %(jobs)s, %(total)s)")

#: Ledger rows that left the key's rate window.
QUOTA_FORGET = "DELETE FROM enqueue_ledger WHERE key_id = %(key)s AND at <= %(cutoff)s"
