"""One push delivery: the job as a worker's claim shows it, signed, POSTed to the target; then its answer decides.

- **sync**: a 2xx completes the job (a JSON object body is its result); 429 or 503 give it back for later,
  after ``Retry-After``, with no failure counted; any other answer, no answer or the timeout fail the attempt
  (with the usual retries), the status and the first KiB of the body as its error.
- **async**: a 2xx (202, "accepted") leaves the job running, held under the token the target was sent: the target
  completes, fails or heartbeats it itself (queue/push_access.py). Any other answer decides as in sync.

Every delivery is written to the job's event log first ("delivered", with the HTTP status), then the decision.
The ``webhook-id`` is ``<job id>-<attempt>``: the same for every delivery of one attempt (a 429's repeat), so
a target that records the ids it completed can tell a repeat from a new attempt.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

from flask import Flask, current_app

from ..api.serialize import job_json
from ..core.scrub import scrub_error
from ..database.transactions import read_connection
from ..queue.push_access import push_caller
from ..queue.push_outcomes import Answered, Decision
from ..queue.push_targets import PushTarget, signing_secrets
from ..reads.queries import parents_of
from ..sql import JobRow
from . import sending, signing
from .turns import with_turn

log = logging.getLogger("queuelog.push")

#: How much of a failed answer's body becomes the attempt's error.
ERROR_BODY_BYTES = 1024
#: The longest a 429 or 503 may put a job off (a larger Retry-After is taken as this).
MOST_RETRY_AFTER = timedelta(hours=1)
COME_BACK_STATUSES = frozenset({429, 503})
USER_AGENT = "queuelog-push"


def deliver(app: Flask, row: JobRow, target: PushTarget) -> Answered | None:
    """Deliver ``row`` (claimed for ``target``): its answer and what it decides, for ``push_outcomes.record``. None
    when the delivery broke off on our side (logged; the lease brings the job back). Never raises."""
    try:
        return _deliver(app, row, target)
    except Exception:  # noqa: BLE001 - a delivery thread must survive anything
        log.exception("push delivery of job %d (%s) to %s broke off", row.id, row.type, target.url)
        return None


def _deliver(app: Flask, row: JobRow, target: PushTarget) -> Answered:
    body, secrets, allow_private, max_error, max_result = with_turn(app, lambda: _prepared(row))
    message_id = f"{row.id}-{row.retry_count + 1}"
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        **signing.headers(message_id, int(time.time()), body, secrets),
    }
    if row.traceparent:
        headers["traceparent"] = row.traceparent
        if row.tracestate:
            headers["tracestate"] = row.tracestate
    try:
        answer = sending.post(target.url, body, headers, target.timeout_seconds, allow_private)
    except sending.SendFailed as failure:
        return Answered(row, None, scrub_error(str(failure), max_error), Decision.FAIL)
    status = answer.status
    if 200 <= status < 300:
        if target.mode == "async":
            return Answered(row, status, None, Decision.ACCEPTED)
        return Answered(row, status, None, Decision.COMPLETE, result=_result(answer.body, max_result))
    error = scrub_error(_answer_error(answer), max_error)
    if status in COME_BACK_STATUSES:
        delay = _retry_after(answer.headers.get("retry-after"))
        return Answered(row, status, error, Decision.LATER, delay=delay)
    return Answered(row, status, error, Decision.FAIL)


def _prepared(row: JobRow) -> tuple[bytes, list[str], bool, int, int]:
    """The body (the job as a worker's claim shows it, with its parents' results), the signing secrets, whether
    private addresses are allowed, how long an error may be, and how large a result."""
    parents = parents_of([row.id]).get(row.id) if row.run_when is not None else None
    shown = job_json(row, push_caller(row.type), claim_token=True, parents=parents)
    body = json.dumps(shown, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    with read_connection() as conn:
        secrets = signing_secrets(conn, row.type, datetime.now(UTC))
    config = current_app.config
    return body, secrets, config["PUSH_ALLOW_PRIVATE"], config["MAX_ERROR_CHARS"], config["MAX_PAYLOAD_BYTES"]


def _answer_error(answer: sending.Answer) -> str:
    text = answer.body[:ERROR_BODY_BYTES].decode("utf-8", errors="replace").strip()
    return f"HTTP {answer.status}" + (f": {text}" if text else "")


def _result(body: bytes, max_bytes: int) -> dict | None:
    """A 2xx body that is a JSON object (strict: no NaN or Infinity) within the size limit; else no result."""
    if len(body) > min(sending.MAX_ANSWER_BYTES, max_bytes):
        return None
    try:
        value = json.loads(body, parse_constant=_refuse_constant)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _retry_after(value: str | None) -> timedelta | None:
    """Retry-After as seconds or an HTTP date, at most MOST_RETRY_AFTER; None without a valid one (the recorder
    then waits the backoff a failed attempt would, counting nothing)."""
    if value is not None:
        value = value.strip()
        try:
            delay = timedelta(seconds=int(value)) if value.isdigit() else parsedate_to_datetime(value) - _now()
        except (TypeError, ValueError, OverflowError):
            delay = None
        if delay is not None:
            return max(timedelta(0), min(delay, MOST_RETRY_AFTER))
    return None


def _now() -> datetime:
    return datetime.now(UTC)
