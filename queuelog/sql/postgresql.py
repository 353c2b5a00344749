"""Every statement queuelog sends to PostgreSQL about jobs, by name; sqlite.py holds the same names.

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
from ..states import BACKLOG, BROKEN, BY_ACTION, DELETABLE, FINAL, HELD, RETRYABLE, JobStatus, RunWhen, names
from .values import JOB_COLUMNS, JOB_LIST, KEY_LIST, limited, status_in

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
    return f"({column} IS NULL OR {column} > %(now)s)"


#: A job a claim may take now: pending, due, and not expired. The claim picks by it; a waiting claim's
#: due-check asks it.
CLAIMABLE = f"{status_in(_CLAIM.from_statuses)} AND run_at <= %(now)s AND {not_expired()} {{types}}"
TYPES = "AND type = ANY(%(types)s)"

#: When a run of a job claimed at now must end (NULL: it has no timeout_seconds).
TIMEOUT_AT = "%(now)s + timeout_seconds * interval '1 second'"

#: The holding worker's guard: running, held by this worker key, under the claim it was given, and not past
#: the run's timeout: a late complete, fail or heartbeat is refused, and the reaper fails the run as timed out.
HELD_BY = (f"{status_in(HELD)} AND worker_id = %(worker)s AND claim_token = %(token)s"
           " AND (timeout_at IS NULL OR timeout_at > %(now)s)")

#: What a move out of running writes (a heartbeat too, which stays running): the time, what becomes of the
#: worker's claim (one of the three below, by values.Claim), and those LEAVE_PARTS the move sets
#: (values.Leave). Every column it does not write keeps its value.
LEAVE_RUNNING = "updated_at = %(now)s, {claim}{parts}"
#: A heartbeat: the claim stands, its lease is renewed, never past the run's timeout_at (the lease then runs
#: out when the run times out, and the reaper finds it by its lease like any other). LEAST skips a NULL.
CLAIM_KEPT = "heartbeat_at = %(now)s, lease_expires_at = LEAST(%(lease_until)s, timeout_at)"
#: Completed or failed: the claim ends; who ran the job, and when, stays on its record.
CLAIM_ENDED = "claim_token = NULL, lease_expires_at = NULL"
#: Back to pending: every claim column cleared, the job is anybody's again.
CLAIM_DROPPED = ("worker_id = NULL, claimed_at = NULL, claim_token = NULL, lease_expires_at = NULL,"
                 " heartbeat_at = NULL, timeout_at = NULL")
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

# --- the writes -------------------------------------------------------------------------------------

#: New pending jobs, one row per job. Values are named (%(v0)s, …) because LOGGED names its own.
ENQUEUE = f"INSERT INTO jobs ({{columns}}) VALUES {{rows}} RETURNING {JOB_LIST}"

# --- flow control: what a claim may take of each type --------------------------------------------

#: A type with a limit: its claims count running jobs or recent claims, so they must take turns (FLOW_LOCK).
LIMITED = limited()
#: A type under flow control: paused, or limited. The claim's plain walk of ix_jobs_claim_order takes
#: nothing while one of its types is (the caller then sends CLAIM with FLOW).
CONTROLLED = f"(paused OR {LIMITED})"
_NONE_CONTROLLED = f"NOT EXISTS (SELECT 1 FROM type_settings WHERE {CONTROLLED} {{types}})"
#: A type whose settings changed after the claim's time (``%(now)s``) gives the claim nothing. The claim reads
#: its time before the statement takes its snapshot, and between the two a busy server process can spend
#: a long time when it is busy (long-polls and producers competing for a few cores). Without this, a
#: claim timed while a type was paused could see the resume and take a job, and the event log would show
#: it claimed during the pause. With it, every claim is timed after each change it obeyed; a claim refused
#: this way began before the change and its long-poll, already woken by the change, claims again at once.
#: SQLite needs no such guard: a claim reads its time holding the write lock, which a change also takes.
_CHANGED_SINCE = "s.updated_at > %(now)s"
_NONE_CONTROLLED_OR_CHANGED = (f"NOT EXISTS (SELECT 1 FROM type_settings s"
                               f" WHERE ({CONTROLLED} OR {_CHANGED_SINCE}) {{types}})")


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
    SELECT (SELECT min(type) FROM jobs WHERE status = 'pending' {{types}})
    UNION ALL
    SELECT (SELECT min(type) FROM jobs WHERE status = 'pending' AND type > queues.type {{types}})
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
    return (f"(SELECT true FROM jobs p WHERE p.type = {queue}.type AND p.status = 'pending'"
            f" AND p.run_at <= %(now)s AND {not_expired('p')}{key}"
            " ORDER BY p.priority DESC, p.fair_tag, p.id LIMIT 1)")


#: The flow-controlled pick, CLAIM's ``{flow}``: ``by_type`` walks each type with room along
#: ix_jobs_type_claim_order (one seek per type; the LIMIT is the claim's own, so the planner sees a short
#: ordered walk), passing over the jobs of keys at their limit; ``taken`` keeps the first ``room`` of each
#: type, drops those beyond their key's remaining room, and the first {limit} of the rest in claim order.
FLOW = f"""{_rooms(held=True)},
by_type AS (
    SELECT j.*, f.room, f.key_limit,
           row_number() OVER (PARTITION BY j.type ORDER BY j.priority DESC, j.fair_tag, j.id) AS nth_of_type
      FROM rooms f CROSS JOIN LATERAL (
           SELECT p.id, p.type, p.concurrency_key, p.priority, p.fair_tag FROM jobs p
            WHERE p.type = f.type AND p.status = 'pending' AND p.run_at <= %(now)s AND {not_expired('p')}
              AND {_KEY_HAS_ROOM}
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
FLOW_PICK = "UNION ALL SELECT id FROM taken"
#: With FLOW the plain walk takes nothing, whatever type_settings says now: the caller's copy of the settings
#: may be older than a lifted limit, and then both picks would run, each ``{limit}`` jobs long (the walk's
#: rows are locked, so the flow pick's SKIP LOCKED passes over them to the next ones): a claim of one job
#: marked two running. The flow pick alone covers every type (a type without settings has room ``{limit}``).
WALK_OFF = "AND false"

#: The settings changed since %(version)s, the version of type_settings the caller's copy was read at (a
#: trigger gives type_settings_version a new one with every change, in the changing transaction; no row:
#: version 0). One primary-key read of a one-row table.
SETTINGS_CHANGED = "coalesce((SELECT version FROM type_settings_version WHERE id = 1), 0) <> %(version)s"
#: LOGGED's ``{stale}`` for CLAIM: a row of NULLs (no job has a NULL id) says "shaped by an old copy of the
#: settings: took nothing".
STALE = f"UNION ALL SELECT {', '.join(['NULL'] * len(JOB_COLUMNS))} WHERE {SETTINGS_CHANGED}"

#: The claim: pick the next due jobs in claim order and mark them running, in one statement.
#: Claim order is priority, then fair_tag (concurrency keys take turns: see queue/enqueueing.py), then id.
#: FOR UPDATE SKIP LOCKED lets concurrent claimers pass each other's rows instead of queueing behind
#: them, and no row is locked by two claimers. The pick is a MATERIALIZED CTE, run exactly once: as a
#: plain ``IN (subquery)`` the planner may choose a nested-loop semi join that re-runs the LIMIT
#: subquery for every pending row; each rerun skips the rows this statement already updated and
#: yields the next one, so a single claim of one job marked every due job running. The UPDATE
#: re-checks the status itself, so a job can never be handed out twice.
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
CLAIM = f"""
WITH RECURSIVE {{flow}}
picked AS MATERIALIZED (
    SELECT id FROM (SELECT id FROM jobs
                     WHERE {CLAIMABLE} AND {_NONE_CONTROLLED_OR_CHANGED} {{walk_off}}
                     ORDER BY priority DESC, fair_tag, id
                     LIMIT {{limit}}
                       FOR UPDATE SKIP LOCKED) walked
    {{flow_pick}})
UPDATE jobs
   SET status = '{_CLAIM.to_status}', worker_id = %(worker)s, claim_token = %(token)s, claimed_at = %(now)s,
       heartbeat_at = %(now)s, process_id = %(process)s, timeout_at = {TIMEOUT_AT},
       lease_expires_at = LEAST(%(lease_until)s, {TIMEOUT_AT}), updated_at = %(now)s
 WHERE NOT {SETTINGS_CHANGED} AND {status_in(_CLAIM.from_statuses)} {{process_runs}}
   AND id IN (SELECT id FROM picked)
RETURNING {JOB_LIST}"""

#: The limits of a claim's limited types (``{types}``: of those it may take), locked for the rest of the
#: claim's transaction, in one order so that two claims never wait for each other in a circle. Sent
#: before CLAIM, which then counts with a snapshot taken after the lock was granted (see CLAIM).
FLOW_LOCK = (f"SELECT type, concurrency_limit, rate_limit_jobs, rate_limit_seconds, key_concurrency_limit"
             f" FROM type_settings WHERE {LIMITED} {{types}} ORDER BY type FOR UPDATE")

#: A claim of a rate-limited type, counted until expires_at; and the claims whose window has passed.
RECORD_CLAIMS = "INSERT INTO type_claims (type, jobs, expires_at) VALUES (%(type)s, %(jobs)s, %(expires_at)s)"
FORGET_CLAIMS = "DELETE FROM type_claims WHERE type = %(type)s AND expires_at <= %(now)s"

# Where a new job's turn may start: right after the key's last turn at that priority (any type, any
# status: a key's turns only grow), and not before the head of the type's queue at that priority, the turn
# of its first pending job. A key with nothing waiting thus joins at the head and is taken within one round
# of the keys waiting there. A type with nothing pending has no head: a job then starts at the newest job's
# id, which no turn given so far exceeds (a key's turns grow by one per job, ids at least as fast), so the
# turns of a queue that was idle never start over behind those of keys that were busy before. One seek each.
def turn(job_type: str, key: str, priority: str) -> str:
    """The turn a new job of (``job_type``, concurrency ``key``, ``priority``) takes: the later of the key's
    next turn and the head of the type's queue (or, with nothing pending, the newest job's id). One seek each.

    Cast to the columns' types: a lone row's INSERT passes its own values, which PostgreSQL must type alike
    in both places."""
    job_type, key, priority = f"({job_type})::varchar", f"({key})::varchar", f"({priority})::integer"
    return f"""GREATEST(
    COALESCE(
        (SELECT min(fair_tag) FROM jobs WHERE status = 'pending' AND type = {job_type} AND priority = {priority}),
        (SELECT max(id) FROM jobs),
        0),
    (SELECT max(fair_tag) + 1 FROM jobs WHERE concurrency_key = {key} AND priority = {priority}))"""


#: ``turn`` for each (type, concurrency key, priority) of an enqueue of several jobs (groups, a JSON list of
#: [type, key, priority]), in the order asked.
FAIR_TAGS = f"""
WITH asked AS (
    SELECT n, item->>0 AS type, item->>1 AS concurrency_key, (item->>2)::integer AS priority
      FROM jsonb_array_elements(%(groups)s::jsonb) WITH ORDINALITY AS g(item, n))
SELECT {turn('a.type', 'a.concurrency_key', 'a.priority')}
  FROM asked a ORDER BY a.n"""

#: The holding worker's every move: complete, fail (requeue or failed), release, and the heartbeat.
FINISH = f"UPDATE jobs SET {LEAVE_RUNNING}\n WHERE id = ANY(%(ids)s) AND {HELD_BY} {{ends_alone}}\nRETURNING {JOB_LIST}"
#: FINISH's optional piece: only a job whose move needs nothing after it (no children to decide, no producer
#: waiting for it, not of a limited type whose waiting claims its freed slot must wake), so that the move can
#: be a statement on its own.
ENDS_ALONE = "AND NOT has_dependents AND NOT watched AND type <> ALL(%(limited)s::text[])"

#: Running jobs taken back without their worker: by the reaper (the claim it found stalled), by the server
#: (a claim whose client hung up before the answer), by an admin's give-back (%(token)s NULL: whatever
#: claim is current).
TAKE_BACK = (f"UPDATE jobs SET {LEAVE_RUNNING}\n WHERE id = ANY(%(ids)s) AND {status_in(HELD)}"
             f" AND (%(token)s::text IS NULL OR claim_token = %(token)s)\nRETURNING {JOB_LIST}")

#: A waiting or pending job will not run (run once per from-status, so its event says which); a producer
#: may cancel only its own (owner), an admin any (owner NULL).
CANCEL = (f"UPDATE jobs SET status = '{_CANCEL.to_status}', updated_at = %(now)s"
          f" WHERE id = %(id)s AND {status_in(_CANCEL.from_statuses)} AND status = %(from_status)s"
          f" AND (%(owner)s::integer IS NULL OR producer_key_id = %(owner)s) RETURNING {JOB_LIST}")

#: Failed or cancelled jobs back to pending with a clean record. Run once per from-status
#: (%(from_status)s), so each event row says where its job came from.
RETRY = f"""
UPDATE jobs
   SET status = '{_RETRY.to_status}', retry_count = 0, stall_count = 0, worker_id = NULL, claimed_at = NULL,
       claim_token = NULL, lease_expires_at = NULL, heartbeat_at = NULL, completed_at = NULL, timeout_at = NULL,
       run_at = %(now)s, updated_at = %(now)s
 WHERE id = ANY(%(ids)s) AND {status_in(RETRYABLE)} AND status = %(from_status)s
RETURNING {JOB_LIST}"""

#: An admin's bulk cancel: those of the ids that are pending, marked cancelled (CANCEL for one job).
CANCEL_MANY = (f"UPDATE jobs SET status = '{_CANCEL.to_status}', updated_at = %(now)s"
               f" WHERE id = ANY(%(ids)s) AND {status_in(_CANCEL.from_statuses)} AND status = %(from_status)s"
               f" RETURNING {JOB_LIST}")

#: Pending jobs past their expires_at, cancelled by the reaper (EXPIRABLE found and locked them; each is
#: re-checked, so a job claimed in between is left alone).
EXPIRE = (f"UPDATE jobs SET status = '{_EXPIRE.to_status}', updated_at = %(now)s"
          f" WHERE id = ANY(%(ids)s) AND {status_in(_EXPIRE.from_statuses)} AND expires_at <= %(now)s"
          f" RETURNING {JOB_LIST}")

#: An admin's "Run now": a pending job scheduled for later (or waiting out a backoff) becomes due now.
RUN_NOW = (f"UPDATE jobs SET run_at = LEAST(run_at, %(now)s), updated_at = %(now)s"
           f" WHERE id = %(id)s AND {status_in(_RUN_NOW.from_statuses)} RETURNING {JOB_LIST}")

# --- dedupe windows (unique_for): one unique_slots row per (type, scope, unique key) -------------------

#: A slot's scope is the id of the key whose window it is, or 0 for a type whose producers share one window
#: (unique_scope "type", queue/enqueueing.py says why producers have their own by default).
#: Take the (type, scope, key) slot for a new job, unless it is held: its job enqueued after cutoff (now less
#: the new request's unique_for) and not finished. A row back: the slot is this enqueue's (its job_id is set once the
#: job is inserted, in the same transaction); none: answer with the holder's job (UNIQUE_HOLDER).
#: Why two enqueues of one key on any number of servers never both create a job: the primary key makes the
#: second INSERT wait for the first's transaction, then take the DO UPDATE path on the row as committed, which
#: it locks and re-checks. The job that the first just inserted is not in the second's snapshot, so the
#: EXISTS (finished) reads false and the slot counts as held: a race errs towards answering with that job.
UNIQUE_TAKE = f"""
INSERT INTO unique_slots (type, scope, unique_key, job_id, enqueued_at)
VALUES (%(type)s, %(scope)s, %(key)s, NULL, %(now)s)
ON CONFLICT (type, scope, unique_key) DO UPDATE SET job_id = NULL, enqueued_at = excluded.enqueued_at
 WHERE unique_slots.enqueued_at <= %(cutoff)s OR unique_slots.job_id IS NULL
    OR EXISTS (SELECT 1 FROM jobs WHERE jobs.id = unique_slots.job_id AND {status_in(FINAL)})
RETURNING type"""
#: One slot: the statements below name it as UNIQUE_TAKE's conflict target does.
_SLOT = "type = %(type)s AND scope = %(scope)s AND unique_key = %(key)s"
#: The job holding a (type, scope, key) slot.
UNIQUE_HOLDER = f"SELECT {JOB_LIST} FROM jobs WHERE id = (SELECT job_id FROM unique_slots WHERE {_SLOT})"
#: The job a taken slot now belongs to.
UNIQUE_SET = f"UPDATE unique_slots SET job_id = %(job)s WHERE {_SLOT}"

_LOGGING = ("WITH changed AS ({statement}), "
            "logged AS (INSERT INTO job_events (job_id, event, from_status, to_status, actor, attempt, error, at) "
            "SELECT id, %(log_event)s, %(log_from)s, status, %(log_actor)s, retry_count, %(log_error)s, %(log_at)s "
            "FROM changed)")
#: A write and the event row of each job it returns, as one statement (a data-modifying CTE).
LOGGED = f"{_LOGGING} SELECT {JOB_LIST} FROM changed {{stale}}"
#: LOGGED for new jobs, which also wakes the waiting claims of every server process: the NOTIFY that
#: ``wakeup.jobs_ready`` would send as a statement of its own, without its round trip. Like NOTIFY it is
#: delivered at commit. It is sent once the jobs exist (no row to join, no notification).
LOGGED_AND_ANNOUNCED = (f"{_LOGGING}, announced AS (SELECT pg_notify('{CHANNEL}', '')) "
                        f"SELECT {JOB_LIST} FROM changed CROSS JOIN announced")

# --- workflows (queue/dependencies.py): waiting jobs and their parents ---------------------------------

#: The parents an enqueue names, marked as having dependents (so their finishing looks for children), with
#: what the enqueue checks: that each exists, who may see it, and whether it is final already.
#: Each parent's row is locked in id order (two enqueues naming the same parents cannot deadlock), so
#: a parent's finishing, which updates that row, either commits before this read (the enqueue sees it
#: final) or waits for the enqueue to commit (and then finds the new child).
MARK_PARENTS = ("UPDATE jobs SET has_dependents = true"
                " WHERE id IN (SELECT id FROM jobs WHERE id = ANY(%(ids)s) ORDER BY id FOR UPDATE)"
                " RETURNING id, status, producer_key_id")

#: A workflow's edges: ``child_id`` runs after ``parent_id``.
INSERT_DEPENDENCIES = "INSERT INTO job_dependencies (child_id, parent_id) VALUES (%s, %s)"

#: The waiting children of jobs that just reached a final state (ix_job_dependencies_parent_child), each
#: locked, in id order, until the transaction ends. Two parents of one child finishing at once would
#: otherwise each see the other still unfinished (neither has committed) and leave the child waiting for
#: ever; locked, the second decides only once the first has committed, and sees it (READ COMMITTED takes
#: a new snapshot per statement, and re-checks ``waiting`` on a row it had to wait for).
WAITING_CHILDREN = (f"SELECT c.id FROM jobs c"
                    f" WHERE c.id IN (SELECT d.child_id FROM job_dependencies d WHERE d.parent_id = ANY(%(ids)s))"
                    f" AND c.{status_in(_MET.from_statuses)} ORDER BY c.id FOR UPDATE OF c")

#: A parent ``p`` that holds its waiting child (the updated row, ``jobs``) back: not completed, and, unless
#: the child runs once its parents merely finished, not final either. Sought through the child's edges (the
#: primary key), one parent at a time.
_HOLDS_BACK = (f"p.status <> '{JobStatus.COMPLETED}'"
               f" AND (jobs.run_when = '{RunWhen.COMPLETED}' OR NOT p.{status_in(FINAL)})")

#: Waiting jobs whose every parent is done as their run_when asks: pending now, claimable at their run_at.
PROMOTE = f"""
UPDATE jobs
   SET status = '{_MET.to_status}', updated_at = %(now)s
 WHERE id = ANY(%(ids)s) AND {status_in(_MET.from_statuses)}
   AND NOT EXISTS (SELECT 1 FROM job_dependencies d JOIN jobs p ON p.id = d.parent_id
                    WHERE d.child_id = jobs.id AND {_HOLDS_BACK})
RETURNING {JOB_LIST}"""

#: Waiting jobs that must run after their parents completed, and the parents that failed or were
#: cancelled: each such child is cancelled (DOOM), naming its first broken parent. The parent's status is
#: compared as an expression: as the bare column the planner may walk every failed job by its status index
#: (there are few, by its statistics) instead of seeking the child's few parents by id.
_BROKEN_NAMES = "(" + ", ".join(f"'{name}'" for name in names(BROKEN)) + ")"
BROKEN_PARENTS = (f"SELECT d.child_id, d.parent_id, p.status FROM job_dependencies d"
                  f" JOIN jobs c ON c.id = d.child_id JOIN jobs p ON p.id = d.parent_id"
                  f" WHERE d.child_id = ANY(%(ids)s) AND c.{status_in(_DOOMED.from_statuses)}"
                  f" AND c.run_when = '{RunWhen.COMPLETED}' AND (p.status || '') IN {_BROKEN_NAMES}"
                  f" ORDER BY d.child_id, d.parent_id")
DOOM = (f"UPDATE jobs SET status = '{_DOOMED.to_status}', updated_at = %(now)s"
        f" WHERE id = ANY(%(ids)s) AND {status_in(_DOOMED.from_statuses)} RETURNING {JOB_LIST}")

#: An admin retried jobs (:ids): their children that a dependency failure cancelled (their last event says
#: so) wait again. The last event is one seek of ix_job_events_job_id per child.
REVIVE = f"""
UPDATE jobs
   SET status = '{_REVIVED.to_status}', updated_at = %(now)s
 WHERE id IN (SELECT d.child_id FROM job_dependencies d WHERE d.parent_id = ANY(%(ids)s))
   AND {status_in(_REVIVED.from_statuses)}
   AND (SELECT e.event FROM job_events e WHERE e.job_id = jobs.id ORDER BY e.id DESC LIMIT 1)
       = '{_DOOMED.event}'
RETURNING {JOB_LIST}"""

#: A producer waits for this job's end (GET /jobs/{id}?wait=S): its finishing wakes every server process.
WATCH = f"UPDATE jobs SET watched = true WHERE id = %(id)s RETURNING {JOB_LIST}"

# --- the reads the operations decide by ---------------------------------------------------------------

#: Is anything claimable? Asked by a waiting claim before it runs the claim. Under flow control a job is
#: claimable only where its type has room and its key too, so a waiting claim sleeps through a pause or a
#: full limit instead of claiming nothing every second. (Always with the flow part: this read is not on a
#: hot path, and it needs no copy of the settings to be right.)
SOMETHING_DUE = f"""
WITH RECURSIVE {_rooms(held=False)}
SELECT EXISTS (SELECT 1 FROM jobs WHERE {CLAIMABLE} AND {_NONE_CONTROLLED})
    OR EXISTS (SELECT 1 FROM rooms f WHERE {_first_due("f", with_room=True)})"""

#: After a claim that came back short: each type of the claim with due jobs that flow control held back,
#: and the first reason that held them (for queuelog_claims_limited_total).
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
EXPIRABLE = (f"SELECT {JOB_LIST} FROM jobs WHERE {status_in(_EXPIRE.from_statuses)} AND expires_at <= %(now)s"
             " ORDER BY id FOR UPDATE SKIP LOCKED")

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
#: CLAIM's ``{process_runs}``, only when the claim names its worker process: that process is the claiming key's and
#: told to run (an admin's quiet or stop: nothing is claimed). A primary-key probe in the claim itself, so
#: naming a process adds no statement; a claim that names none only writes process_id = NULL besides.
PROCESS_RUNS = ("AND EXISTS (SELECT 1 FROM worker_processes"
                " WHERE id = %(process)s AND key_id = %(key_id)s AND command = 'run')")

#: A job that a job still waiting, pending or running depends on is never purged: its child would lose its
#: parent (and its result). Looked up only for jobs that have dependents.
_NEEDED = ("NOT (has_dependents AND EXISTS (SELECT 1 FROM job_dependencies d JOIN jobs c ON c.id = d.child_id"
           f" WHERE d.parent_id = jobs.id AND NOT c.{status_in(FINAL)}))")
#: Purging (`flask purge`): the oldest finished jobs of one status, unchanged since cutoff, a batch at a
#: time, locked until commit so an admin's retry cannot turn one back into a pending job before the
#: delete (a job it holds is skipped, for the next run); then their events, then the jobs, re-checked.
PURGEABLE = (f"SELECT id FROM jobs WHERE status = %(status)s AND updated_at < %(cutoff)s AND {_NEEDED}"
             " ORDER BY updated_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED")
PURGE_EVENTS = "DELETE FROM job_events WHERE job_id = ANY(%(ids)s)"
PURGE_JOBS = (f"DELETE FROM jobs WHERE id = ANY(%(ids)s) AND status = %(status)s AND updated_at < %(cutoff)s"
              f" AND {_NEEDED}")

#: An admin's delete: those of the ids in a final status go, events first (not every database cascades the
#: foreign key), then the jobs, each re-checked. A running or pending job is never deleted, nor one that a
#: live job still depends on (_NEEDED, as for purge). FOR UPDATE: the jobs stay locked until the transaction
#: ends, so none is retried between the two (its events gone, itself kept).
DELETE_EVENTS = (f"DELETE FROM job_events WHERE job_id IN (SELECT id FROM jobs WHERE id = ANY(%(ids)s)"
                 f" AND {status_in(DELETABLE)} AND {_NEEDED} FOR UPDATE)")
DELETE_JOBS = (f"DELETE FROM jobs WHERE id = ANY(%(ids)s) AND {status_in(DELETABLE)} AND {_NEEDED}"
               f" RETURNING {JOB_LIST}")

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
#: then, not on every enqueue), and the key's waiting and pending jobs counted up to most (LIMIT 0: not
#: counted; ix_jobs_backlog_producer).
QUOTA_STATE = f"""
SELECT (SELECT running_total FROM enqueue_ledger WHERE key_id = %(key)s
         ORDER BY at DESC, running_total DESC LIMIT 1),
       (SELECT at FROM enqueue_ledger WHERE key_id = %(key)s ORDER BY at DESC, running_total DESC LIMIT 1),
       (SELECT running_total - jobs FROM enqueue_ledger WHERE key_id = %(key)s AND at > %(cutoff)s
         ORDER BY at, running_total LIMIT 1),
       (SELECT at FROM enqueue_ledger WHERE key_id = %(key)s ORDER BY at, running_total LIMIT 1),
       (SELECT count(*) FROM (SELECT 1 FROM jobs WHERE producer_key_id = %(key)s
                                 AND {status_in(BACKLOG)} LIMIT %(most)s) AS pending)"""

#: When the window's row holding the key's total-th job was written: once it leaves, a refused request fits.
QUOTA_FREES_AT = ("SELECT at FROM enqueue_ledger WHERE key_id = %(key)s AND at > %(cutoff)s"
                  " AND running_total >= %(total)s ORDER BY at, running_total LIMIT 1")

#: One enqueue of a rate-limited key: when, how many jobs, and the key's running total with them.
QUOTA_RECORD = ("INSERT INTO enqueue_ledger (key_id, at, jobs, running_total)"
                " VALUES (%(key)s, %(at)s, %(jobs)s, %(total)s)")

#: Ledger rows that left the key's rate window.
QUOTA_FORGET = "DELETE FROM enqueue_ledger WHERE key_id = %(key)s AND at <= %(cutoff)s"
