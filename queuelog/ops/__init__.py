"""Operations: Prometheus metrics, health checks, request and state-change logs, retention.

``init_app`` wires it into the app; ``observe_changes`` is the queue's one call into it for every recorded
state change. See metrics.py (counters, gauges, multiprocess mode), db_health.py (PostgreSQL's vacuum:
dead rows, table sizes, a transaction holding it back), logging_setup.py (log lines) and purge.py (retention).
"""

from __future__ import annotations

import logging
import time

from flask import Flask, g, has_request_context

from . import logging_setup, metrics
from .routes import bp

log = logging.getLogger("queuelog.ops")


def init_app(app: Flask) -> None:
    """Set up logging, register /metrics, /healthz and /readyz, and time and log every request."""
    logging_setup.configure_logging(app.config["LOG_FORMAT"])
    app.register_blueprint(bp)
    app.before_request(_begin_request)
    app.after_request(_finish_request)
    app.teardown_request(_flush_changes)


def observe_changes(entries: list[tuple]) -> None:
    """Count and log state changes: the (row, from_status, event, actor, error) entries the queue records.

    The queue calls this inside its write transaction. During a request the entries wait until the request's
    work is done, so a slow log pipe never holds the database's write lock; elsewhere (CLI) they go at once.
    """
    if has_request_context():
        g.setdefault("queuelog_changes", []).extend(entries)
    else:
        _publish(entries)


def observe_deletions(rows: list, actor: str) -> None:
    """Log the jobs an admin deleted (their event logs went with them), after the delete committed."""
    try:
        logging_setup.log_deletions(rows, actor)
    except Exception:  # noqa: BLE001 — logging must never fail a change already made
        log.exception("could not log %d deleted jobs", len(rows))


def _publish(entries: list[tuple]) -> None:
    if not entries:
        return
    try:
        metrics.count_changes(entries)
        logging_setup.log_changes(entries)
    except Exception:  # noqa: BLE001 — counting and logging must never undo or fail a state change
        log.exception("could not count or log %d state changes", len(entries))


def _begin_request() -> None:
    g.queuelog_started = time.perf_counter()
    logging_setup.assign_request_id()


def _finish_request(response):
    _publish(g.pop("queuelog_changes", []))
    try:
        metrics.observe_request(response)
        logging_setup.log_request(response)
    except Exception:  # noqa: BLE001 — the answer matters more than its metric or log line
        log.exception("could not time or log %s %s", response.status_code, type(response).__name__)
    return response


def _flush_changes(_error=None) -> None:
    # Changes of a request whose response hooks never ran are still counted and logged.
    _publish(g.pop("queuelog_changes", []))
