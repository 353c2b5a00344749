"""Logs: one line per request and one per job state change, as plain text or as JSON lines.

What a line holds is chosen field by field — method, path (never the query string), status, duration, the
API key's *name*, the request id, and for a state change the job's id, type, event, statuses and actor.
Never the Authorization header, a key's secret, a payload, a result, or a worker's error text.

``QUEUELOG_LOG_FORMAT=text`` (default) writes ``time LEVEL logger event key=value … pid=N``;
``QUEUELOG_LOG_FORMAT=json`` writes one JSON object per line for log shippers. Lines go to stderr (gunicorn
passes its workers' stderr on) and also propagate to the root logger, so a host application's or pytest's
handlers see them too.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
import uuid
from datetime import UTC, datetime

from flask import g, has_request_context, request
from flask.logging import default_handler

from ..core.scrub import scrub_error
from ..states import Event

REQUEST_ID_HEADER = "X-Request-Id"
# A request id from outside is echoed into logs and headers: accept only short, plain tokens
# (UUIDs, hex trace ids, ULIDs, "trace:span") so it cannot forge log lines or inject headers.
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_BARE_VALUE = re.compile(r"^[A-Za-z0-9._:/@+,*-]+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

request_log = logging.getLogger("queuelog.request")
job_log = logging.getLogger("queuelog.jobs")

FORMATS = ("text", "json")


def configure_logging(log_format: str) -> None:
    """Give the ``queuelog`` logger (also Flask's app logger) one stderr handler in ``log_format``."""
    log_format = (log_format or "text").lower()
    if log_format not in FORMATS:
        raise ValueError(f"QUEUELOG_LOG_FORMAT must be text or json, not {log_format!r}")
    logger = logging.getLogger("queuelog")
    # create_app may run many times in one process (tests): replace our handler rather than stack another.
    for handler in list(logger.handlers):
        if isinstance(handler, _StderrHandler) or handler is default_handler:
            logger.removeHandler(handler)
    handler = _StderrHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def request_id() -> str | None:
    """The current request's id (taken from X-Request-Id when valid, else generated), or None outside one."""
    if not has_request_context():
        return None
    return g.get("request_id") or assign_request_id()


def log_changes(entries: list[tuple]) -> None:
    """One line per recorded state change: entries are the (row, from_status, event, actor, error) of ``_record``."""
    rid = request_id()
    for row, from_status, event, actor, error in entries:
        quarantined = event == Event.REAPED and (error or "").startswith("quarantined")
        fields = {
            "job_id": row.id,
            "type": row.type,
            "event": event,
            "from": from_status,
            "to": row.status,
            "actor": actor,
            "attempt": row.retry_count,
        }
        if quarantined:
            fields["quarantined"] = True
        if rid:
            fields["request_id"] = rid
        _emit(job_log, logging.WARNING if quarantined else logging.INFO, "job_changed", fields)


def log_deletions(rows: list, actor: str) -> None:
    """One line per job an admin deleted: what it was, and who deleted it."""
    rid = request_id()
    for row in rows:
        fields = {"job_id": row.id, "type": row.type, "status": row.status, "actor": actor}
        if rid:
            fields["request_id"] = rid
        _emit(job_log, logging.INFO, "job_deleted", fields)


# --- request hooks ---------------------------------------------------------------------------------


def assign_request_id() -> str:
    """Take the request id from X-Request-Id when it is a plain token, else make one up."""
    offered = request.headers.get(REQUEST_ID_HEADER, "")
    g.request_id = offered if _REQUEST_ID.match(offered) else uuid.uuid4().hex
    return g.request_id


def log_request(response) -> None:
    """Write the request's line (timed from ``g.queuelog_started``) and echo its id in X-Request-Id."""
    rid = request_id()
    response.headers[REQUEST_ID_HEADER] = rid
    started = g.get("queuelog_started")
    caller = g.get("caller")
    fields = {
        "method": request.method,
        # The path only: query strings carry filters and cursors nobody needs in a log. Redact anything
        # that looks like a secret in case someone pasted a key into a URL.
        "path": scrub_error(request.path, 1000),
        "status": response.status_code,
        "duration_ms": round((time.perf_counter() - started) * 1000, 2) if started else None,
        "key": caller.name if caller is not None else None,
        "request_id": rid,
    }
    user = g.get("_login_user")  # Flask-Login's cache: an admin already loaded for this request, if any
    if user is not None and getattr(user, "is_authenticated", False) and hasattr(user, "username"):
        fields["user"] = user.username
    _emit(request_log, logging.INFO, "request", fields)


# --- formatting ------------------------------------------------------------------------------------


def _emit(logger: logging.Logger, level: int, event: str, fields: dict) -> None:
    # The message itself is the text rendering, so any handler (pytest's, a host app's) shows the fields;
    # the JSON formatter uses the fields themselves.
    if not logger.isEnabledFor(level):
        return
    # makeRecord + handle is what logger.log does, less the stack walk that looks up the caller's file
    # and line (two lines per job on the batch path; the formatters never show them).
    record = logger.makeRecord(
        logger.name,
        level,
        __file__,
        0,
        "%s %s",
        (event, _logfmt(fields)),
        None,
        extra={"queuelog_event": event, "queuelog_fields": fields},
    )
    logger.handle(record)


def _logfmt(fields: dict) -> str:
    return " ".join(f"{name}={_text_value(value)}" for name, value in fields.items())


def _text_value(value) -> str:
    if type(value) is int:  # ids, statuses, attempts: always bare (bool, a subclass, is handled below)
        return str(value)
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    rendered = _rendered.get(text)
    if rendered is None:
        # Quote (JSON-style, which escapes newlines and quotes) anything that could break the key=value shape.
        rendered = text if _BARE_VALUE.match(text) else json.dumps(text)
        if len(_rendered) < _RENDERED_MAX:
            _rendered[text] = rendered
    return rendered


# Most values recur on every line (job types, events, statuses, key names): check each once. Bounded,
# since request ids and paths do not recur.
_rendered: dict[str, str] = {}
_RENDERED_MAX = 4096


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, tz=UTC)
    second = moment.replace(microsecond=0)
    global _last_second
    cached = _last_second  # one read: another thread may replace it meanwhile
    if cached[0] != second:  # many lines share a second: format its part once
        cached = _last_second = (second, second.strftime("%Y-%m-%dT%H:%M:%S."))
    return cached[1] + f"{moment.microsecond // 1000:03d}Z"


