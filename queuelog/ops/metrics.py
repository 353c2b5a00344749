"""Prometheus metrics: counters and a latency histogram counted by each process, gauges read from the database.

Counters and the histogram count what *this* process did. Under gunicorn, with several worker processes,
prometheus-client's multiprocess mode keeps them in files under ``PROMETHEUS_MULTIPROC_DIR``, so a scrape
answered by any worker adds up every worker's counts (``gunicorn.conf.py`` sets the directory up before the
workers start). The variable must be set before ``prometheus_client`` is first imported; without it
(``flask run``, tests, one process) the counts live in memory.

The gauges — jobs by status × type × priority, the age of the longest-waiting due job per type, stalled jobs,
each type's pause and concurrency limit — are not counted anywhere: they are read from the database at scrape
time, so every worker reports the same truth. Each is one query served by an index (see ``DatabaseCollector``).
On PostgreSQL the scrape also reads the catalog's view of vacuum: dead rows, table sizes, and the oldest
transaction holding vacuum back (``db_health``).

Reading the other workers' files races with their writing (see ``WorkerFilesCollector``): an empty file counts
as nothing, and a read that still fails after a few tries raises ``CountersUnreadable`` (the view answers
503), never a 500.
"""

from __future__ import annotations

import collections
import glob
import os
import re
import struct
import time
from datetime import datetime

from flask import current_app, g, request
from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest, values
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from sqlalchemy import func, select

from ..core.clock import utcnow
from ..core.problems import TYPE_SLUGS
from ..database.transactions import read_connection
from ..models import Job, Priority, TypeSettings
from ..reads import figures
from ..states import RETRYABLE, Event, JobStatus, spell
from . import db_health

jobs = Job.__table__
type_settings = TypeSettings.__table__

if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    # prometheus-client writes a file per process there and fails if the directory is missing.
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)
# Multiprocess mode never exports the *_created series; leave them out everywhere so both modes read alike.
disable_created_metrics()

