"""Every statement queuelog sends to SQLite about jobs, by name; postgresql.py holds the same names.

How to read them:
- values are named (``:now``); ``(:ids)``, ``(:types)``, ``(:keys)``, ``(:locked_types)`` are lists the runner
  spells out per call (``:ids_0, :ids_1, …``); ``{types}``, ``{claimed_before}``, ``{flow}`` / ``{flow_pick}``
  and ``{stale}`` are optional pieces the runner fills with TYPES, CLAIMED_BEFORE, FLOW / FLOW_PICK and STALE
  when the caller gives those values, and leaves empty when not; ``{claim}`` and ``{parts}`` (LEAVE_RUNNING)
  hold what a move out of running writes;
- guards (the from-statuses) are spelled from ``queuelog.states``, so the table and the SQL cannot drift;
- every write returns all the job's columns (the claim reads them back with CLAIMED instead: see
  CLAIM_PICK), and the runner then records its event rows with LOG_EVENTS in the same transaction. That
  transaction began IMMEDIATE (``write_transaction``): each statement here runs holding the database's
  write lock, so a guard read and its write are one step.
"""
from __future__ import annotations

from ..states import BACKLOG, BROKEN, BY_ACTION, DELETABLE, FINAL, HELD, RETRYABLE, JobStatus, RunWhen
from .values import JOB_LIST, KEY_LIST, limited, status_in

_CLAIM = BY_ACTION["claim"]
_CANCEL = BY_ACTION["cancel"]
_RETRY = BY_ACTION["retry"]
_EXPIRE = BY_ACTION["expire"]
_RUN_NOW = BY_ACTION["run_now"]
_MET, _DOOMED, _REVIVED = BY_ACTION["dependencies_met"], BY_ACTION["dependency_failed"], BY_ACTION["dependency_retried"]

# --- the shared pieces: each condition written once ----------------------------------------------

def not_expired(table: str = "") -> str:
    """A job (of ``table``) that has no expires_at or whose expires_at is still ahead: the claim may hand it out.

    A job past it stays pending until the reaper cancels it (EXPIRE), and no claim takes it meanwhile.
    """
    column = f"{table}.expires_at" if table else "expires_at"
    return f"({column} IS NULL OR {column} > :now)"


#: A job a claim may take now: pending, due, and not expired. The claim picks by it; a waiting claim's
#: due-check asks it.
CLAIMABLE = f"{status_in(_CLAIM.from_statuses)} AND run_at <= :now AND {not_expired()} {{types}}"
TYPES = "AND type IN (:types)"


#: When a run of a job claimed at :now must end (NULL: it has no timeout_seconds). Whole seconds are added to
#: the time without its fraction, and the fraction put back, so the text is exactly what SQLAlchemy stores
#: (SQLite compares times as text; its own date functions keep milliseconds only).
TIMEOUT_AT = ("CASE WHEN timeout_seconds IS NULL THEN NULL ELSE strftime('%Y-%m-%d %H:%M:%S', substr(:now, 1, 19),"
              " '+' || timeout_seconds || ' seconds') || substr(:now, 20) END")

#: The holding worker's guard: running, held by this worker key, under the claim it was given, and not past
#: the run's timeout: a late complete, fail or heartbeat is refused, and the reaper fails the run as timed out.
HELD_BY = (f"{status_in(HELD)} AND worker_id = :worker AND claim_token = :token"
           " AND (timeout_at IS NULL OR timeout_at > :now)")

#: What a move out of running writes (a heartbeat too, which stays running): the time, what becomes of the
#: worker's claim (one of the three below, by values.Claim), and those LEAVE_PARTS the move sets
#: (values.Leave). Every column it does not write keeps its value.
LEAVE_RUNNING = "updated_at = :now, {claim}{parts}"
#: A heartbeat: the claim stands, its lease is renewed, never past the run's timeout_at (the lease then runs
#: out when the run times out, and the reaper finds it by its lease like any other).
CLAIM_KEPT = "heartbeat_at = :now, lease_expires_at = coalesce(min(:lease_until, timeout_at), :lease_until)"
#: Completed or failed: the claim ends; who ran the job, and when, stays on its record.
CLAIM_ENDED = "claim_token = NULL, lease_expires_at = NULL"
#: Back to pending: every claim column cleared, the job is anybody's again.
CLAIM_DROPPED = ("worker_id = NULL, claimed_at = NULL, claim_token = NULL, lease_expires_at = NULL,"
                 " heartbeat_at = NULL, timeout_at = NULL")
