-- claim on postgresql, as sent (whitespace aside). Written by: python -m queuelog.sql.render

-- CLAIM without flow control, logged
WITH changed AS
  (WITH RECURSIVE picked AS MATERIALIZED
     (SELECT id
      FROM
        (SELECT id
         FROM jobs
         WHERE status = 'pending'
           AND run_at <= %(now)s
           AND (expires_at IS NULL
                OR expires_at > %(now)s)
           AND type = ANY(%(types)s)
           AND NOT EXISTS
             (SELECT 1
              FROM type_settings s
              WHERE ((paused
                      OR (concurrency_limit IS NOT NULL
                          OR rate_limit_jobs IS NOT NULL
                          OR key_concurrency_limit IS NOT NULL))
                     OR s.updated_at > %(now)s)
                AND type = ANY(%(types)s))
           AND fair_tag >= %(floor)s
         ORDER BY priority DESC, fair_tag, id
         LIMIT 10
         FOR UPDATE SKIP LOCKED) walked) UPDATE jobs_live AS jobs
   SET status = 'running', worker_id = %(worker)s, claim_token = %(token)s, claimed_at = %(now)s, heartbeat_at = %(now)s,
       process_id = %(process)s, timeout_at = %(now)s + timeout_seconds * interval '1 second',
       lease_expires_at = LEAST(%(lease_until)s, %(now)s + timeout_seconds * interval '1 second'), updated_at = %(now)s
   WHERE NOT coalesce(
                        (SELECT version
                         FROM type_settings_version
                         WHERE id = 1), 0) <> %(version)s
     AND (status) IS NOT DISTINCT
     FROM ('pending')
     AND EXISTS
       (SELECT 1
        FROM worker_processes
        WHERE id = %(process)s
          AND key_id = %(key_id)s
          AND command = 'run')
     AND id = ANY(ARRAY
                    (SELECT id
                     FROM picked)) RETURNING id, type, payload, priority, status, retry_count, max_retries, stall_count,
                                             idempotency_key, request_digest, producer_key_id, producer, run_at, claimed_at,
                                             worker_id, claim_token, lease_expires_at, heartbeat_at, completed_at, error,
                                             error_group, result, created_at, updated_at, concurrency_key, fair_tag, unique_key,
                                             expires_at, timeout_seconds, timeout_at, schedule, scheduled_for, run_when,
                                             has_dependents, watched, progress, process_id, traceparent, tracestate),
     logged AS
  (INSERT INTO job_events (job_id, event, from_status, to_status, actor, attempt, error, at) SELECT id,
                                                                                                    %(log_event)s,
                                                                                                    %(log_from)s, status,
                                                                                                    %(log_actor)s, retry_count,
                                                                                                    %(log_error)s, %(log_at)s
   FROM changed)
SELECT id, type, payload, priority, status, retry_count, max_retries, stall_count, idempotency_key, request_digest,
       producer_key_id, producer, run_at, claimed_at, worker_id, claim_token, lease_expires_at, heartbeat_at, completed_at, error,
       error_group, result, created_at, updated_at, concurrency_key, fair_tag, unique_key, expires_at, timeout_seconds, timeout_at,
       schedule, scheduled_for, run_when, has_dependents, watched, progress, process_id, traceparent, tracestate
FROM changed
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
WHERE coalesce(
                 (SELECT version
                  FROM type_settings_version
                  WHERE id = 1), 0) <> %(version)s;

-- FLOW_LOCK, first, in the claim's transaction
SELECT type, concurrency_limit, rate_limit_jobs, rate_limit_seconds, key_concurrency_limit
FROM type_settings
WHERE (concurrency_limit IS NOT NULL
       OR rate_limit_jobs IS NOT NULL
       OR key_concurrency_limit IS NOT NULL)
  AND type = ANY(%(types)s)
ORDER BY type
FOR
UPDATE;

