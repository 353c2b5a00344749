"""The statements queuelog sends to SQLite that PostgreSQL spells differently, by name; the rest are common.py's.

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

from ..states import BROKEN, BY_ACTION, DELETABLE, HELD, RunWhen
from . import common
from .common import not_expired
from .values import JOB_LIST, limited, status_in

#: The statements and pieces both dialects spell alike (common.py): SQLite's spelling is common.py's own.
_common = common.SPELLED["sqlite"]
_CLAIM = BY_ACTION["claim"]
_CANCEL = BY_ACTION["cancel"]
_EXPIRE = BY_ACTION["expire"]
_RUN_NOW = BY_ACTION["run_now"]
_MET, _DOOMED = BY_ACTION["dependencies_met"], BY_ACTION["dependency_failed"]

# --- the pieces this dialect spells its own way --------------------------------------------------

#: When a run of a job claimed at :now must end (NULL: it has no timeout_seconds). Whole seconds are added to
#: the time without its fraction, and the fraction put back, so the text is exactly what SQLAlchemy stores
#: (SQLite compares times as text; its own date functions keep milliseconds only).
#: Differs: times are text here, so the arithmetic is strftime's (PostgreSQL: interval).
TIMEOUT_AT = (
    "CASE WHEN timeout_seconds IS NULL THEN NULL ELSE strftime('%Y-%m-%d %H:%M:%S', substr(:now, 1, 19),"
    " '+' || timeout_seconds || ' seconds') || substr(:now, 20) END"
)

#: A heartbeat: the claim stands, its lease is renewed, never past the run's timeout_at (the lease then runs
#: out when the run times out, and the reaper finds it by its lease like any other).
#: Differs: min() of a NULL is NULL here, hence coalesce (PostgreSQL: LEAST).
CLAIM_KEPT = "heartbeat_at = :now, lease_expires_at = coalesce(min(:lease_until, timeout_at), :lease_until)"
#: Differs: completes_each reads the job's result with json_extract (PostgreSQL: jsonb).
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

# --- flow control: what a claim may take of each type --------------------------------------------

#: Is a type of this claim under flow control? Asked in the plain walk's LIMIT, not its WHERE: SQLite
#: evaluates a WHERE term row by row even when it holds no column (a subquery is not taken for a
#: constant), so a false "nothing is controlled" read every pending job looking for one it would let
#: through (a scan that grows with the backlog); a LIMIT is worked out once, before the walk.
_ANY_CONTROLLED = f"EXISTS (SELECT 1 FROM type_settings WHERE {_common.CONTROLLED} {{types}})"


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
_KEY_HAS_ROOM = (
    "NOT EXISTS (SELECT 1 FROM running_keys k WHERE k.type = p.type"
    " AND k.concurrency_key = p.concurrency_key AND k.running >= f.key_limit)"
)

#: The flow-controlled pick, CLAIM_PICK's ``{flow}``: ``by_type`` walks each type with room along
#: ix_jobs_type_claim_order (one seek per type), passing over the jobs of keys at their limit; ``taken``
#: keeps the first ``room`` of each type, drops those beyond their key's remaining room, and the first
#: :limit of the rest in claim order.
#: Differs: INDEXED BY and an IN pick, no row locks (PostgreSQL: LATERAL, FOR UPDATE SKIP LOCKED).
FLOW = f"""{_rooms(held=True)},
by_type AS (
    SELECT j.id, j.type, j.concurrency_key, j.priority, j.fair_tag, f.room, f.key_limit,
           row_number() OVER (PARTITION BY j.type ORDER BY j.priority DESC, j.fair_tag, j.id) AS nth_of_type
      FROM rooms f JOIN jobs j ON j.id IN (
           SELECT p.id FROM jobs p INDEXED BY ix_jobs_type_claim_order
            WHERE p.type = f.type AND p.status = 'pending' AND p.run_at <= :now AND {not_expired("p")}
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
#: With FLOW the plain walk takes nothing, whatever type_settings says now (see postgresql.py's WALK_OFF): the
#: flow pick alone covers every type, and two picks could otherwise add up to more than the claim asked for.
#: Differs: SQLite's walk is switched off in its LIMIT (PostgreSQL's, in its WHERE).
WALK_OFF = "OR 1"

#: The claim, in three statements sent back to back in the claim's transaction (sql.claim): CLAIM_PICK picks
#: the next due jobs, CLAIM marks them running, CLAIMED reads them back. Not one UPDATE … RETURNING as on
#: PostgreSQL: with three partial indexes over pending jobs, SQLite's UPDATE … RETURNING cost a claim more
#: than the three statements together (RETURNING itself adds to the UPDATE's cost there). Splitting it is
#: safe because the transaction began IMMEDIATE: nothing else
#: writes between the pick and the update, and CLAIM re-checks the status anyway, so a job can never be
#: handed out twice; CLAIMED reads only the rows that carry this claim's token.
#:
#: Claim order is priority, then fair_tag (concurrency keys take turns: see queue/enqueueing.py), then id.
#: SQLite's planner, left to itself, walks an index on status and sorts every pending job on each claim
#: (a claim's cost then grows with the backlog), so the pick names its index.
#:
#: Flow control: the plain walk takes nothing while a type of the claim is paused or limited (one look at
#: the small type_settings), and the caller, which knows of such types, fills ``{flow}`` and
#: ``{flow_pick}`` with FLOW and FLOW_PICK: then the pick goes type by type, within each type's room.
#: A caller unaware of a new pause or limit thus claims nothing rather than too much; and it does not stay
#: unaware: ``{stale}`` (STALE) adds a NULL id when the settings changed since the caller's copy was read, and
#: the caller then reads them again and claims anew (sql.claim). The transaction began IMMEDIATE, so the counts
#: the pick reads cannot change before it commits: no other claim can run a job past a limit in between.
#: A template: the runner fills its slots; queuelog/sql/rendered/claim.sqlite.sql is the claim as sent.
CLAIM_PICK = f"""
{{flow}}
SELECT id FROM (SELECT id FROM jobs INDEXED BY ix_jobs_claim_order
                 WHERE {_common.CLAIMABLE}
                 ORDER BY priority DESC, fair_tag, id
                 LIMIT CASE WHEN {_ANY_CONTROLLED} {{walk_off}} THEN 0 ELSE :limit END)
{{flow_pick}}
{{stale}}"""

#: CLAIM_PICK's ``{stale}``: a NULL id says "shaped by an old copy of the settings" (the caller drops the pick).
#: Differs: one NULL id for CLAIM_PICK (PostgreSQL: a row of NULLs for LOGGED).
STALE = f"UNION ALL SELECT NULL WHERE {_common.SETTINGS_CHANGED}"

#: The picked jobs (:ids) marked running for this claim, those still pending; with ``{process_runs}``, only
#: while the claiming worker process is told to run.
#: Differs: marks the ids CLAIM_PICK picked (PostgreSQL picks and marks in one statement).
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
#: Differs: no FOR UPDATE: the write lock already makes claims take turns.
FLOW_LOCK = (
    f"SELECT type, concurrency_limit, rate_limit_jobs, rate_limit_seconds, key_concurrency_limit"
    f" FROM type_settings WHERE {_common.LIMITED} {{types}} ORDER BY type"
)


def turn(job_type: str, key: str, priority: str, floor: str) -> str:
    """The turn a new job of (``job_type``, concurrency ``key``, ``priority``) takes: the later of the key's
    next turn and the head of the type's queue (or, with nothing pending, the newest job's id), the head read
    from ``floor`` up (queue/served_turns.py: SQLite keeps no dead entries, but both place a job alike). One
    seek each."""
    return f"""max(
    coalesce(
        (SELECT min(fair_tag) FROM jobs INDEXED BY ix_jobs_type_claim_order WHERE status = 'pending'
            AND type = {job_type} AND priority = {priority} AND fair_tag >= {floor}),
        (SELECT max(id) FROM jobs),
        0),
    coalesce((SELECT max(fair_tag) + 1 FROM jobs INDEXED BY ix_jobs_key_turns
               WHERE concurrency_key = {key} AND priority = {priority}), 0))"""


#: ``turn`` for each (type, concurrency key, priority) of an enqueue of several jobs (:groups, a JSON list of
#: [type, key, priority, floor]), in the order asked.
#: Differs: json_each (PostgreSQL: jsonb_array_elements).
FAIR_TAGS = f"""
WITH asked AS (
    SELECT key AS n, json_extract(value, '$[0]') AS type, json_extract(value, '$[1]') AS concurrency_key,
           json_extract(value, '$[2]') AS priority, json_extract(value, '$[3]') AS floor
      FROM json_each(:groups))
SELECT {turn("a.type", "a.concurrency_key", "a.priority", "a.floor")} FROM asked a ORDER BY a.n"""

#: Differs: NOT IN a list (PostgreSQL: ``<> ALL`` of a typed array).
ENDS_ALONE = "AND NOT has_dependents AND NOT watched AND type NOT IN (:limited)"

#: Running jobs taken back without their worker: by the reaper (the claim it found stalled), by the server
#: (a claim whose client hung up before the answer), by an admin's give-back (:token NULL: whatever
#: claim is current).
#: Differs: the NULL token needs no cast here (PostgreSQL casts it).
TAKE_BACK = (
    f"UPDATE jobs SET {_common.LEAVE_RUNNING}\n WHERE id IN (:ids) AND {status_in(HELD)}"
    f" AND (:token IS NULL OR claim_token = :token)\nRETURNING {JOB_LIST}"
)

#: A waiting or pending job will not run (run once per from-status, so its event says which); a producer
#: may cancel only its own (:owner), an admin any (:owner NULL).
#: Differs: the NULL owner needs no cast here (PostgreSQL casts it).
CANCEL = (
    f"UPDATE jobs SET status = '{_CANCEL.to_status}', updated_at = :now"
    f" WHERE id = :id AND {status_in(_CANCEL.from_statuses)} AND status = :from_status"
    f" AND (:owner IS NULL OR producer_key_id = :owner) RETURNING {JOB_LIST}"
)

#: An admin's "Run now": a pending job scheduled for later (or waiting out a backoff) becomes due now.
#: Differs: min() (PostgreSQL: LEAST).
RUN_NOW = (
    f"UPDATE jobs SET run_at = min(run_at, :now), updated_at = :now"
    f" WHERE id = :id AND {status_in(_RUN_NOW.from_statuses)} RETURNING {JOB_LIST}"
)

# --- the event rows -----------------------------------------------------------------------------------

#: The event row of each job a write returned, sent right after it (executemany).
LOG_EVENTS = (
    "INSERT INTO job_events (job_id, event, from_status, to_status, actor, attempt, error, at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)

# --- workflows (queue/dependencies.py): waiting jobs and their parents ---------------------------------

#: The parents an enqueue names, marked as having dependents (so their finishing looks for children), with
#: what the enqueue checks: that each exists, who may see it, and whether it is final already.
#: The transaction holds the write lock, so no parent can finish between this read and the commit.
#: Differs: no row locks: the write lock holds the parents.
MARK_PARENTS = "UPDATE jobs SET has_dependents = 1 WHERE id IN (:ids) RETURNING id, status, producer_key_id"

#: A workflow's edges: ``child_id`` runs after ``parent_id``.
#: Differs: SQLite's positional ? (psycopg: %s).
INSERT_DEPENDENCIES = "INSERT INTO job_dependencies (child_id, parent_id) VALUES (?, ?)"

#: The waiting children of jobs that just reached a final state (ix_job_dependencies_parent_child).
#: Differs: no row locks: the write lock holds the children.
WAITING_CHILDREN = (
    f"SELECT DISTINCT d.child_id FROM job_dependencies d JOIN jobs c ON c.id = d.child_id"
    f" WHERE d.parent_id IN (:ids) AND c.{status_in(_MET.from_statuses)} ORDER BY d.child_id"
)

#: Waiting jobs that must run after their parents completed, and the parents that failed or were
#: cancelled: each such child is cancelled (DOOM), naming its first broken parent.
#: Differs: the status compared as the bare column, as SQLite's index wants it.
BROKEN_PARENTS = (
    f"SELECT d.child_id, d.parent_id, p.status FROM job_dependencies d"
    f" JOIN jobs c ON c.id = d.child_id JOIN jobs p ON p.id = d.parent_id"
    f" WHERE d.child_id IN (:ids) AND c.{status_in(_DOOMED.from_statuses)}"
    f" AND c.run_when = '{RunWhen.COMPLETED}' AND p.{status_in(BROKEN)}"
    f" ORDER BY d.child_id, d.parent_id"
)

#: A producer waits for this job's end (GET /jobs/{id}?wait=S): its finishing wakes every server process.
#: Differs: an integer for true (PostgreSQL: a boolean).
WATCH = f"UPDATE jobs SET watched = 1 WHERE id = :id RETURNING {JOB_LIST}"

# --- the reads the operations decide by ---------------------------------------------------------------

#: Is anything claimable? Asked by a waiting claim before it takes the write lock to claim. Under flow
#: control a job is claimable only where its type has room and its key too, so a waiting claim sleeps
#: through a pause or a full limit instead of claiming nothing twice a second. (Always with the flow part:
#: this read is not on a hot path, and it needs no copy of the settings to be right.)
#: Differs: CASE and INDEXED BY for SQLite's planner (PostgreSQL: scalar subqueries).
SOMETHING_DUE = f"""
{_rooms(held=False)}
SELECT CASE WHEN {_ANY_CONTROLLED} THEN 0 ELSE EXISTS (SELECT 1 FROM jobs WHERE {_common.CLAIMABLE}) END
    OR EXISTS (SELECT 1 FROM rooms f WHERE EXISTS (
           SELECT 1 FROM jobs p INDEXED BY ix_jobs_type_claim_order
            WHERE p.type = f.type AND p.status = 'pending' AND p.run_at <= :now AND {not_expired("p")}
              AND {_KEY_HAS_ROOM}))"""

#: After a claim that came back short: each type of the claim with due jobs that flow control held back,
#: and the first reason that held them (for queuelog_claims_limited_total).
#: Differs: EXISTS and INDEXED BY for SQLite's planner (PostgreSQL: scalar subqueries).
FLOW_REFUSALS = f"""
{_rooms(held=False)}
SELECT l.type, CASE WHEN l.paused THEN 'paused' WHEN l.concurrency_room <= 0 THEN 'concurrency'
                    WHEN l.rate_room <= 0 THEN 'rate' ELSE 'key_concurrency' END AS reason
  FROM limits l LEFT JOIN rooms f ON f.type = l.type
 WHERE (l.paused OR l.concurrency_room <= 0 OR l.rate_room <= 0 OR (f.type IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM jobs p INDEXED BY ix_jobs_type_claim_order
             WHERE p.type = f.type AND p.status = 'pending' AND p.run_at <= :now AND {not_expired("p")}
              AND {_KEY_HAS_ROOM})))
   AND EXISTS (SELECT 1 FROM jobs p INDEXED BY ix_jobs_type_claim_order
                WHERE p.type = l.type AND p.status = 'pending' AND p.run_at <= :now AND {not_expired("p")})
 ORDER BY l.type"""

#: Pending jobs whose expires_at has passed, for the reaper. The index is named: left to itself, SQLite walks
#: every pending job by id (ix_jobs_status_id) for the ORDER BY, instead of seeking the few that expired.
#: Differs: the index named, no row locks (PostgreSQL: FOR UPDATE SKIP LOCKED).
EXPIRABLE = (
    f"SELECT {JOB_LIST} FROM jobs INDEXED BY ix_jobs_pending_expiry"
    f" WHERE {status_in(_EXPIRE.from_statuses)} AND expires_at <= :now ORDER BY id"
)

#: Running jobs whose lease ran out (or claimed before :claimed_before), for the reaper.
#: Differs: no row locks: one reaper writes at a time (PostgreSQL: SKIP LOCKED).
STALLED = (
    f"SELECT {JOB_LIST} FROM jobs WHERE {status_in(HELD)} AND (lease_expires_at < :now {{claimed_before}}) ORDER BY id"
)

#: Purging (`flask purge`): the oldest finished jobs of one status, unchanged since :cutoff, a batch at a
#: time; then their events (first: not every database cascades the foreign key), then the jobs, each
#: re-checked so a job retried in between stays. The purge's transaction holds the write lock throughout.
#: Differs: no row locks: the write lock holds the batch.
PURGEABLE = (
    f"SELECT id FROM jobs WHERE status = :status AND updated_at < :cutoff AND {_common.NEEDED}"
    " ORDER BY updated_at LIMIT :limit"
)

#: An admin's delete: those of the ids in a final status go, events first (not every database cascades the
#: foreign key), then the jobs, each re-checked. A running or pending job is never deleted, nor one that a
#: live job still depends on (_NEEDED, as for purge). The transaction holds the write lock throughout.
#: Differs: no row locks: the write lock holds the jobs.
DELETE_EVENTS = (
    f"DELETE FROM job_events WHERE job_id IN"
    f" (SELECT id FROM jobs WHERE id IN (:ids) AND {status_in(DELETABLE)} AND {_common.NEEDED})"
)