LEAVE_PARTS = {
    "status": "status = :status",
    "spends_retry": "retry_count = retry_count + 1",
    "stalled": "stall_count = stall_count + 1",
    "run_at": "run_at = :run_at",
    "error": "error = :error, error_group = :error_group",
    "progress": "progress = :progress",
    "completes": "result = :result, completed_at = :now",
    # A batch whose jobs each have their own result, in one statement: the value under the job's id.
    "completes_each": "result = json_extract(:results, '$.\"' || jobs.id || '\"'), completed_at = :now",
}

# --- the writes -------------------------------------------------------------------------------------

#: New pending jobs, one row per job. Values here are positional (?): SQLite finds a named value by
#: scanning the statement's list of names, so a 500-job batch (7,000 names) took 72 ms to bind, not 0.5 ms.
#: A lone job takes its turn in the INSERT itself (``turn`` in place of its fair_tag, runner.py), which
#: spares the enqueue a FAIR_TAGS statement.
ENQUEUE = f"INSERT INTO jobs ({{columns}}) VALUES {{rows}} RETURNING {JOB_LIST}"

# --- flow control: what a claim may take of each type --------------------------------------------

#: A type with a limit: its claims count running jobs or recent claims, so they must take turns (FLOW_LOCK).
LIMITED = limited()
#: A type under flow control: paused, or limited. The claim's plain walk of ix_jobs_claim_order takes
#: nothing while one of its types is (the caller then sends CLAIM_PICK with FLOW).
CONTROLLED = f"(paused OR {LIMITED})"
#: Is a type of this claim under flow control? Asked in the plain walk's LIMIT, not its WHERE: SQLite
#: evaluates a WHERE term row by row even when it holds no column (a subquery is not taken for a
#: constant), so a false "nothing is controlled" read every pending job looking for one it would let
#: through (90 ms at 1M); a LIMIT is worked out once, before the walk.
_ANY_CONTROLLED = f"EXISTS (SELECT 1 FROM type_settings WHERE {CONTROLLED} {{types}})"


def _rooms(held: bool) -> str:
    """The CTEs that say how many jobs of each type a claim may take now.

    - ``queues``: the types with pending jobs, each found with one seek of ix_jobs_type_claim_order (a
      loose index scan), so a claim never walks past the pending jobs of a paused or full type;
    - ``limits``: per type, paused or not, and the room each limit leaves: the concurrency limit less its
      running jobs (a running job whose lease ran out counts until it is reaped), the rate limit less the
      claims still inside its window (type_claims). With ``held``, a limited type the caller did not
      take its turn for (``:locked_types``, see FLOW_LOCK) is ``unheld``: its limits are newer than the
      caller's copy of the settings, and it is claimable again once the caller has read them;
    - ``running_keys``: the running jobs per concurrency key of each type with a per-key limit;
    - ``rooms``: per type with room, how many jobs (at most ``:limit``; none when paused or unheld).
    A type without a type_settings row has room ``:limit``.
    """
    unheld = f"coalesce({limited('s')} AND q.type NOT IN (:locked_types), 0)" if held else "0"
    return f"""WITH RECURSIVE
queues(type) AS (
    SELECT (SELECT min(type) FROM jobs INDEXED BY ix_jobs_type_claim_order WHERE status = 'pending' {{types}})
    UNION ALL
    SELECT (SELECT min(type) FROM jobs INDEXED BY ix_jobs_type_claim_order
             WHERE status = 'pending' AND type > queues.type {{types}})
      FROM queues WHERE queues.type IS NOT NULL),
limits AS (
    SELECT q.type, coalesce(s.paused, 0) AS paused, {unheld} AS unheld, s.key_concurrency_limit AS key_limit,
           CASE WHEN s.concurrency_limit IS NOT NULL THEN s.concurrency_limit - (
               SELECT count(*) FROM jobs r WHERE r.type = q.type AND r.status = 'running') END AS concurrency_room,
           CASE WHEN s.rate_limit_jobs IS NOT NULL THEN s.rate_limit_jobs - (
               SELECT coalesce(sum(c.jobs), 0) FROM type_claims c WHERE c.type = q.type AND c.expires_at > :now)
           END AS rate_room
      FROM queues q LEFT JOIN type_settings s ON s.type = q.type
     WHERE q.type IS NOT NULL),
running_keys AS (
    -- A list of types, not a join, and the index named: SQLite then seeks each type's running jobs. As a
    -- join it first read every job to build a Bloom filter for it, or walked the index of keys for the
    -- GROUP BY's order (360,000 steps at 100,000 pending, for no row).
    SELECT r.type, r.concurrency_key, count(*) AS running
      FROM jobs r INDEXED BY ix_jobs_type_status_priority
     WHERE r.type IN (SELECT type FROM limits WHERE key_limit IS NOT NULL) AND r.status = 'running'
     GROUP BY r.type, r.concurrency_key),
rooms AS (
    SELECT type, key_limit, room FROM (
        SELECT type, key_limit, paused, unheld,
               min(coalesce(concurrency_room, :limit), coalesce(rate_room, :limit), :limit) AS room
          FROM limits)
     WHERE NOT paused AND NOT unheld AND room > 0)"""


