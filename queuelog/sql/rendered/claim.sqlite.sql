-- claim on sqlite, as sent (whitespace aside). Written by: python -m queuelog.sql.render
-- A logged write is followed by LOG_EVENTS in the same transaction.

-- CLAIM_PICK without flow control
SELECT id
FROM
  (SELECT id
   FROM jobs INDEXED BY ix_jobs_claim_order
   WHERE status = 'pending'
     AND run_at <= :now
     AND (expires_at IS NULL
          OR expires_at > :now)
     AND type IN (:types_0, :types_1)
   ORDER BY priority DESC, fair_tag, id
   LIMIT CASE
             WHEN EXISTS
                    (SELECT 1
                     FROM type_settings
                     WHERE (paused
                            OR (concurrency_limit IS NOT NULL
                                OR rate_limit_jobs IS NOT NULL
                                OR key_concurrency_limit IS NOT NULL))
                       AND type IN (:types_0, :types_1)) THEN 0 ELSE :limit
         END)
UNION ALL
SELECT NULL
WHERE coalesce(
                 (SELECT version
                  FROM type_settings_version
                  WHERE id = 1), 0) <> :version;

-- CLAIM_PICK with flow control (a type of the claim is paused or limited)
WITH RECURSIVE queues(type) AS
  (SELECT
     (SELECT min(type)
      FROM jobs INDEXED BY ix_jobs_type_claim_order
      WHERE status = 'pending'
        AND type IN (:types_0, :types_1))
   UNION ALL SELECT
     (SELECT min(type)
      FROM jobs INDEXED BY ix_jobs_type_claim_order
      WHERE status = 'pending'
        AND type > queues.type
        AND type IN (:types_0, :types_1))
   FROM queues
   WHERE queues.type IS NOT NULL),
               limits AS
  (SELECT q.type, coalesce(s.paused, 0) AS paused,
          coalesce((s.concurrency_limit IS NOT NULL
                    OR s.rate_limit_jobs IS NOT NULL
                    OR s.key_concurrency_limit IS NOT NULL)
                   AND q.type NOT IN (:locked_types_0), 0) AS unheld, s.key_concurrency_limit AS key_limit,
          CASE
              WHEN s.concurrency_limit IS NOT NULL THEN s.concurrency_limit -
                     (SELECT count(*)
                      FROM jobs r
                      WHERE r.type = q.type
                        AND r.status = 'running')
          END AS concurrency_room,
          CASE
              WHEN s.rate_limit_jobs IS NOT NULL THEN s.rate_limit_jobs -
                     (SELECT coalesce(sum(c.jobs), 0)
                      FROM type_claims c
                      WHERE c.type = q.type
                        AND c.expires_at > :now)
          END AS rate_room
   FROM queues q
   LEFT JOIN type_settings s ON s.type = q.type
   WHERE q.type IS NOT NULL),
               running_keys AS
  (-- A list of types, not a join, and the index named: SQLite then seeks each type's running jobs. As a
 -- join it first read every job to build a Bloom filter for it, or walked the index of keys for the
 -- GROUP BY's order (360,000 steps at 100,000 pending, for no row).
 SELECT r.type, r.concurrency_key, count(*) AS running
   FROM jobs r INDEXED BY ix_jobs_type_status_priority
   WHERE r.type IN
       (SELECT type
        FROM limits
        WHERE key_limit IS NOT NULL)
     AND r.status = 'running'
   GROUP BY r.type, r.concurrency_key),
               rooms AS
  (SELECT type, key_limit, room
   FROM
     (SELECT type, key_limit, paused, unheld,
             min(coalesce(concurrency_room, :limit), coalesce(rate_room,
                                                       :limit), :limit) AS room
      FROM limits)
   WHERE NOT paused
     AND NOT unheld
     AND room > 0),
               by_type AS
  (SELECT j.id, j.type, j.concurrency_key, j.priority, j.fair_tag, f.room, f.key_limit,
          row_number() OVER (PARTITION BY j.type
                             ORDER BY j.priority DESC, j.fair_tag, j.id) AS nth_of_type
   FROM rooms f
   JOIN jobs j ON j.id IN
     (SELECT p.id
      FROM jobs p INDEXED BY ix_jobs_type_claim_order
      WHERE p.type = f.type
        AND p.status = 'pending'
        AND p.run_at <= :now
        AND (p.expires_at IS NULL
             OR p.expires_at > :now)
        AND NOT EXISTS
          (SELECT 1
           FROM running_keys k
           WHERE k.type = p.type
             AND k.concurrency_key = p.concurrency_key
             AND k.running >= f.key_limit)
      ORDER BY p.priority DESC, p.fair_tag, p.id
      LIMIT :limit)),
               taken AS
  (SELECT b.id
   FROM
     (SELECT b.*, coalesce(k.running, 0) AS key_running,
             row_number() OVER (PARTITION BY b.type, b.concurrency_key
                                ORDER BY b.priority DESC, b.fair_tag, b.id) AS nth_of_key
      FROM by_type b
      LEFT JOIN running_keys k ON k.type = b.type
      AND k.concurrency_key = b.concurrency_key
      WHERE b.nth_of_type <= b.room) b
   WHERE b.key_limit IS NULL
     OR b.nth_of_key <= b.key_limit - b.key_running
   ORDER BY b.priority DESC, b.fair_tag, b.id
   LIMIT :limit)
