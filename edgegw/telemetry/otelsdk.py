"""The OpenTelemetry SDK's export pipeline, built class by class (no entry points: the
frozen binary has none). Imported only when tracing is on (edgegw.telemetry.tracing)."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from edgegw.telemetry.spanqueue import SpanQueue


def open_pipeline(
    endpoint: str, version: str, queue: SpanQueue, timeout_s: float, batch: int
) -> tuple[TracerProvider, TraceContextTextMapPropagator]:
    """A tracer provider whose ended spans go, bounded by `queue`, through one batch
    processor (its own thread) to the OTLP/HTTP protobuf exporter at `endpoint`."""
    resource = Resource(
        {"service.name": "edgegw", "service.version": version, "telemetry.sdk.language": "python"}
    ).merge(OTELResourceDetector().detect())  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    exporter = _Counting(OTLPSpanExporter(endpoint=endpoint, timeout=timeout_s), queue)
    # The processor's own queue is one larger than ours, so it never drops uncounted.
    processor = BatchSpanProcessor(
        exporter, max_queue_size=queue.limit + 1, max_export_batch_size=batch
    )
    provider = TracerProvider(
        sampler=ParentBased(ALWAYS_ON), resource=resource, id_generator=RandomIdGenerator()
    )
    provider.add_span_processor(_Bounded(processor, queue))
    return provider, TraceContextTextMapPropagator()


class _Bounded(SpanProcessor):
    """Hands an ended span to the batch processor only while fewer than `queue.limit`
    wait for export; the rest are counted dropped."""

    def __init__(self, inner: BatchSpanProcessor, queue: SpanQueue) -> None:
        self.inner = inner
        self.queue = queue

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self.queue.admit():
            self.inner.on_end(span)

    def shutdown(self) -> None:
        self.inner.shutdown()  # type: ignore[no-untyped-call]

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


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
