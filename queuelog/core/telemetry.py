"""OpenTelemetry spans around a job's enqueue and its run, with the ``otel`` extra (``pip install queuelog[otel]``).

The server makes a PRODUCER span ``send <type>`` around each job's enqueue, ``queuelog-worker`` a CONSUMER span
``process <type>`` around the handler, both with the OpenTelemetry messaging attributes. The job's W3C trace
context (trace_context.py) joins the two across processes and languages: the first attempt is a child of it; a
later attempt (after a retry) starts a trace of its own with a link to it, so one trace is not stretched over
hours of backoff and each attempt reads as one unit of work. The spans go to the global tracer provider: the
application configures an SDK and its exporter; without one they record nothing.

Without the extra, ``opentelemetry`` is never imported (looked for once, with ``find_spec``) and every function
here is a no-op: an enqueue or a run costs what it did before tracing existed.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

SYSTEM = "queuelog"
_NOTHING = contextlib.nullcontext()


@functools.cache
def _otel() -> _Otel | None:
    """What this module uses of opentelemetry, imported on first use; None when it is not installed."""
    try:
        if importlib.util.find_spec("opentelemetry") is None:
            return None
        return _Otel()
    except (ImportError, ValueError):  # a part missing, or an import refused: as if not installed
        return None


def enabled() -> bool:
    """Is opentelemetry installed (the ``otel`` extra), so that the server and the worker make spans?"""
    return _otel() is not None


class _Otel:
    """The tracer and the W3C propagator, made once per process."""

    def __init__(self):
        from opentelemetry import trace
        from opentelemetry.context import Context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.trace = trace
        self.Context = Context
        # The global provider's tracer, looked up through the proxy: an SDK configured later still gets the spans.
        self.tracer = trace.get_tracer(SYSTEM, _version())
        self.propagator = TraceContextTextMapPropagator()

    def stored(self, traceparent: str | None, tracestate: str | None):
        """The context a job's stored trace context stands for: empty (no parent) when it has none."""
        if traceparent is None:
            return self.Context()
        carrier = {"traceparent": traceparent}
        if tracestate:
            carrier["tracestate"] = tracestate
        return self.propagator.extract(carrier)


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(SYSTEM)
    except PackageNotFoundError:  # run from a source tree that was never installed
        return None


def _attributes(job_type: str, operation: str) -> dict[str, str]:
    return {
        "messaging.system": SYSTEM,
        "messaging.destination.name": job_type,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
    }


@dataclass(slots=True)
class Send:
    """One job's PRODUCER span and the trace context the job is to store.

    ``traceparent``/``tracestate`` are what the producer sent, kept as sent; only when it sent none and the span
    records (an SDK samples it) are they the span's own, so that the job's run can join its trace.
    """

    span: Any
    traceparent: str | None
    tracestate: str | None

    def sent(self, job_id: int | None) -> None:
        """The enqueue answered with this job (None: a dedupe hit on a job the caller may not see)."""
        if self.span is not None and job_id is not None:
            self.span.set_attribute("messaging.message.id", str(job_id))


@contextlib.contextmanager
def sending(jobs: Sequence[tuple[str, str | None, str | None]]) -> Iterator[list[Send]]:
    """A PRODUCER span ``send <type>`` for each job, given as (type, traceparent, tracestate), of one enqueue.

    Each is a child of the context its producer sent (else of the current one), and ends with the enqueue; an
    exception out of the enqueue is recorded on each and sets its status to ERROR.
    """
    otel = _otel()
    if otel is None:
        yield [Send(None, traceparent, tracestate) for _, traceparent, tracestate in jobs]
        return
    sends = [_start_send(otel, *job) for job in jobs]
    try:
        yield sends
    except Exception as exc:
        for send in sends:
            send.span.record_exception(exc)
            send.span.set_status(otel.trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}")
        raise
    finally:
        for send in sends:
            send.span.end()


def _start_send(otel: _Otel, job_type: str, traceparent: str | None, tracestate: str | None) -> Send:
    parent = None if traceparent is None else otel.stored(traceparent, tracestate)
    span = otel.tracer.start_span(
        f"send {job_type}", context=parent, kind=otel.trace.SpanKind.PRODUCER, attributes=_attributes(job_type, "send")
    )
    if traceparent is None and span.is_recording():
        carrier: dict[str, str] = {}
        otel.propagator.inject(carrier, context=otel.trace.set_span_in_context(span))
        traceparent, tracestate = carrier.get("traceparent"), carrier.get("tracestate")
    return Send(span, traceparent, tracestate)


def processing(
    job_type: str, job_id: int, traceparent: str | None, tracestate: str | None, first_attempt: bool
) -> AbstractContextManager:
    """The CONSUMER span ``process <type>`` around a handler's run, current while it runs (its own spans are
    children); an exception out of the handler is recorded and sets its status to ERROR.

    The first attempt is a child of the job's trace context; a later one is the root of a new trace, with one
    link to that context.
    """
    otel = _otel()
    if otel is None:
        return _NOTHING
    parent, links = otel.stored(traceparent, tracestate), ()
    if not first_attempt:
        linked = otel.trace.get_current_span(parent).get_span_context()
        parent, links = otel.Context(), ([otel.trace.Link(linked)] if linked.is_valid else [])
    attributes = _attributes(job_type, "process")
    attributes["messaging.message.id"] = str(job_id)
    return otel.tracer.start_as_current_span(
        f"process {job_type}", context=parent, kind=otel.trace.SpanKind.CONSUMER, attributes=attributes, links=links
    )