#: A pending job ``p`` of a type with room (``f``) that its concurrency key's limit does not hold back.
_KEY_HAS_ROOM = ("NOT EXISTS (SELECT 1 FROM running_keys k WHERE k.type = p.type"
                 " AND k.concurrency_key = p.concurrency_key AND k.running >= f.key_limit)")

#: The flow-controlled pick, CLAIM_PICK's ``{flow}``: ``by_type`` walks each type with room along
#: ix_jobs_type_claim_order (one seek per type), passing over the jobs of keys at their limit; ``taken``
#: keeps the first ``room`` of each type, drops those beyond their key's remaining room, and the first
#: :limit of the rest in claim order.
FLOW = f"""{_rooms(held=True)},
by_type AS (
    SELECT j.id, j.type, j.concurrency_key, j.priority, j.fair_tag, f.room, f.key_limit,
           row_number() OVER (PARTITION BY j.type ORDER BY j.priority DESC, j.fair_tag, j.id) AS nth_of_type
      FROM rooms f JOIN jobs j ON j.id IN (
           SELECT p.id FROM jobs p INDEXED BY ix_jobs_type_claim_order
            WHERE p.type = f.type AND p.status = 'pending' AND p.run_at <= :now AND {not_expired('p')}
              AND {_KEY_HAS_ROOM}
            ORDER BY p.priority DESC, p.fair_tag, p.id
            LIMIT :limit)),
taken AS (
    SELECT b.id FROM (
        SELECT b.*, coalesce(k.running, 0) AS key_running,
               row_number() OVER (PARTITION BY b.type, b.concurrency_key
                                  ORDER BY b.priority DESC, b.fair_tag, b.id) AS nth_of_key
          FROM by_type b LEFT JOIN running_keys k ON k.type = b.type AND k.concurrency_key = b.concurrency_key
         WHERE b.nth_of_type <= b.room) b
     WHERE b.key_limit IS NULL OR b.nth_of_key <= b.key_limit - b.key_running
     ORDER BY b.priority DESC, b.fair_tag, b.id
     LIMIT :limit)"""
FLOW_PICK = "UNION ALL SELECT id FROM taken"
#: With FLOW the plain walk takes nothing, whatever type_settings says now (see postgresql.py's WALK_OFF): the
#: flow pick alone covers every type, and two picks could otherwise add up to more than the claim asked for.
WALK_OFF = "OR 1"

