"""OpenTelemetry tracing across the queues: one trace per job, off unless configured.

``configure_tracing(service)`` installs the SDK only when the standard variables ask for it
(``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, or
``OTEL_TRACES_EXPORTER=otlp|console``; ``OTEL_SDK_DISABLED=true`` wins). The OTLP exporter
(HTTP/protobuf) reads the rest of ``OTEL_*`` itself (headers, timeout, ``OTEL_SERVICE_NAME``).
Unconfigured, the API's no-op tracer makes every call here nearly free and no message
carries a trace context, so payloads stay exactly what they were (version 1).

The trace context travels inside each message as its optional ``traceparent`` field (W3C
Trace Context; ``dal.queues.messages``: a message with one is payload version 2):

- ``traced_submit`` wraps ``ImageProcessingQueue.submit``: a PRODUCER span ``send <queue>``
  (a child of the current span, or of the messages' own context when they already carry one,
  e.g. a requeued poison message; a new trace otherwise: the upload starts the job's trace),
  and every message sent gets that span's ``traceparent``;
- ``process_span(received)`` is the CONSUMER span ``process <queue>`` around a handler, a
  child of the context in the message, so the sends a handler makes join the same trace.

Span names and attributes follow the messaging semantic conventions: ``{operation}
{destination}``, ``messaging.system`` (Storage Queues has no registered value: a custom
one), ``messaging.destination.name``, ``messaging.operation.type``/``.name``,
``messaging.message.id``, ``messaging.batch.message_count``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Concatenate, ParamSpec, Protocol, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from dal.queues.messages import QueueMessage

if TYPE_CHECKING:  # the SDK loads only when tracing is on (configure_tracing)
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

    from dal.queues.consumable import ReceivedMessage

__all__ = [
    "MESSAGING_SYSTEM",
    "configure_tracing",
    "disable_tracing",
    "flush",
    "process_span",
    "stitch_span",
    "traced_submit",
    "tracing_requested",
]

MESSAGING_SYSTEM = "azure_storage_queues"
_PROPAGATOR = TraceContextTextMapPropagator()
_tracer: trace.Tracer = trace.NoOpTracer()  # replaced by configure_tracing
_lock = threading.Lock()
_provider: TracerProvider | None = None


class _Sender(Protocol):
    """What ``traced_submit`` reads of the queue whose ``submit`` it wraps."""

    @property
    def logical_name(self) -> str: ...


_S = TypeVar("_S", bound=_Sender)
_P = ParamSpec("_P")
_Messages = QueueMessage | Sequence[QueueMessage]


def tracing_requested(environ: dict[str, str] | None = None) -> bool:
    """Do the standard OTEL_* variables ask for traces?"""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def configure_tracing(service: str, *, exporter: SpanExporter | None = None) -> bool:
    """Install a TracerProvider for this process when asked to; returns whether tracing is on.

    Call it in each process that does work (after a fork: the batch processor's thread does
    not survive one); idempotent. ``exporter`` (tests: an in-memory one) traces into it
    without touching OpenTelemetry's global provider; ``disable_tracing`` undoes that.
    """
    global _provider, _tracer
    if exporter is None and not tracing_requested():
        return False
    with _lock:
        if _provider is not None:
            return True
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor

        resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or service})
        provider = TracerProvider(resource=resource)
        if exporter is not None:
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            _provider, _tracer = provider, provider.get_tracer("photomosaics")
            return True
        if os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
        _provider, _tracer = provider, provider.get_tracer("photomosaics")
        return True


def disable_tracing() -> None:
    """Back to the no-op tracer (tests)."""
    global _provider, _tracer
    with _lock:
        if _provider is not None:
            _provider.shutdown()
        _provider, _tracer = None, trace.NoOpTracer()


def flush(timeout_millis: int = 5000) -> None:
    """Export what is buffered (roles call it before ``os._exit``)."""
    if _provider is not None:
        _provider.force_flush(timeout_millis)


def _traceparent(span: trace.Span) -> str | None:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent")


def _context_of(traceparent: str | None) -> otel_context.Context | None:
    return _PROPAGATOR.extract({"traceparent": traceparent}) if traceparent else None


def _parent_for(messages: Sequence[QueueMessage]) -> otel_context.Context | None:
    if trace.get_current_span().get_span_context().is_valid:
        return None  # the current context
    carried = {m.traceparent for m in messages}
    return _context_of(carried.pop()) if len(carried) == 1 else None


def traced_submit(
    submit: Callable[Concatenate[_S, _Messages, _P], None],
) -> Callable[Concatenate[_S, _Messages, _P], None]:
    """Decorator for ``submit(self, messages, ...)`` of a queue with ``logical_name``."""

    def wrapper(self: _S, messages: _Messages, /, *args: _P.args, **kwargs: _P.kwargs) -> None:
        batch = [messages] if isinstance(messages, QueueMessage) else list(messages)
        if not batch:
            submit(self, batch, *args, **kwargs)
            return
        attributes = _attributes(self.logical_name, "send")
        if len(batch) > 1:
            attributes["messaging.batch.message_count"] = len(batch)
        attributes["photomosaics.request_id"] = batch[0].request_id
        with _tracer.start_as_current_span(
            f"send {self.logical_name}", context=_parent_for(batch), kind=SpanKind.PRODUCER, attributes=attributes
        ) as span:
            traceparent = _traceparent(span) if span.is_recording() else None
            if traceparent is not None:
                batch = [dataclasses.replace(m, traceparent=traceparent) for m in batch]
            submit(self, batch, *args, **kwargs)

    functools.update_wrapper(wrapper, submit)  # in place: wraps() would hide the signature from mypy
    return wrapper


def _attributes(queue: str, operation: str) -> dict[str, AttributeValue]:
    return {
        "messaging.system": MESSAGING_SYSTEM,
        "messaging.destination.name": queue,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
    }


@contextmanager
def process_span(received: ReceivedMessage, *, queue: str) -> Iterator[trace.Span]:
    """The CONSUMER span of handling one message, a child of the context it carries."""
    message = received.message
    attributes = _attributes(queue, "process")
    attributes["messaging.message.id"] = received.id
    attributes["photomosaics.request_id"] = message.request_id
    attributes["photomosaics.dequeue_count"] = received.dequeue_count
    with _tracer.start_as_current_span(
        f"process {queue}",
        context=_context_of(message.traceparent),
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise


@contextmanager
def stitch_span(request_id: str, slices: int) -> Iterator[trace.Span]:
    """The INTERNAL span of stitching a job's slices into its mosaic (a child of the
    ``process sliceresponse`` span that completed the set), so a trace shows the stitch time."""
    attributes: dict[str, AttributeValue] = {"photomosaics.request_id": request_id, "photomosaics.slices": slices}
    with _tracer.start_as_current_span("stitch", kind=SpanKind.INTERNAL, attributes=attributes) as span:
        yield span
