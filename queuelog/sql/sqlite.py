"""Every statement queuelog sends to SQLite about jobs, by name; postgresql.py holds the same names.

How to read them:
- values are named (``:now``); ``(:ids)``, ``(:types)``, ``(:keys)`` are lists the runner spells out per
  call (``:ids_0, :ids_1, …``); ``{types}`` and ``{claimed_before}`` are optional pieces the runner fills
  with TYPES and CLAIMED_BEFORE when the caller gives those values, and leaves empty when not;
  ``{claim}`` and ``{parts}`` (LEAVE_RUNNING) hold what a move out of running writes;
- guards (the from-statuses) are spelled from ``queuelog.states``, so the table and the SQL cannot drift;
- every write returns all the job's columns, and the runner then records its event rows with
  LOG_EVENTS in the same transaction. That transaction began IMMEDIATE (``write_transaction``): each
  statement here runs holding the database's write lock, so a guard read and its write are one step.
"""
from __future__ import annotations

from ..states import BY_ACTION, HELD, RETRYABLE, JobStatus
from .values import JOB_LIST, KEY_LIST, status_in

_CLAIM = BY_ACTION["claim"]
_CANCEL = BY_ACTION["cancel"]
_RETRY = BY_ACTION["retry"]

# --- the shared pieces: each condition written once ----------------------------------------------

#: A job a claim may take now: pending and due. The claim picks by it; a waiting claim's due-check asks it.
CLAIMABLE = f"{status_in(_CLAIM.from_statuses)} AND run_at <= :now {{types}}"
TYPES = "AND type IN (:types)"

#: The holding worker's guard: running, held by this worker key, under the claim it was given.
HELD_BY = f"{status_in(HELD)} AND worker_id = :worker AND claim_token = :token"

#: What a move out of running writes (a heartbeat too, which stays running): the time, what becomes of the
#: worker's claim (one of the three below, by values.Claim), and those LEAVE_PARTS the move sets
#: (values.Leave). Every column it does not write keeps its value.
LEAVE_RUNNING = "updated_at = :now, {claim}{parts}"
#: A heartbeat: the claim stands, its lease is renewed.
CLAIM_KEPT = "heartbeat_at = :now, lease_expires_at = :lease_until"
#: Completed or failed: the claim ends; who ran the job, and when, stays on its record.
CLAIM_ENDED = "claim_token = NULL, lease_expires_at = NULL"
#: Back to pending: every claim column cleared, the job is anybody's again.
CLAIM_DROPPED = ("worker_id = NULL, claimed_at = NULL, claim_token = NULL, lease_expires_at = NULL,"
                 " heartbeat_at = NULL")
LEAVE_PARTS = {
    "status": "status = :status",
    "spends_retry": "retry_count = retry_count + 1",
    "stalled": "stall_count = stall_count + 1",
    "run_at": "run_at = :run_at",
    "error": "error = :error",
    "completes": "result = :result, completed_at = :now",
}

# --- the writes -------------------------------------------------------------------------------------

#: New pending jobs, one row per job. Values here are positional (?): SQLite finds a named value by
#: scanning the statement's list of names, so a 500-job batch (7,000 names) took 72 ms to bind, not 0.5 ms.
ENQUEUE = f"INSERT INTO jobs ({{columns}}) VALUES {{rows}} RETURNING {JOB_LIST}"

#: The claim: pick the next due jobs in claim order and mark them running, in one statement. SQLite's
#: planner, left to itself, walks an index on status and sorts every pending job on each claim (a claim
#: at 1M pending took ~40x longer than at 1k), so the pick names its index. The UPDATE re-checks
#: the status itself, so a job can never be handed out twice.
CLAIM = f"""
UPDATE jobs
   SET status = '{_CLAIM.to_status}', worker_id = :worker, claim_token = :token, claimed_at = :now,
       heartbeat_at = :now, lease_expires_at = :lease_until, updated_at = :now
 WHERE {status_in(_CLAIM.from_statuses)}
   AND id IN (SELECT id FROM jobs INDEXED BY ix_jobs_claim_order
               WHERE {CLAIMABLE}
               ORDER BY priority DESC, id
               LIMIT :limit)
RETURNING {JOB_LIST}"""

#: The holding worker's every move: complete, fail (requeue or failed), release, and the heartbeat.
FINISH = f"UPDATE jobs SET {LEAVE_RUNNING}\n WHERE id IN (:ids) AND {HELD_BY}\nRETURNING {JOB_LIST}"

#: Running jobs taken back without their worker: by the reaper (the claim it found stalled), by the server
#: (a claim whose client hung up before the answer), by an admin's give-back (:token NULL: whatever
#: claim is current).
TAKE_BACK = (f"UPDATE jobs SET {LEAVE_RUNNING}\n WHERE id IN (:ids) AND {status_in(HELD)}"
             f" AND (:token IS NULL OR claim_token = :token)\nRETURNING {JOB_LIST}")

