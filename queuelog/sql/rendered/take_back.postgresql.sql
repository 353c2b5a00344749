-- take_back on postgresql, as sent (whitespace aside). Written by: python -m queuelog.sql.render

-- TAKE_BACK: the reaper's, a stalled run back to pending, logged
WITH changed AS
  (UPDATE jobs
   SET updated_at = %(now)s, worker_id = NULL, claimed_at = NULL, claim_token = NULL, lease_expires_at = NULL, heartbeat_at = NULL,
       timeout_at = NULL, status = %(status)s, retry_count = retry_count + 1, stall_count = stall_count + 1, run_at = %(run_at)s
   WHERE id = ANY(%(ids)s)
     AND (status) IS NOT DISTINCT
     FROM ('running')
     AND (%(token)s::text IS NULL
          OR claim_token = %(token)s)
     AND status NOT IN ('completed', 'failed', 'cancelled') RETURNING id, type, payload, priority, status, retry_count,
                                                                      max_retries, stall_count, idempotency_key,
                                                                      request_digest, producer_key_id, producer, run_at,
                                                                      claimed_at, worker_id, claim_token, lease_expires_at,
                                                                      heartbeat_at, completed_at, error, error_group, result,
                                                                      created_at, updated_at, concurrency_key, fair_tag,
                                                                      unique_key, expires_at, timeout_seconds, timeout_at,
                                                                      schedule, scheduled_for, run_when, has_dependents,
                                                                      watched, progress, process_id, traceparent,
                                                                      tracestate),
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
FROM changed;