# Every event of states.Event, each counted on its own counter, queuelog_jobs_<event>_total
# (tests/integration/state_machine/test_states_table.py checks that none is missing).
_EVENT_HELP = {
    Event.ENQUEUED: "Jobs added to the queue.",
    Event.CLAIMED: "Jobs handed to a worker by a claim.",
    Event.COMPLETED: "Jobs a worker completed.",
    Event.FAILED: "Jobs a worker failed for good (no retry left, or not retryable).",
    Event.REQUEUED: "Failed attempts put back to pending for another try.",
    Event.REAPED: "Running jobs taken back by the reaper after their lease expired.",
    Event.CANCELLED: "Waiting or pending jobs cancelled by their producer or an admin.",
    Event.RETRIED: f"{spell(RETRYABLE).capitalize()} jobs an admin put back to pending.",
    Event.RELEASED: "Running jobs given back to the queue without counting a failure.",
    Event.EXPIRED: "Pending jobs cancelled because no worker claimed them before their expires_at.",
    Event.TIMED_OUT: "Runs the reaper took back because they outlived their timeout_seconds.",
    Event.RESCHEDULED: "Scheduled or backing-off jobs an admin made due now.",
    Event.DEPENDENCIES_MET: "Waiting jobs whose parents finished as they asked: now pending.",
    Event.DEPENDENCY_FAILED: "Waiting jobs cancelled because a parent failed for good or was cancelled.",
    Event.DEPENDENCY_RETRIED: "Jobs a parent's failure cancelled, waiting again after an admin retried it.",
    Event.DELIVERED: "Push deliveries the server made to a type's target, answered or not.",
}
# registry=None: each scrape builds its own registry (see exposition), so repeated create_app calls in one
# process never register a metric twice. Keyed by the plain name: entries may carry an Event or its text.
EVENT_COUNTERS = {
    event.value: Counter(f"queuelog_jobs_{event.value}_total", text, registry=None)
    for event, text in _EVENT_HELP.items()
}
QUARANTINED = Counter(
    "queuelog_jobs_quarantined_total",
    "Jobs the reaper failed because their workers died holding them MAX_STALLS times.",
    registry=None,
)
REJECTED = Counter(
    "queuelog_rejected_requests_total",
    "Requests refused with a problem+json answer, by reason (the problem type).",
    ["reason"],
    registry=None,
)
REQUEST_DURATION = Histogram(
    "queuelog_request_duration_seconds",
    "Time to answer an API request, by route (URL rule) and method.",
    ["route", "method"],
    registry=None,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
CLAIMS_LIMITED = Counter(
    "queuelog_claims_limited_total",
    "Claims that left due jobs of a type waiting because of flow control, by type and reason "
    "(paused, concurrency, rate, key_concurrency).",
    ["type", "reason"],
    registry=None,
)
PROCESS_METRICS = [*EVENT_COUNTERS.values(), QUARANTINED, REJECTED, REQUEST_DURATION, CLAIMS_LIMITED]

# A problem's status → the reason label: the slug of its problem type. A 500 is not counted: it is our
# fault, not a refusal of the request.
_REASONS = {status: slug for status, slug in TYPE_SLUGS.items() if status != 500}
PROBLEM_MIMETYPE = "application/problem+json"


def multiprocess_mode() -> bool:
    """True when counters live in PROMETHEUS_MULTIPROC_DIR files (decided when prometheus_client was imported)."""
    return values.ValueClass is not values.MutexValue


def count_changes(entries: list[tuple]) -> None:
    """Count recorded state changes: entries are the (row, from_status, event, actor, error) of ``_record``."""
    # One increment per event kind, not per job: under gunicorn each increment writes a shared file.
    per_event = collections.Counter(event for _row, _from_status, event, _actor, _error in entries)
    for event, count in per_event.items():
        counter = EVENT_COUNTERS.get(event)
        if counter is not None:
            counter.inc(count)
    quarantined = sum(
        1
        for _row, _from_status, event, _actor, error in entries
        if event == Event.REAPED and (error or "").startswith("quarantined")
    )
    if quarantined:
        QUARANTINED.inc(quarantined)


def count_refusals(refusals) -> None:
    """Count the types a claim found held back by flow control: (type, reason) rows of FLOW_REFUSALS."""
    for refusal in refusals:
        CLAIMS_LIMITED.labels(type=refusal.type, reason=refusal.reason).inc()


def observe_request(response) -> None:
    """Time an API request (started at ``g.queuelog_started``) and count it if it was refused."""
    rule = request.url_rule
    started = g.get("queuelog_started")
    # Label by URL rule, never the raw path: /jobs/1, /jobs/2 … are one series, and unknown paths none.
    if rule is not None and started is not None and request.blueprint == "api":
        REQUEST_DURATION.labels(route=rule.rule, method=request.method).observe(time.perf_counter() - started)
    if response.mimetype == PROBLEM_MIMETYPE and response.status_code in _REASONS:
        REJECTED.labels(reason=_REASONS[response.status_code]).inc()


# --- the scrape --------------------------------------------------------------------------------------


class CountersUnreadable(Exception):
    """The workers' counter files could not be read, even after a few tries; the scrape should be retried."""


def exposition() -> bytes:
    """The text format for one scrape: process counters (summed over workers) and database gauges."""
    registry = CollectorRegistry(auto_describe=False)
    if multiprocess_mode():
        WorkerFilesCollector(registry, path=os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
    else:
        for metric in PROCESS_METRICS:
            registry.register(metric)
    registry.register(DatabaseCollector(current_app.config["JOB_TYPES"]))
    return generate_latest(registry)


class WorkerFilesCollector(MultiProcessCollector):
    """prometheus-client's multiprocess collector, safe to run while other workers create and write their files.

    prometheus-client creates a worker's file and only then sizes it, so for an instant the file is empty, and
    stays empty for good if the worker is killed in between; its own collector then raises ``struct.error`` and
    the whole scrape fails. A file too short for its 8-byte header holds no counts yet, so it is left out: a
    file's size only grows, and once it has a header every read of it is whole. Any other failed read (a file
    written or removed under the reader) is tried again a few times with a fresh listing; if it keeps failing,
    ``CountersUnreadable``: a scrape that says "try again" is honest, a partial sum would look like counters
    being reset.
    """

    HEADER_BYTES = 8  # the used-bytes count and its padding
    # prometheus-client's own names, <type>_<pid>.db (gunicorn.conf.py clears the same): the directory may hold
    # other files, such as queuelog.db when it is instance/, and reading those as counters fails every scrape.
    FILE_NAME = re.compile(r"(counter|histogram|summary|gauge_[a-z]+)_\d+\.db")
    ATTEMPTS = 3
    PAUSE_SECONDS = 0.05

    def collect(self):
        """Every worker's counters and histograms, summed."""
        for attempt in range(1, self.ATTEMPTS + 1):
            try:
                return list(self.merge(self._files_with_counts(), accumulate=True))
            except (OSError, struct.error, ValueError, RuntimeError) as error:
                # ValueError: undecodable keys; RuntimeError: prometheus-client's "read beyond file size".
                failure = error
                if attempt < self.ATTEMPTS:
                    time.sleep(self.PAUSE_SECONDS * attempt)
        raise CountersUnreadable(f"{failure.__class__.__name__}: {failure}") from failure

    def _files_with_counts(self) -> list[str]:
        files = []
        for path in glob.glob(os.path.join(self._path, "*.db")):
            if not self.FILE_NAME.fullmatch(os.path.basename(path)):
                continue
            try:
                if os.path.getsize(path) >= self.HEADER_BYTES:
                    files.append(path)
            except FileNotFoundError:
                pass  # removed since the listing (a dead worker's live gauges): nothing to count
        return files


class DatabaseCollector:
    """Gauges computed from the database at scrape time, each from an index.

    - ``queuelog_jobs``: one grouped count over ``ix_jobs_type_status_priority`` (type, status, priority,
      run_at) — an index-only scan, no table rows read; purging finished jobs keeps it small.
    - ``queuelog_oldest_pending_age_seconds``: ``figures.oldest_due``, as the dashboard's tile: for each
      (type, priority) that has pending jobs, seeks into the same index (run_at is its last column), so it
      costs O(log n) however deep the queue.
    - ``queuelog_stalled_jobs``: ``figures.stalled``, the running jobs' range of ``ix_jobs_status_id``, each
      lease checked.
    - ``queuelog_type_paused`` (every type: 1 paused, 0 not) and ``queuelog_type_concurrency_limit`` (the
      types that have one): the small type_settings table, read whole.
    - On PostgreSQL only, ``queuelog_db_dead_tuples``, ``queuelog_db_table_bytes`` and
      ``queuelog_db_oldest_transaction_seconds``: the catalog's view of vacuum (db_health.py); no table read.
    """

    def __init__(self, job_types: list[str]):
        self.job_types = list(job_types)

    def collect(self):
        """Read the figures and yield the gauge families."""
        now = utcnow()
        with read_connection() as conn:
            counts = conn.execute(
                select(jobs.c.type, jobs.c.status, jobs.c.priority, func.count()).group_by(
                    jobs.c.type, jobs.c.status, jobs.c.priority
                )
            ).all()
            pending_groups = [(t, p) for t, s, p, n in counts if s == JobStatus.PENDING.value and n]
            oldest = figures.oldest_due(conn, now, pending_groups)
            stalled = conn.execute(select(func.count()).select_from(jobs).where(figures.stalled(now))).scalar_one()
            settings = conn.execute(
                select(type_settings.c.type, type_settings.c.paused, type_settings.c.concurrency_limit)
            ).all()
            # PostgreSQL's own health, in this connection (its transaction is not counted as a held one).
            health = db_health.read(conn) if conn.dialect.name == "postgresql" else None
        yield self._jobs_family(counts)
        yield from self._flow_families(settings)
        yield self._oldest_family(oldest, now, {t for t, _ in pending_groups})
        yield GaugeMetricFamily(
            "queuelog_stalled_jobs", "Running jobs whose lease has expired (their worker probably died).", value=stalled
        )
        if health is not None:
            yield from db_health.families(health)

    def _flow_families(self, settings):
        paused = GaugeMetricFamily(
            "queuelog_type_paused", "1 when claims of the type are paused, else 0.", labels=["type"]
        )
        limit = GaugeMetricFamily(
            "queuelog_type_concurrency_limit",
            "The most jobs of the type that may run at once (only types with a limit).",
            labels=["type"],
        )
        by_type = {row.type: row for row in settings}
        for job_type in sorted(set(self.job_types) | set(by_type)):
            row = by_type.get(job_type)
            paused.add_metric([job_type], 1.0 if row is not None and row.paused else 0.0)
            if row is not None and row.concurrency_limit is not None:
                limit.add_metric([job_type], row.concurrency_limit)
        yield paused
        yield limit

    def _jobs_family(self, counts) -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            "queuelog_jobs", "Jobs in the database by status, type and priority.", labels=["status", "type", "priority"]
        )
        # Zeros for every allowed combination, so a series drops to 0 instead of vanishing.
        series = {
            (status.value, job_type, Priority.label_of(priority)): 0
            for status in JobStatus
            for job_type in self.job_types
            for priority in Priority
        }
        for job_type, status, priority, count in counts:
            series[(status, job_type, Priority.label_of(priority))] = count
        for labels, value in sorted(series.items()):
            family.add_metric(list(labels), value)
        return family

    def _oldest_family(self, oldest: dict[str, figures.OldestDue], now: datetime, types: set[str]) -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            "queuelog_oldest_pending_age_seconds",
            "Seconds the longest-waiting due pending job of each type has waited since it "
            "became due, the later of its run_at and its enqueue (0: none due).",
            labels=["type"],
        )
        for job_type in sorted(set(self.job_types) | types):
            first = oldest.get(job_type)
            family.add_metric([job_type], first.age(now).total_seconds() if first else 0.0)
        return family