#: The claim, in three statements sent back to back in the claim's transaction (sql.claim): CLAIM_PICK picks
#: the next due jobs, CLAIM marks them running, CLAIMED reads them back. Not one UPDATE … RETURNING as on
#: PostgreSQL: with three partial indexes over pending jobs, SQLite's UPDATE … RETURNING cost ~110 µs a claim
#: at 1M pending, the three statements ~40 µs together (sqlite3 alone, no fsync; without RETURNING the same
#: UPDATE cost 45–70 µs). Splitting it is safe because the transaction began IMMEDIATE: nothing else
#: writes between the pick and the update, and CLAIM re-checks the status anyway, so a job can never be
#: handed out twice; CLAIMED reads only the rows that carry this claim's token.
#:
#: Claim order is priority, then fair_tag (concurrency keys take turns: see queue/enqueueing.py), then id.
#: SQLite's planner, left to itself, walks an index on status and sorts every pending job on each claim
#: (a claim at 1M pending took ~40x longer than at 1k), so the pick names its index.
#:
#: Flow control: the plain walk takes nothing while a type of the claim is paused or limited (one look at
#: the small type_settings), and the caller, which knows of such types, fills ``{flow}`` and
#: ``{flow_pick}`` with FLOW and FLOW_PICK: then the pick goes type by type, within each type's room.
#: A caller unaware of a new pause or limit thus claims nothing rather than too much; and it does not stay
#: unaware: ``{stale}`` (STALE) adds a NULL id when the settings changed since the caller's copy was read, and
#: the caller then reads them again and claims anew (sql.claim). The transaction began IMMEDIATE, so the counts
#: the pick reads cannot change before it commits: no other claim can run a job past a limit in between.
CLAIM_PICK = f"""
{{flow}}
SELECT id FROM (SELECT id FROM jobs INDEXED BY ix_jobs_claim_order
                 WHERE {CLAIMABLE}
                 ORDER BY priority DESC, fair_tag, id
                 LIMIT CASE WHEN {_ANY_CONTROLLED} {{walk_off}} THEN 0 ELSE :limit END)
{{flow_pick}}
{{stale}}"""

#: The settings changed since :version, the version of type_settings the caller's copy was read at (a
#: trigger gives type_settings_version a new one with every change; no row: version 0). One primary-key
#: read of a one-row table, asked once per claim.
SETTINGS_CHANGED = "coalesce((SELECT version FROM type_settings_version WHERE id = 1), 0) <> :version"
#: CLAIM_PICK's ``{stale}``: a NULL id says "shaped by an old copy of the settings" (the caller drops the pick).
STALE = f"UNION ALL SELECT NULL WHERE {SETTINGS_CHANGED}"

#: The picked jobs (:ids) marked running for this claim, those still pending; with ``{process_runs}``, only
#: while the claiming worker process is told to run.
CLAIM = f"""
UPDATE jobs
   SET status = '{_CLAIM.to_status}', worker_id = :worker, claim_token = :token, claimed_at = :now,
       heartbeat_at = :now, process_id = :process, timeout_at = {TIMEOUT_AT},
       lease_expires_at = CASE WHEN timeout_seconds IS NULL THEN :lease_until ELSE min(:lease_until, {TIMEOUT_AT}) END,
       updated_at = :now
 WHERE id IN (:ids) AND {status_in(_CLAIM.from_statuses)} {{process_runs}}"""

#: The jobs CLAIM just marked: of the picked ids, those under this claim's token (the runner logs their events).
CLAIMED = f"SELECT {JOB_LIST} FROM jobs WHERE id IN (:ids) AND claim_token = :token"

#: The limits of a claim's limited types (``{types}``: of those it may take), read in the claim's
#: transaction before CLAIM: the caller records what a rate limit counts (RECORD_CLAIMS) by them.
#: On SQLite the transaction's write lock already makes limited claims take turns.
FLOW_LOCK = (f"SELECT type, concurrency_limit, rate_limit_jobs, rate_limit_seconds, key_concurrency_limit"
             f" FROM type_settings WHERE {LIMITED} {{types}} ORDER BY type")

#: A claim of a rate-limited type, counted until :expires_at; and the claims whose window has passed.
RECORD_CLAIMS = "INSERT INTO type_claims (type, jobs, expires_at) VALUES (:type, :jobs, :expires_at)"
FORGET_CLAIMS = "DELETE FROM type_claims WHERE type = :type AND expires_at <= :now"

# Where a new job's turn may start: right after the key's last turn at that priority (any type, any
# status: a key's turns only grow), and not before the head of the type's queue at that priority, the turn
# of its first pending job. A key with nothing waiting thus joins at the head and is taken within one round
# of the keys waiting there. A type with nothing pending has no head: a job then starts at the newest job's
# id, which no turn given so far exceeds (a key's turns grow by one per job, ids at least as fast), so the
# turns of a queue that was idle never start over behind those of keys that were busy before. One seek each.
def turn(job_type: str, key: str, priority: str) -> str:
    """The turn a new job of (``job_type``, concurrency ``key``, ``priority``) takes: the later of the key's
    next turn and the head of the type's queue (or, with nothing pending, the newest job's id). One seek each."""
    return f"""max(
    coalesce(
        (SELECT min(fair_tag) FROM jobs INDEXED BY ix_jobs_type_claim_order WHERE status = 'pending'
            AND type = {job_type} AND priority = {priority}),
        (SELECT max(id) FROM jobs),
        0),
    coalesce((SELECT max(fair_tag) + 1 FROM jobs INDEXED BY ix_jobs_key_turns
               WHERE concurrency_key = {key} AND priority = {priority}), 0))"""