_last_second: tuple = (None, "")


class TextFormatter(logging.Formatter):
    """``2026-01-01T12:00:00.000Z INFO queuelog.request request method=GET …`` — one line per record."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if not hasattr(record, "queuelog_fields"):
            # Other code logs request paths with %s: escape control characters so nobody can forge a
            # line. Our own lines need not: _text_value quoted every value that could.
            message = _CONTROL.sub(lambda m: repr(m.group())[1:-1], message)
        else:
            # Which of the server's processes wrote it: one stuck or overloaded process shows up by its pid.
            message += f" pid={record.process}"
        line = f"{_timestamp(record)} {record.levelname} {record.name} {message}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message (the event name for structured lines) and fields."""

    def format(self, record: logging.LogRecord) -> str:
        body = {"time": _timestamp(record), "level": record.levelname.lower(), "logger": record.name}
        fields = getattr(record, "queuelog_fields", None)
        if fields is not None:
            body["message"] = record.queuelog_event
            body.update({name: value for name, value in fields.items() if name not in body})
            body["pid"] = record.process
        else:
            body["message"] = record.getMessage()
        if record.exc_info:
            body["exception"] = self.formatException(record.exc_info)
        return json.dumps(body, default=str, separators=(",", ":"))


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time of the record (so captured streams see it)."""

    def __init__(self):
        logging.Handler.__init__(self)

    @property
    def stream(self):
        return sys.stderr