-- CLAIM with flow control (a type of the claim is paused or limited), logged
WITH changed AS
  (WITH RECURSIVE queues(type) AS
     (SELECT
        (SELECT min(type)
         FROM jobs
         WHERE status = 'pending'
           AND type = ANY(%(types)s)
           AND fair_tag >= %(floor)s)
      UNION ALL SELECT
        (SELECT min(type)
         FROM jobs
         WHERE status = 'pending'
           AND type > queues.type
           AND type = ANY(%(types)s)
           AND fair_tag >= %(floor)s)
      FROM queues
      WHERE queues.type IS NOT NULL),
                  limits AS
     (SELECT q.type, coalesce(s.paused, false) AS paused,
             coalesce((s.concurrency_limit IS NOT NULL
                       OR s.rate_limit_jobs IS NOT NULL
                       OR s.key_concurrency_limit IS NOT NULL)
                      AND NOT q.type = ANY(%(locked_types)s), false) AS unheld, coalesce(s.updated_at > %(now)s,
                                                                                  false) AS changed, s.key_concurrency_limit AS key_limit,
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
                           AND c.expires_at > %(now)s)
             END AS rate_room
      FROM queues q
      LEFT JOIN type_settings s ON s.type = q.type
      WHERE q.type IS NOT NULL),
                  running_keys AS
     (SELECT r.type, r.concurrency_key, count(*) AS running
      FROM limits l
      JOIN jobs r ON r.type = l.type
      AND r.status = 'running'
      WHERE l.key_limit IS NOT NULL
      GROUP BY r.type, r.concurrency_key),
                  rooms AS
     (SELECT l.type, LEAST(l.concurrency_room, l.rate_room, 10) AS room, l.key_limit,
             ARRAY
        (SELECT k.concurrency_key
         FROM running_keys k
         WHERE k.type = l.type
           AND k.running >= l.key_limit) AS blocked
      FROM limits l
      WHERE NOT l.paused
        AND NOT l.unheld
        AND NOT l.changed
        AND LEAST(l.concurrency_room, l.rate_room, 10) > 0),
                  by_type AS
     (SELECT j.*, f.room, f.key_limit,
             row_number() OVER (PARTITION BY j.type
                                ORDER BY j.priority DESC, j.fair_tag, j.id) AS nth_of_type
      FROM rooms f
      CROSS JOIN LATERAL
        (SELECT p.id, p.type, p.concurrency_key, p.priority, p.fair_tag
         FROM jobs p
         WHERE p.type = f.type
           AND p.status = 'pending'
           AND p.run_at <= %(now)s
           AND (p.expires_at IS NULL
                OR p.expires_at > %(now)s)
           AND NOT (p.concurrency_key || '') = ANY(f.blocked)
           AND fair_tag >= %(floor)s
         ORDER BY p.priority DESC, p.fair_tag, p.id
         LIMIT 10
         FOR UPDATE OF p SKIP LOCKED) j),
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
      LIMIT 10), picked AS MATERIALIZED
     (SELECT id
      FROM
        (SELECT id
         FROM jobs
         WHERE status = 'pending'
           AND run_at <= %(now)s
           AND (expires_at IS NULL
                OR expires_at > %(now)s)
           AND type = ANY(%(types)s)
           AND NOT EXISTS
             (SELECT 1
              FROM type_settings s
              WHERE ((paused
                      OR (concurrency_limit IS NOT NULL
                          OR rate_limit_jobs IS NOT NULL
                          OR key_concurrency_limit IS NOT NULL))
                     OR s.updated_at > %(now)s)
                AND type = ANY(%(types)s))
           AND false
           AND fair_tag >= %(floor)s
         ORDER BY priority DESC, fair_tag, id
         LIMIT 10
         FOR UPDATE SKIP LOCKED) walked
      UNION ALL SELECT id
      FROM taken) UPDATE jobs_live AS jobs
   SET status = 'running', worker_id = %(worker)s, claim_token = %(token)s, claimed_at = %(now)s, heartbeat_at = %(now)s,
       process_id = %(process)s, timeout_at = %(now)s + timeout_seconds * interval '1 second',
       lease_expires_at = LEAST(%(lease_until)s, %(now)s + timeout_seconds * interval '1 second'), updated_at = %(now)s
   WHERE NOT coalesce(
                        (SELECT version
                         FROM type_settings_version
                         WHERE id = 1), 0) <> %(version)s
     AND (status) IS NOT DISTINCT
     FROM ('pending')
     AND EXISTS
       (SELECT 1
        FROM worker_processes
        WHERE id = %(process)s
          AND key_id = %(key_id)s
          AND command = 'run')
     AND id = ANY(ARRAY
                    (SELECT id
                     FROM picked)) RETURNING id, type, payload, priority, status, retry_count, max_retries, stall_count,
                                             idempotency_key, request_digest, producer_key_id, producer, run_at, claimed_at,
                                             worker_id, claim_token, lease_expires_at, heartbeat_at, completed_at, error,
                                             error_group, result, created_at, updated_at, concurrency_key, fair_tag, unique_key,
                                             expires_at, timeout_seconds, timeout_at, schedule, scheduled_for, run_when,
                                             has_dependents, watched, progress, process_id, traceparent, tracestate),
     logged AS
  (INSERT INTO job_events (job_id, event, from_status, to_status, actor, attempt, error, at) SELECT id,
                                                                                                    %(log_event)s,
                                                                                                    %(log_from)s, status,
                                                                                                    %(log_actor)s, retry_count,
                                                                                                    %(log_error)s, %(log_at)s
   FROM changed)
SELECT id, type, payload, priority, status, retry_count, max_retries, stall_count, idempotency_key, request_digest,
       producer_key_id, producer, run_at, claimed_at, worker_id, claim_token, lease_expires_at, heartbeat_at, completed_at, error,
       error_group, result, created_at, updated_at, concurrency_key, fair_tag, unique_key, expires_at, timeout_seconds, timeout_at,
       schedule, scheduled_for, run_when, has_dependents, watched, progress, process_id, traceparent, tracestate
FROM changed
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
WHERE coalesce(
                 (SELECT version
                  FROM type_settings_version
                  WHERE id = 1), 0) <> %(version)s;