#: ``turn`` for each (type, concurrency key, priority) of an enqueue of several jobs (:groups, a JSON list of
#: [type, key, priority]), in the order asked.
FAIR_TAGS = f"""
WITH asked AS (
    SELECT key AS n, json_extract(value, '$[0]') AS type, json_extract(value, '$[1]') AS concurrency_key,
           json_extract(value, '$[2]') AS priority
      FROM json_each(:groups))
SELECT {turn('a.type', 'a.concurrency_key', 'a.priority')} FROM asked a ORDER BY a.n"""

#: The holding worker's every move: complete, fail (requeue or failed), release, and the heartbeat.
FINISH = f"UPDATE jobs SET {LEAVE_RUNNING}\n WHERE id IN (:ids) AND {HELD_BY} {{ends_alone}}\nRETURNING {JOB_LIST}"
ENDS_ALONE = "AND NOT has_dependents AND NOT watched AND type NOT IN (:limited)"

#: Running jobs taken back without their worker: by the reaper (the claim it found stalled), by the server
#: (a claim whose client hung up before the answer), by an admin's give-back (:token NULL: whatever
#: claim is current).
TAKE_BACK = (f"UPDATE jobs SET {LEAVE_RUNNING}\n WHERE id IN (:ids) AND {status_in(HELD)}"
             f" AND (:token IS NULL OR claim_token = :token)\nRETURNING {JOB_LIST}")

#: A waiting or pending job will not run (run once per from-status, so its event says which); a producer
#: may cancel only its own (:owner), an admin any (:owner NULL).
CANCEL = (f"UPDATE jobs SET status = '{_CANCEL.to_status}', updated_at = :now"
          f" WHERE id = :id AND {status_in(_CANCEL.from_statuses)} AND status = :from_status"
          f" AND (:owner IS NULL OR producer_key_id = :owner) RETURNING {JOB_LIST}")

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
CANCEL_MANY = (f"UPDATE jobs SET status = '{_CANCEL.to_status}', updated_at = :now"
               f" WHERE id IN (:ids) AND {status_in(_CANCEL.from_statuses)} AND status = :from_status"
               f" RETURNING {JOB_LIST}")

#: Pending jobs past their expires_at, cancelled by the reaper (EXPIRABLE finds them by ix_jobs_pending_expiry;
#: EXPIRE re-checks each, so a job claimed in between is left alone).
EXPIRE = (f"UPDATE jobs SET status = '{_EXPIRE.to_status}', updated_at = :now"
          f" WHERE id IN (:ids) AND {status_in(_EXPIRE.from_statuses)} AND expires_at <= :now RETURNING {JOB_LIST}")

#: An admin's "Run now": a pending job scheduled for later (or waiting out a backoff) becomes due now.
RUN_NOW = (f"UPDATE jobs SET run_at = min(run_at, :now), updated_at = :now"
           f" WHERE id = :id AND {status_in(_RUN_NOW.from_statuses)} RETURNING {JOB_LIST}")

# --- dedupe windows (unique_for): one unique_slots row per (type, scope, unique key) -------------------

