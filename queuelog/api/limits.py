"""The bounds the API takes: sizes, counts, ranges and the patterns of names and keys.

The body and query parsers enforce them and the OpenAPI document (api/openapi/) quotes them, so both read
one value. Pages that take the same fields (ui/forms.py) import them from here too.
"""

from __future__ import annotations

import re

from ..core.patterns import IDEMPOTENCY_KEY, IDEMPOTENCY_KEY_HINT, NAME_PATTERN

MAX_RETRIES_LIMIT = 100
MAX_BATCH_ENQUEUE = 500
#: A batch that is a workflow (an item names a ref or depends_on) may hold a fan-out of up to this many jobs.
MAX_BATCH_WORKFLOW = 1000
MAX_DEPENDS_ON = 100
#: A batch item's name for other items' depends_on: 1-100 letters, digits, '_', '-', '.', ':'.
REF = re.compile(NAME_PATTERN)
REF_HINT = "must be 1-100 letters, digits, '_', '-', '.' or ':'"
MAX_PROGRESS_BYTES = 4096
MAX_BATCH_CLAIM = 100
MAX_BATCH_COMPLETE = 100
MAX_CLAIM_WAIT_SECONDS = 30
MAX_JOB_ID = 2**63 - 1
MAX_PROCESS_ID = 2**31 - 1  # worker_processes.id is a 32-bit integer on PostgreSQL
MAX_LEASE_SECONDS = 86400
MAX_UNIQUE_FOR_SECONDS = 604_800  # a dedupe window: up to a week
MAX_TIMEOUT_SECONDS = 86_400  # a run's timeout: up to a day
MAX_FLOW_LIMIT = 1_000_000  # jobs: a concurrency, rate or per-key limit
MAX_RATE_WINDOW_SECONDS = 86400
#: A concurrency key (a tenant, a customer, …) takes what an idempotency key takes: 1-200 printable ASCII.
CONCURRENCY_KEY, CONCURRENCY_KEY_HINT = IDEMPOTENCY_KEY, IDEMPOTENCY_KEY_HINT
LIST_LIMIT_DEFAULT = 50
LIST_LIMIT_MAX = 200
#: A unique key takes what an idempotency key takes: 1-200 printable ASCII.
UNIQUE_KEY, UNIQUE_KEY_HINT = IDEMPOTENCY_KEY, IDEMPOTENCY_KEY_HINT
# A worker process's registration (POST /workers).
MAX_HOST_CHARS = 255
MAX_VERSION_CHARS = 100
MAX_CONCURRENCY = 10_000
MAX_PID = 2**31 - 1
MAX_PROCESS_TYPES = 100
