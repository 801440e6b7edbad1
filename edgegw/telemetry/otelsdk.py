"""The export pipeline: ended spans as plain tuples, batched by an export thread of
edgegw's own, encoded in the Rust core (`encode_otlp_spans`, rust/src/otlp_trace.rs) and
POSTed by the OpenTelemetry SDK's OTLP/HTTP exporter client. Imported only when tracing is
on (edgegw.telemetry.tracing); the SDK's parts are built by class (no entry points: the
frozen binary has none).

The SDK still reads the client's `traceparent` (its W3C propagator), detects the resource
(OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) and sends each batch: `OTLPSpanExporter`'s
HTTP client, so its endpoint, OTEL_EXPORTER_OTLP_(TRACES_)HEADERS, _COMPRESSION,
_CERTIFICATE, _CLIENT_KEY, _CLIENT_CERTIFICATE handling, retries with backoff and timeout
are the SDK's. What it no longer does is turn each span into a `ReadableSpan`, queue it in
its `BatchSpanProcessor` and encode it with `encode_spans` (the protobuf message built in
Python, one call per span, attribute and value): measured to be the bottleneck, replaced
here. Four spans a request (server, parse, route, upstream attempt), in process
(bench.tracing_encode, 1,024 requests in batches of 512, load 4.2-6.0 on 2 cores shared with
other work): `ReadableSpan` + `encode_spans` + serialization 341 µs per request (rounds
298-378), the tuple + `encode_otlp_spans` 16 µs (12-18), the same 1,021,576 bytes. The whole
pipeline of a request in process: 380-520 µs before, 105-115 µs now (load 3.4-4.1). Through
a gateway (bench.tracing) the saving did not show in two runs on that loaded machine
(bench/README.md).

OTEL_BSP_SCHEDULE_DELAY (default 5000 ms) is honoured as the SDK's processor did: a batch
leaves when a full batch (512 spans, edgegw.telemetry.tracing) waits or the delay has passed.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.trace import get_current_span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from edgegw._core import encode_otlp_spans
from edgegw.telemetry.spanqueue import SpanQueue

log = logging.getLogger("edgegw.tracing")

# The SDK's batch processor's default wait between exports (OTEL_BSP_SCHEDULE_DELAY, ms).
DEFAULT_SCHEDULE_DELAY_MS = 5000
# force_flush waits at most this long for the batches before it (the SDK's default).
FLUSH_TIMEOUT_S = 30.0


def schedule_delay_s(environ: dict[str, str] | os._Environ[str] = os.environ) -> float:
    """OTEL_BSP_SCHEDULE_DELAY in seconds; the default when unset or not a positive int."""
    raw = environ.get("OTEL_BSP_SCHEDULE_DELAY", "")
    try:
        ms = int(raw) if raw else DEFAULT_SCHEDULE_DELAY_MS
    except ValueError:
        log.warning("OTEL_BSP_SCHEDULE_DELAY=%r is not an integer: using 5000 ms", raw)
        ms = DEFAULT_SCHEDULE_DELAY_MS
    return (ms if ms > 0 else DEFAULT_SCHEDULE_DELAY_MS) / 1000


@dataclass(frozen=True, slots=True)
class Parent:
    """A client's trace context, as its `traceparent` and `tracestate` said."""

    trace_id: int
    span_id: int
    sampled: bool
    state: str


class Pipeline:
    """Ended spans, bounded by the queue, batched by one export thread, encoded in Rust and
    sent by the SDK's OTLP/HTTP exporter client (module doc)."""

    def __init__(
        self, endpoint: str, version: str, queue: SpanQueue, timeout_s: float, batch: int
    ) -> None:
        self.queue = queue
        self.version = version
        self.batch = batch
        resource = Resource(
            {
                "service.name": "edgegw",
                "service.version": version,
                "telemetry.sdk.language": "python",
            }
        ).merge(OTELResourceDetector().detect())  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
        self.resource: dict[str, Any] = dict(resource.attributes)
        self.exporter = OTLPSpanExporter(endpoint=endpoint, timeout=timeout_s)
        # The exporter's HTTP client (headers, compression, TLS, retries, timeout), given
        # bytes rather than spans to encode; `_client.export(data) -> .success`.
        self._client: Any = getattr(self.exporter, "_client", None)
        if not callable(getattr(self._client, "export", None)):
            # Never a silent tracer that exports nothing: the pin in pyproject.toml says why.
            raise RuntimeError(
                "tracing: this opentelemetry-exporter-otlp-proto-http has no _client.export; "
                "install the 1.45 release line"
            )
        self.propagator = TraceContextTextMapPropagator()
        self._spans: collections.deque[tuple[Any, ...]] = collections.deque()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._sending = threading.Lock()  # one batch on the wire at a time, in order
        self._delay_s = schedule_delay_s()
        self._thread = threading.Thread(target=self._run, name="edgegw-span-export", daemon=True)
        self._thread.start()

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
        self._spans.append(
            (name, ids, remote_parent, kind, attributes, events, times, error, trace_state)
        )
        if len(self._spans) >= self.batch:
            self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._delay_s)
            self._wake.clear()
            self._send()

    def _send(self) -> None:
        """Export what waits, a batch at a time."""
        with self._sending:
            spans = self._spans
            while spans:
                batch = [spans.popleft() for _ in range(min(self.batch, len(spans)))]
                self.queue.taken(len(batch))
                try:
                    data = encode_otlp_spans(self.resource, "edgegw", self.version, batch)
                    ok = bool(self._client.export(data).success)
                except Exception:  # the client logs what the collector said
                    log.debug("tracing: export failed", exc_info=True)
                    ok = False
                self.queue.done(len(batch), ok)

    def force_flush(self) -> bool:
        """Export what is queued now (blocking: call from a thread)."""
        self._send()
        return True

    def shutdown(self) -> None:
        """Export what is queued and stop the export thread (blocking)."""
        self._stop.set()
        self._wake.set()
        self._thread.join(FLUSH_TIMEOUT_S)
        self._send()
        self.exporter.shutdown()  # type: ignore[no-untyped-call]