#: A slot's scope is the id of the key whose window it is, or 0 for a type whose producers share one window
#: (unique_scope "type", queue/enqueueing.py says why producers have their own by default).
#: Take the (type, scope, key) slot for a new job, unless it is held: its job enqueued after :cutoff (now less
#: the new request's unique_for) and not finished. A row back: the slot is this enqueue's (its job_id is set once the
#: job is inserted, in the same transaction); none: answer with the holder's job (UNIQUE_HOLDER). The
#: transaction holds the write lock, so the check and the take are one step.
UNIQUE_TAKE = f"""
INSERT INTO unique_slots (type, scope, unique_key, job_id, enqueued_at)
VALUES (:type, :scope, :key, NULL, :now)
ON CONFLICT (type, scope, unique_key) DO UPDATE SET job_id = NULL, enqueued_at = excluded.enqueued_at
 WHERE unique_slots.enqueued_at <= :cutoff OR unique_slots.job_id IS NULL
    OR EXISTS (SELECT 1 FROM jobs WHERE jobs.id = unique_slots.job_id AND {status_in(FINAL)})
RETURNING type"""
#: One slot: the statements below name it as UNIQUE_TAKE's conflict target does.
_SLOT = "type = :type AND scope = :scope AND unique_key = :key"
#: The job holding a (type, scope, key) slot.
UNIQUE_HOLDER = f"SELECT {JOB_LIST} FROM jobs WHERE id = (SELECT job_id FROM unique_slots WHERE {_SLOT})"
#: The job a taken slot now belongs to.
UNIQUE_SET = f"UPDATE unique_slots SET job_id = :job WHERE {_SLOT}"

#: The event row of each job a write returned, sent right after it (executemany).
LOG_EVENTS = ("INSERT INTO job_events (job_id, event, from_status, to_status, actor, attempt, error, at)"
              " VALUES (?, ?, ?, ?, ?, ?, ?, ?)")

# --- workflows (queue/dependencies.py): waiting jobs and their parents ---------------------------------

#: The parents an enqueue names, marked as having dependents (so their finishing looks for children), with
#: what the enqueue checks: that each exists, who may see it, and whether it is final already.
#: The transaction holds the write lock, so no parent can finish between this read and the commit.
MARK_PARENTS = ("UPDATE jobs SET has_dependents = 1 WHERE id IN (:ids)"
                " RETURNING id, status, producer_key_id")

#: A workflow's edges: ``child_id`` runs after ``parent_id``.
INSERT_DEPENDENCIES = "INSERT INTO job_dependencies (child_id, parent_id) VALUES (?, ?)"

#: The waiting children of jobs that just reached a final state (ix_job_dependencies_parent_child).
WAITING_CHILDREN = (f"SELECT DISTINCT d.child_id FROM job_dependencies d JOIN jobs c ON c.id = d.child_id"
                    f" WHERE d.parent_id IN (:ids) AND c.{status_in(_MET.from_statuses)} ORDER BY d.child_id")

#: A parent ``p`` that holds its waiting child (the updated row, ``jobs``) back: not completed, and, unless
#: the child runs once its parents merely finished, not final either. Sought through the child's edges (the
#: primary key), one parent at a time.
_HOLDS_BACK = (f"p.status <> '{JobStatus.COMPLETED}'"
               f" AND (jobs.run_when = '{RunWhen.COMPLETED}' OR NOT p.{status_in(FINAL)})")

#: Waiting jobs whose every parent is done as their run_when asks: pending now, claimable at their run_at.
PROMOTE = f"""
UPDATE jobs
   SET status = '{_MET.to_status}', updated_at = :now
 WHERE id IN (:ids) AND {status_in(_MET.from_statuses)}
   AND NOT EXISTS (SELECT 1 FROM job_dependencies d JOIN jobs p ON p.id = d.parent_id
                    WHERE d.child_id = jobs.id AND {_HOLDS_BACK})
RETURNING {JOB_LIST}"""

#: Waiting jobs that must run after their parents completed, and the parents that failed or were
#: cancelled: each such child is cancelled (DOOM), naming its first broken parent.
BROKEN_PARENTS = (f"SELECT d.child_id, d.parent_id, p.status FROM job_dependencies d"
                  f" JOIN jobs c ON c.id = d.child_id JOIN jobs p ON p.id = d.parent_id"
                  f" WHERE d.child_id IN (:ids) AND c.{status_in(_DOOMED.from_statuses)}"
                  f" AND c.run_when = '{RunWhen.COMPLETED}' AND p.{status_in(BROKEN)}"
                  f" ORDER BY d.child_id, d.parent_id")
DOOM = (f"UPDATE jobs SET status = '{_DOOMED.to_status}', updated_at = :now"
        f" WHERE id IN (:ids) AND {status_in(_DOOMED.from_statuses)} RETURNING {JOB_LIST}")

