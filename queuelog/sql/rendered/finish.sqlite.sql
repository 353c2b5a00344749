-- finish on sqlite, as sent (whitespace aside). Written by: python -m queuelog.sql.render
-- A logged write is followed by LOG_EVENTS in the same transaction.

-- FINISH: complete, logged
UPDATE jobs
SET updated_at = :now, claim_token = NULL, lease_expires_at = NULL, status = :status, result = :result,
                                                                                               completed_at = :now
WHERE id IN (:ids_0, :ids_1)
  AND (status, worker_id, claim_token) IS NOT DISTINCT
  FROM ('running', :worker, :token)
  AND claim_token IS NOT NULL
  AND (timeout_at IS NULL
       OR timeout_at > :now) RETURNING id, type, payload, priority, status, retry_count, max_retries, stall_count,
                                       idempotency_key, request_digest, producer_key_id, producer, run_at, claimed_at, worker_id,
                                       claim_token, lease_expires_at, heartbeat_at, completed_at, error, error_group, result,
                                       created_at, updated_at, concurrency_key, fair_tag, unique_key, expires_at,
                                       timeout_seconds, timeout_at, schedule, scheduled_for, run_when, has_dependents, watched,
                                       progress, process_id, traceparent, tracestate;

-- FINISH: a heartbeat
UPDATE jobs
SET heartbeat_at = :now, lease_expires_at = coalesce(min(:lease_until,
                                                       timeout_at),
                                              :lease_until), progress = :progress
WHERE id IN (:ids_0, :ids_1)
  AND (status, worker_id, claim_token) IS NOT DISTINCT
  FROM ('running', :worker, :token)
  AND claim_token IS NOT NULL
  AND (timeout_at IS NULL
       OR timeout_at > :now) RETURNING id, type, payload, priority, status, retry_count, max_retries, stall_count,
                                       idempotency_key, request_digest, producer_key_id, producer, run_at, claimed_at, worker_id,
                                       claim_token, lease_expires_at, heartbeat_at, completed_at, error, error_group, result,
                                       created_at, updated_at, concurrency_key, fair_tag, unique_key, expires_at,
                                       timeout_seconds, timeout_at, schedule, scheduled_for, run_when, has_dependents, watched,
                                       progress, process_id, traceparent, tracestate;
