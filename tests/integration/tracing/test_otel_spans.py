"""OpenTelemetry spans (the ``otel`` extra): the server's PRODUCER span ``send <type>`` around an enqueue, the
worker's CONSUMER span ``process <type>`` around the handler, with the messaging attributes; the first attempt is
in the producer's trace, a retry a new trace with one link to it.

The app is served on a thread and the worker runs on threads (tests/support/in_process.py), so that the spans of
both ends reach the one in-memory exporter of the process's SDK provider.
"""

from __future__ import annotations

import functools
import json
import urllib.request

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, Sampler
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from queuelog.worker import PermanentError, Worker
from tests.support.api import bearer
from tests.support.in_process import running_worker, serving
from tests.worker_apps.harness import wait_until

tracer = trace.get_tracer("tests")


class _Switch(Sampler):
    """Samples every span while on, none while off. The provider stays for the rest of the process (OpenTelemetry
    lets the global one be set once), and the other tests' jobs must not take a recording span's context."""

    on = False

    def should_sample(self, *args, **kwargs):
        return (ALWAYS_ON if self.on else ALWAYS_OFF).should_sample(*args, **kwargs)

    def get_description(self) -> str:
        return "on while the tracing tests run"


_SWITCH = _Switch()


@functools.cache
def _exporter() -> InMemorySpanExporter:
    """The process's one SDK provider, set as the global one, exporting to memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=_SWITCH)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    assert trace.get_tracer_provider() is provider, "another tracer provider was set first"
    return exporter


@pytest.fixture(scope="module")
def recording():
    _SWITCH.on = True
    yield _exporter()
    _SWITCH.on = False


@pytest.fixture
def spans(recording):
    """The exporter, emptied of earlier tests' spans (each test's jobs have ids of their own database)."""
    recording.clear()
    return recording


@pytest.fixture
def url(app):
    with serving(app) as served:
        yield served


def post_job(url: str, secret: str, body: dict, headers: dict | None = None) -> dict:
    """POST /jobs over HTTP, as a producer in another process would, with ``headers`` (the trace context)."""
    request = urllib.request.Request(
        url + "/jobs",
        data=json.dumps(body).encode(),
        headers={**bearer(secret), "Content-Type": "application/json", **(headers or {})},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201
        return json.loads(response.read())


def enqueued_in_a_test_span(url: str, secret: str) -> tuple[dict, trace.SpanContext]:
    """A job enqueued while a test span is current, its context sent as the traceparent header."""
    with tracer.start_as_current_span("test producer") as span:
        headers: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(headers)
        job = post_job(url, secret, {"type": "email", "payload": {}}, headers)
    assert job["traceparent"] == headers["traceparent"]  # kept as sent
    return job, span.get_span_context()


def named(spans: InMemorySpanExporter, name: str, job_id: int | None = None) -> list:
    return [
        span
        for span in spans.get_finished_spans()
        if span.name == name and (job_id is None or span.attributes.get("messaging.message.id") == str(job_id))
    ]


def finished(spans: InMemorySpanExporter, name: str, job_id: int | None = None, count: int = 1) -> list:
    """The ``count`` finished spans called ``name`` (of job ``job_id``), once there are as many."""
    return wait_until(lambda: len(named(spans, name, job_id)) >= count and named(spans, name, job_id), 15)


def email_worker(outcomes):
    """A worker whose ``email`` handler makes a span of its own, then returns, raises or fails for good, as
    ``outcomes`` says in turn ("ok", "raise", "permanent")."""
    worker = Worker()
    turns = iter(outcomes)

    @worker.handler("email")
    def email(payload):
        with tracer.start_as_current_span("handler work"):
            outcome = next(turns, "ok")
            if outcome == "raise":
                raise ValueError("SMTP 451: try later")
            if outcome == "permanent":
                raise PermanentError("no such mailbox")
        return {}

    return worker


def test_the_first_attempts_handler_span_is_in_the_trace_the_producer_enqueued_in(spans, url, make_key):
    job, test_span = enqueued_in_a_test_span(url, make_key("producer"))
    with running_worker(email_worker(["ok"]), url, make_key("worker")):
        [work] = finished(spans, "handler work")
    [send] = finished(spans, "send email", job["id"])
    [process] = finished(spans, "process email", job["id"])
    assert work.context.trace_id == test_span.trace_id
    assert work.parent.span_id == process.context.span_id
    assert process.context.trace_id == test_span.trace_id
    assert process.parent.span_id == test_span.span_id and process.parent.is_remote  # the job's traceparent
    assert send.context.trace_id == test_span.trace_id and send.parent.span_id == test_span.span_id


@pytest.mark.parametrize("route", ["/jobs", "/jobs/batch"])
def test_each_enqueued_job_has_a_producer_span_with_the_messaging_attributes(spans, client, producer, route):
    bodies = [{"type": "email"}, {"type": "report"}] if route == "/jobs/batch" else [{"type": "email"}]
    answer = client.post(route, json={"jobs": bodies} if route == "/jobs/batch" else bodies[0], headers=producer)
    assert answer.status_code == 201, answer.get_json()
    jobs = answer.get_json()["jobs"] if route == "/jobs/batch" else [answer.get_json()]
    for body, job in zip(bodies, jobs, strict=True):
        [send] = named(spans, f"send {body['type']}", job["id"])
        assert send.kind == SpanKind.PRODUCER
        assert dict(send.attributes) == {
            "messaging.system": "queuelog",
            "messaging.destination.name": body["type"],
            "messaging.message.id": str(job["id"]),
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
        }


def test_the_handler_runs_in_a_consumer_span_with_the_messaging_attributes(spans, url, make_key):
    job, _ = enqueued_in_a_test_span(url, make_key("producer"))
    with running_worker(email_worker(["ok"]), url, make_key("worker")):
        [process] = finished(spans, "process email", job["id"])
    assert process.kind == SpanKind.CONSUMER
    assert process.status.status_code == StatusCode.UNSET
    assert dict(process.attributes) == {
        "messaging.system": "queuelog",
        "messaging.destination.name": "email",
        "messaging.message.id": str(job["id"]),
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
    }


def test_a_retry_runs_in_a_new_trace_with_one_link_to_the_producers(spans, url, make_key):
    job, test_span = enqueued_in_a_test_span(url, make_key("producer"))
    with running_worker(email_worker(["raise", "ok"]), url, make_key("worker")):
        first, second = finished(spans, "process email", job["id"], count=2)
    assert first.context.trace_id == test_span.trace_id and not first.links
    assert second.context.trace_id != test_span.trace_id and second.parent is None
    [link] = second.links
    assert (link.context.trace_id, link.context.span_id) == (test_span.trace_id, test_span.span_id)


def test_a_handlers_exception_is_recorded_on_its_consumer_span_as_an_error(spans, url, make_key):
    job, _ = enqueued_in_a_test_span(url, make_key("producer"))
    with running_worker(email_worker(["permanent"]), url, make_key("worker")):
        [process] = finished(spans, "process email", job["id"])
    assert process.status.status_code == StatusCode.ERROR
    [event] = process.events
    assert event.name == "exception" and event.attributes["exception.message"] == "no such mailbox"


def test_a_job_enqueued_without_trace_context_joins_its_producer_spans_trace(spans, url, make_key):
    job = post_job(url, make_key("producer"), {"type": "email"})
    with running_worker(email_worker(["ok"]), url, make_key("worker")):
        [process] = finished(spans, "process email", job["id"])
    [send] = named(spans, "send email", job["id"])
    assert job["traceparent"].split("-")[1:3] == [f"{send.context.trace_id:032x}", f"{send.context.span_id:016x}"]
    assert (process.context.trace_id, process.parent.span_id) == (send.context.trace_id, send.context.span_id)
