-- take_back on sqlite, as sent (whitespace aside). Written by: python -m queuelog.sql.render
-- A logged write is followed by LOG_EVENTS in the same transaction.

-- TAKE_BACK: the reaper's, a stalled run back to pending, logged
UPDATE jobs
SET updated_at = :now, worker_id = NULL, claimed_at = NULL, claim_token = NULL, lease_expires_at = NULL, heartbeat_at = NULL,
    timeout_at = NULL, status = :status, retry_count = retry_count + 1, stall_count = stall_count + 1, run_at = :run_at
WHERE id IN (:ids_0, :ids_1)
  AND status = 'running'
  AND (:token IS NULL
       OR claim_token = :token) RETURNING id, type, payload, priority, status, retry_count, max_retries, stall_count,
                                          idempotency_key, request_digest, producer_key_id, producer, run_at, claimed_at, worker_id,
                                          claim_token, lease_expires_at, heartbeat_at, completed_at, error, error_group, result,
                                          created_at, updated_at, concurrency_key, fair_tag, unique_key, expires_at,
                                          timeout_seconds, timeout_at, schedule, scheduled_for, run_when, has_dependents, watched,
                                          progress, process_id, traceparent, tracestate;
