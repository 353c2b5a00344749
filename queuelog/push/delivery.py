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
from ..core.errors import QueueError
from ..core.scrub import scrub_error
from ..database.transactions import read_connection
from ..queue import backoff_delay, push_outcomes
from ..queue.push_access import push_caller
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


def deliver(app: Flask, row: JobRow, target: PushTarget) -> None:
    """Deliver ``row`` (claimed for ``target``) and record what came of it. Never raises."""
    try:
        _deliver(app, row, target)
    except Exception:  # noqa: BLE001 - a delivery thread must survive anything; the lease brings the job back
        log.exception("push delivery of job %d (%s) to %s broke off", row.id, row.type, target.url)


def _deliver(app: Flask, row: JobRow, target: PushTarget) -> None:
    caller = push_caller(row.type)
    body, secrets, allow_private = with_turn(app, lambda: _prepared(row, caller))
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
        status, error, answer = None, str(failure), None
    else:
        status = answer.status
        error = None if 200 <= status < 300 else _answer_error(answer)
    with_turn(app, lambda: _decide(row, caller, target, status, error, answer))


def _prepared(row: JobRow, caller) -> tuple[bytes, list[str], bool]:
    """The body (the job as a worker's claim shows it, with its parents' results), the signing secrets, and
    whether private addresses are allowed."""
    parents = parents_of([row.id]).get(row.id) if row.run_when is not None else None
    shown = job_json(row, caller, claim_token=True, parents=parents)
    body = json.dumps(shown, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    with read_connection() as conn:
        secrets = signing_secrets(conn, row.type, datetime.now(UTC))
    return body, secrets, current_app.config["PUSH_ALLOW_PRIVATE"]


def _decide(row: JobRow, caller, target: PushTarget, status: int | None, error: str | None, answer) -> None:
    error = scrub_error(error, current_app.config["MAX_ERROR_CHARS"])
    push_outcomes.log_delivery(row, caller, status, error)
    try:
        if status is not None and 200 <= status < 300:
            if target.mode == "sync":
                push_outcomes.completed(row, caller, _result(answer.body))
            return  # async: accepted; the target holds the job now, under its token
        if status in COME_BACK_STATUSES:
            delay = _retry_after(answer.headers.get("retry-after"), row)
            push_outcomes.come_back_later(row, caller, delay, f"{error} (sent again in {delay.total_seconds():g} s)")
            return
        push_outcomes.failed(row, caller, error or "the delivery failed")
    except QueueError as refused:
        # The lease ran out and the job was reaped (or an admin moved it) while the delivery was out.
        log.info("push delivery of job %d (%s): its answer was not applied: %s", row.id, row.type, refused.detail)


def _answer_error(answer: sending.Answer) -> str:
    text = answer.body[:ERROR_BODY_BYTES].decode("utf-8", errors="replace").strip()
    return f"HTTP {answer.status}" + (f": {text}" if text else "")


def _result(body: bytes) -> dict | None:
    """A 2xx body that is a JSON object (strict: no NaN or Infinity) within the size limit; else no result."""
    if len(body) > min(sending.MAX_ANSWER_BYTES, current_app.config["MAX_PAYLOAD_BYTES"]):
        return None
    try:
        value = json.loads(body, parse_constant=_refuse_constant)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _retry_after(value: str | None, row: JobRow) -> timedelta:
    """Retry-After as seconds or an HTTP date, at most MOST_RETRY_AFTER; without one, the backoff a failed
    attempt would wait (counting nothing)."""
    if value is not None:
        value = value.strip()
        try:
            delay = timedelta(seconds=int(value)) if value.isdigit() else parsedate_to_datetime(value) - _now()
        except (TypeError, ValueError, OverflowError):
            delay = None
        if delay is not None:
            return max(timedelta(0), min(delay, MOST_RETRY_AFTER))
    return backoff_delay(row.retry_count)


def _now() -> datetime:
    return datetime.now(UTC)