#: An admin retried jobs (:ids): their children that a dependency failure cancelled (their last event says
#: so) wait again. The last event is one seek of ix_job_events_job_id per child.
REVIVE = f"""
UPDATE jobs
   SET status = '{_REVIVED.to_status}', updated_at = :now
 WHERE id IN (SELECT d.child_id FROM job_dependencies d WHERE d.parent_id IN (:ids))
   AND {status_in(_REVIVED.from_statuses)}
   AND (SELECT e.event FROM job_events e WHERE e.job_id = jobs.id ORDER BY e.id DESC LIMIT 1)
       = '{_DOOMED.event}'
RETURNING {JOB_LIST}"""

#: A producer waits for this job's end (GET /jobs/{id}?wait=S): its finishing wakes every server process.
WATCH = f"UPDATE jobs SET watched = 1 WHERE id = :id RETURNING {JOB_LIST}"

# --- the reads the operations decide by ---------------------------------------------------------------

#: Is anything claimable? Asked by a waiting claim before it takes the write lock to claim. Under flow
#: control a job is claimable only where its type has room and its key too, so a waiting claim sleeps
#: through a pause or a full limit instead of claiming nothing twice a second. (Always with the flow part:
#: this read is not on a hot path, and it needs no copy of the settings to be right.)
SOMETHING_DUE = f"""
{_rooms(held=False)}
SELECT CASE WHEN {_ANY_CONTROLLED} THEN 0 ELSE EXISTS (SELECT 1 FROM jobs WHERE {CLAIMABLE}) END
    OR EXISTS (SELECT 1 FROM rooms f WHERE EXISTS (
           SELECT 1 FROM jobs p INDEXED BY ix_jobs_type_claim_order
            WHERE p.type = f.type AND p.status = 'pending' AND p.run_at <= :now AND {not_expired('p')}
              AND {_KEY_HAS_ROOM}))"""

#: After a claim that came back short: each type of the claim with due jobs that flow control held back,
#: and the first reason that held them (for queuelog_claims_limited_total).
FLOW_REFUSALS = f"""
{_rooms(held=False)}
SELECT l.type, CASE WHEN l.paused THEN 'paused' WHEN l.concurrency_room <= 0 THEN 'concurrency'
                    WHEN l.rate_room <= 0 THEN 'rate' ELSE 'key_concurrency' END AS reason
  FROM limits l LEFT JOIN rooms f ON f.type = l.type
 WHERE (l.paused OR l.concurrency_room <= 0 OR l.rate_room <= 0 OR (f.type IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM jobs p INDEXED BY ix_jobs_type_claim_order
             WHERE p.type = f.type AND p.status = 'pending' AND p.run_at <= :now AND {not_expired('p')}
              AND {_KEY_HAS_ROOM})))
   AND EXISTS (SELECT 1 FROM jobs p INDEXED BY ix_jobs_type_claim_order
                WHERE p.type = l.type AND p.status = 'pending' AND p.run_at <= :now AND {not_expired('p')})
 ORDER BY l.type"""

#: Pending jobs whose expires_at has passed, for the reaper. The index is named: left to itself, SQLite walks
#: every pending job by id (ix_jobs_status_id) for the ORDER BY, instead of seeking the few that expired.
EXPIRABLE = (f"SELECT {JOB_LIST} FROM jobs INDEXED BY ix_jobs_pending_expiry"
             f" WHERE {status_in(_EXPIRE.from_statuses)} AND expires_at <= :now ORDER BY id")

#: One job, to explain a refusal or to weigh a failure against its retries.
JOB = f"SELECT {JOB_LIST} FROM jobs WHERE id = :id"

#: A producer's jobs under these idempotency keys: an enqueue repeated under a key answers with them.
JOBS_BY_KEY = f"SELECT {JOB_LIST} FROM jobs WHERE producer_key_id = :producer AND idempotency_key IN (:keys)"

#: Running jobs whose lease ran out (or claimed before :claimed_before), for the reaper.
STALLED = (f"SELECT {JOB_LIST} FROM jobs WHERE {status_in(HELD)}"
           " AND (lease_expires_at < :now {claimed_before}) ORDER BY id")
CLAIMED_BEFORE = "OR claimed_at < :claimed_before"
#: CLAIM's ``{process_runs}``, only when the claim names its worker process: that process is the claiming key's and
#: told to run (an admin's quiet or stop: nothing is claimed). A primary-key probe in the claim itself, so
#: naming a process adds no statement; a claim that names none only writes process_id = NULL besides.
PROCESS_RUNS = ("AND EXISTS (SELECT 1 FROM worker_processes"
                " WHERE id = :process AND key_id = :key_id AND command = 'run')")