SELECT id
FROM
  (SELECT id
   FROM jobs INDEXED BY ix_jobs_claim_order
   WHERE status = 'pending'
     AND run_at <= :now
     AND (expires_at IS NULL
          OR expires_at > :now)
     AND type IN (:types_0, :types_1)
   ORDER BY priority DESC, fair_tag, id
   LIMIT CASE
             WHEN EXISTS
                    (SELECT 1
                     FROM type_settings
                     WHERE (paused
                            OR (concurrency_limit IS NOT NULL
                                OR rate_limit_jobs IS NOT NULL
                                OR key_concurrency_limit IS NOT NULL))
                       AND type IN (:types_0, :types_1))
                  OR 1 THEN 0 ELSE :limit
         END)
UNION ALL
SELECT id
FROM taken
UNION ALL
SELECT NULL
WHERE coalesce(
                 (SELECT version
                  FROM type_settings_version
                  WHERE id = 1), 0) <> :version;

-- CLAIM: the picked ids marked running
UPDATE jobs
SET status = 'running', worker_id = :worker, claim_token = :token, claimed_at = :now, heartbeat_at = :now, process_id = :process,
    timeout_at = CASE WHEN timeout_seconds IS NULL THEN NULL
                     ELSE strftime('%Y-%m-%d %H:%M:%S',
                            substr(:now, 1, 19), '+' || timeout_seconds || ' seconds') || substr(:now,
                                                                                            20)
                 END, lease_expires_at = CASE WHEN timeout_seconds IS NULL THEN :lease_until
                                             ELSE min(:lease_until,

                                                    CASE WHEN timeout_seconds IS NULL THEN NULL
                                                        ELSE strftime('%Y-%m-%d %H:%M:%S',
                                                               substr(:now,
                                                                 1, 19),
                                                               '+' || timeout_seconds || ' seconds') || substr(:now,
                                                                                                          20)
                                                    END)
                                         END, updated_at = :now
WHERE id IN (:ids_0, :ids_1)
  AND status = 'pending'
  AND EXISTS
    (SELECT 1
     FROM worker_processes
     WHERE id = :process
       AND key_id = :key_id
       AND command = 'run');

-- CLAIMED: the jobs read back
SELECT id, type, payload, priority, status, retry_count, max_retries, stall_count, idempotency_key, request_digest,
       producer_key_id, producer, run_at, claimed_at, worker_id, claim_token, lease_expires_at, heartbeat_at, completed_at, error,
       error_group, result, created_at, updated_at, concurrency_key, fair_tag, unique_key, expires_at, timeout_seconds, timeout_at,
       schedule, scheduled_for, run_when, has_dependents, watched, progress, process_id, traceparent, tracestate
FROM jobs
WHERE id IN (:ids_0, :ids_1)
  AND claim_token = :token;

-- LOG_EVENTS: their event rows (executemany)
INSERT INTO job_events (job_id, event, from_status, to_status, actor, attempt, error, at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?);