#: A pending job will not run; a producer may cancel only its own (:owner), an admin any (:owner NULL).
CANCEL = (f"UPDATE jobs SET status = '{_CANCEL.to_status}', updated_at = :now"
          f" WHERE id = :id AND {status_in(_CANCEL.from_statuses)}"
          f" AND (:owner IS NULL OR producer_key_id = :owner) RETURNING {JOB_LIST}")

#: Failed or cancelled jobs back to pending with a clean record. Run once per from-status
#: (:from_status), so each event row says where its job came from.
RETRY = f"""
UPDATE jobs
   SET status = '{_RETRY.to_status}', retry_count = 0, stall_count = 0, worker_id = NULL, claimed_at = NULL,
       claim_token = NULL, lease_expires_at = NULL, heartbeat_at = NULL, completed_at = NULL,
       run_at = :now, updated_at = :now
 WHERE id IN (:ids) AND {status_in(RETRYABLE)} AND status = :from_status
RETURNING {JOB_LIST}"""

#: The event row of each job a write returned, sent right after it (executemany).
LOG_EVENTS = ("INSERT INTO job_events (job_id, event, from_status, to_status, actor, attempt, error, at)"
              " VALUES (?, ?, ?, ?, ?, ?, ?, ?)")

# --- the reads the operations decide by ---------------------------------------------------------------

#: Is anything claimable? Asked by a waiting claim before it takes the write lock to claim.
SOMETHING_DUE = f"SELECT EXISTS (SELECT 1 FROM jobs WHERE {CLAIMABLE})"

#: One job, to explain a refusal or to weigh a failure against its retries.
JOB = f"SELECT {JOB_LIST} FROM jobs WHERE id = :id"

#: A producer's jobs under these idempotency keys: an enqueue repeated under a key answers with them.
JOBS_BY_KEY = f"SELECT {JOB_LIST} FROM jobs WHERE producer_key_id = :producer AND idempotency_key IN (:keys)"

#: Running jobs whose lease ran out (or claimed before :claimed_before), for the reaper.
STALLED = (f"SELECT {JOB_LIST} FROM jobs WHERE {status_in(HELD)}"
           " AND (lease_expires_at < :now {claimed_before}) ORDER BY id")
CLAIMED_BEFORE = "OR claimed_at < :claimed_before"

#: Purging (`flask purge`): the oldest finished jobs of one status, unchanged since :cutoff, a batch at a
#: time; then their events (first: not every database cascades the foreign key), then the jobs, each
#: re-checked so a job retried in between stays. The purge's transaction holds the write lock throughout.
PURGEABLE = "SELECT id FROM jobs WHERE status = :status AND updated_at < :cutoff ORDER BY updated_at LIMIT :limit"
PURGE_EVENTS = "DELETE FROM job_events WHERE job_id IN (:ids)"
PURGE_JOBS = "DELETE FROM jobs WHERE id IN (:ids) AND status = :status AND updated_at < :cutoff"

#: The API key behind a request (live or revoked), on every request.
KEY_BY_DIGEST = f"SELECT {KEY_LIST} FROM api_keys WHERE digest = :digest"

# --- producer quotas (queuelog/quotas.py) ----------------------------------------------------------------
# Sent only for a key with a quota, inside its enqueue's transaction, which began IMMEDIATE: it holds the
# write lock, so no other enqueue of the key runs between the check and the insert. Every ledger read is
# an index seek on (key_id, at, running_total); rows up to :cutoff have left the rate's window.

#: The key's quota state in one read: the ledger's newest running total and its time, the running total
#: before the window's first row, the oldest row's time (rows that left the window are deleted now and
#: then, not on every enqueue), and the key's pending jobs counted up to :most (LIMIT 0: not counted).
#: The status is spelled out: SQLite uses ix_jobs_pending_producer only for a WHERE saying what its WHERE says.
QUOTA_STATE = f"""
SELECT (SELECT running_total FROM enqueue_ledger WHERE key_id = :key ORDER BY at DESC, running_total DESC LIMIT 1),
       (SELECT at FROM enqueue_ledger WHERE key_id = :key ORDER BY at DESC, running_total DESC LIMIT 1),
       (SELECT running_total - jobs FROM enqueue_ledger WHERE key_id = :key AND at > :cutoff
         ORDER BY at, running_total LIMIT 1),
       (SELECT at FROM enqueue_ledger WHERE key_id = :key ORDER BY at, running_total LIMIT 1),
       (SELECT count(*) FROM (SELECT 1 FROM jobs WHERE producer_key_id = :key AND {status_in({JobStatus.PENDING})}
                               LIMIT :most))"""

#: When the window's row holding the key's :total-th job was written: once it leaves, a refused request fits.
QUOTA_FREES_AT = ("SELECT at FROM enqueue_ledger WHERE key_id = :key AND at > :cutoff AND running_total >= :total"
                  " ORDER BY at, running_total LIMIT 1")

#: One enqueue of a rate-limited key: when, how many jobs, and the key's running total with them.
QUOTA_RECORD = "INSERT INTO enqueue_ledger (key_id, at, jobs, running_total) VALUES (:key, :at, :jobs, :total)"

#: Ledger rows that left the key's rate window.
QUOTA_FORGET = "DELETE FROM enqueue_ledger WHERE key_id = :key AND at <= :cutoff"