#: A job that a job still waiting, pending or running depends on is never purged: its child would lose its
#: parent (and its result). Looked up only for jobs that have dependents.
_NEEDED = ("NOT (has_dependents AND EXISTS (SELECT 1 FROM job_dependencies d JOIN jobs c ON c.id = d.child_id"
           f" WHERE d.parent_id = jobs.id AND NOT c.{status_in(FINAL)}))")
#: Purging (`flask purge`): the oldest finished jobs of one status, unchanged since :cutoff, a batch at a
#: time; then their events (first: not every database cascades the foreign key), then the jobs, each
#: re-checked so a job retried in between stays. The purge's transaction holds the write lock throughout.
PURGEABLE = (f"SELECT id FROM jobs WHERE status = :status AND updated_at < :cutoff AND {_NEEDED}"
             " ORDER BY updated_at LIMIT :limit")
PURGE_EVENTS = "DELETE FROM job_events WHERE job_id IN (:ids)"
PURGE_JOBS = (f"DELETE FROM jobs WHERE id IN (:ids) AND status = :status AND updated_at < :cutoff"
              f" AND {_NEEDED}")

#: An admin's delete: those of the ids in a final status go, events first (not every database cascades the
#: foreign key), then the jobs, each re-checked. A running or pending job is never deleted, nor one that a
#: live job still depends on (_NEEDED, as for purge). The transaction holds the write lock throughout.
DELETE_EVENTS = (f"DELETE FROM job_events WHERE job_id IN"
                 f" (SELECT id FROM jobs WHERE id IN (:ids) AND {status_in(DELETABLE)} AND {_NEEDED})")
DELETE_JOBS = (f"DELETE FROM jobs WHERE id IN (:ids) AND {status_in(DELETABLE)} AND {_NEEDED}"
               f" RETURNING {JOB_LIST}")

#: The API key behind a request (live or revoked), on every request.
KEY_BY_DIGEST = f"SELECT {KEY_LIST} FROM api_keys WHERE digest = :digest"

# --- producer quotas (queuelog/quotas.py) ----------------------------------------------------------------
# Sent only for a key with a quota, inside its enqueue's transaction, which began IMMEDIATE: it holds the
# write lock, so no other enqueue of the key runs between the check and the insert. Every ledger read is
# an index seek on (key_id, at, running_total); rows up to :cutoff have left the rate's window.

#: The key's quota state in one read: the ledger's newest running total and its time, the running total
#: before the window's first row, the oldest row's time (rows that left the window are deleted now and
#: then, not on every enqueue), and the key's waiting and pending jobs counted up to :most (LIMIT 0: not
#: counted). The statuses are spelled out: SQLite uses ix_jobs_backlog_producer only for a WHERE saying what
#: its WHERE says.
QUOTA_STATE = f"""
SELECT (SELECT running_total FROM enqueue_ledger WHERE key_id = :key ORDER BY at DESC, running_total DESC LIMIT 1),
       (SELECT at FROM enqueue_ledger WHERE key_id = :key ORDER BY at DESC, running_total DESC LIMIT 1),
       (SELECT running_total - jobs FROM enqueue_ledger WHERE key_id = :key AND at > :cutoff
         ORDER BY at, running_total LIMIT 1),
       (SELECT at FROM enqueue_ledger WHERE key_id = :key ORDER BY at, running_total LIMIT 1),
       (SELECT count(*) FROM (SELECT 1 FROM jobs WHERE producer_key_id = :key AND {status_in(BACKLOG)}
                               LIMIT :most))"""

#: When the window's row holding the key's :total-th job was written: once it leaves, a refused request fits.
QUOTA_FREES_AT = ("SELECT at FROM enqueue_ledger WHERE key_id = :key AND at > :cutoff AND running_total >= :total"
                  " ORDER BY at, running_total LIMIT 1")

#: One enqueue of a rate-limited key: when, how many jobs, and the key's running total with them.
QUOTA_RECORD = "INSERT INTO enqueue_ledger (key_id, at, jobs, running_total) VALUES (:key, :at, :jobs, :total)"

#: Ledger rows that left the key's rate window.
QUOTA_FORGET = "DELETE FROM enqueue_ledger WHERE key_id = :key AND at <= :cutoff"
