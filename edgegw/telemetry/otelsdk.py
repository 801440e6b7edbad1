"""The OpenTelemetry SDK's export pipeline, built class by class (no entry points: the
frozen binary has none). Imported only when tracing is on (edgegw.telemetry.tracing)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
    get_current_span,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from edgegw.telemetry.spanqueue import SpanQueue

KINDS = {1: SpanKind.INTERNAL, 2: SpanKind.SERVER, 3: SpanKind.CLIENT}
SAMPLED = TraceFlags(TraceFlags.SAMPLED)
OK, ERROR = Status(StatusCode.UNSET), Status(StatusCode.ERROR)


@dataclass(frozen=True, slots=True)
class Parent:
    """A client's trace context, as its `traceparent` and `tracestate` said."""

    trace_id: int
    span_id: int
    sampled: bool
    state: str


class _Resource(Resource):
    """The process's resource, its hash computed once: the SDK's encoder groups every span
    by resource, and `Resource.__hash__` JSON-encodes the attributes on each call (a seventh
    of the encoding time of a span)."""

    def __init__(self, resource: Resource) -> None:
        super().__init__(resource.attributes, resource.schema_url)
        self._hash = super().__hash__()

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return other is self or super().__eq__(other)


class Pipeline:
    """Ended spans, bounded by the queue, through one batch processor (its own thread) to
    the OTLP/HTTP protobuf exporter."""

    def __init__(
        self, endpoint: str, version: str, queue: SpanQueue, timeout_s: float, batch: int
    ) -> None:
        self.queue = queue
        self.resource = _Resource(
            Resource(
                {
                    "service.name": "edgegw",
                    "service.version": version,
                    "telemetry.sdk.language": "python",
                }
            ).merge(OTELResourceDetector().detect())  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
        )
        self.scope = InstrumentationScope("edgegw", version)
        self.exporter = _Counting(OTLPSpanExporter(endpoint=endpoint, timeout=timeout_s), queue)
        # The processor's own queue is one larger than ours, so it never drops uncounted.
        self.processor = BatchSpanProcessor(
            self.exporter, max_queue_size=queue.limit + 1, max_export_batch_size=batch
        )
        self.propagator = TraceContextTextMapPropagator()

    def parent(self, headers: Sequence[tuple[bytes, bytes]]) -> Parent | None:
        """The client's trace context; None when its `traceparent` is absent or invalid."""
        carrier = {
            name.decode(): value.decode("latin-1")
            for name, value in headers
            if name == b"traceparent" or name == b"tracestate"
        }
        ctx = get_current_span(self.propagator.extract(carrier)).get_span_context()
        if not ctx.is_valid:
            return None
        return Parent(
            ctx.trace_id, ctx.span_id, ctx.trace_flags.sampled, ctx.trace_state.to_header()
        )

    def export(
        self,
        name: str,
        ids: tuple[int, int, int | None],
        remote_parent: bool,
        kind: int,
        attributes: dict[str, Any],
        events: list[tuple[str, dict[str, Any], int]] | None,
        times: tuple[int, int],
        error: bool,
        trace_state: str,
    ) -> None:
        """Queue an ended span for export, or count it dropped when the queue is full.
        `ids`: (trace id, span id, parent span id or None); `times`: (start, end) in ns."""
        if not self.queue.admit():
            return
        trace_id, span_id, parent_id = ids
        state = TraceState.from_header([trace_state]) if trace_state else None
        parent = None
        if parent_id is not None:
            parent = SpanContext(
                trace_id, parent_id, is_remote=remote_parent, trace_flags=SAMPLED, trace_state=state
            )
        self.processor.on_end(
            ReadableSpan(
                name=name,
                context=SpanContext(
                    trace_id, span_id, is_remote=False, trace_flags=SAMPLED, trace_state=state
                ),
                parent=parent,
                resource=self.resource,
                attributes=attributes,
                events=tuple(Event(n, a, ts) for n, a, ts in events) if events else (),
                kind=KINDS[kind],
                status=ERROR if error else OK,
                start_time=times[0],
                end_time=times[1],
                instrumentation_scope=self.scope,
            )
        )

    def force_flush(self) -> bool:
        return self.processor.force_flush()

    def shutdown(self) -> None:
        self.processor.shutdown()  # type: ignore[no-untyped-call]


class _Counting(SpanExporter):
    """The exporter, telling the queue what it took and what the collector refused."""

    def __init__(self, inner: SpanExporter, queue: SpanQueue) -> None:
        self.inner = inner
        self.queue = queue

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.queue.taken(len(spans))
        try:
            result = self.inner.export(spans)
        except Exception:  # the SDK's exporter logs its own failures
            result = SpanExportResult.FAILURE
        self.queue.done(len(spans), result is SpanExportResult.SUCCESS)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)
