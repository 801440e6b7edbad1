"""Tracing: spans of every request, exported by OTLP/HTTP (TELEMETRY_TRACING_ENABLED).

The OpenTelemetry SDK is imported only when tracing is on (`Tracing`, built by
`Telemetry`): it costs a quarter of a second of every start. With tracing off no request
pays anything but `call.trace is None`: every hook in the request path is one such check.

The SDK's parts are constructed by class, never looked up by entry-point name (the frozen
binary has no entry points; edgegw.telemetry.otelsdk): the OTLP/HTTP exporter's HTTP client,
the W3C trace context propagator (reading a client's `traceparent`), a resource of our own
attributes plus OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES. Export is a task on the event
loop (`Tracing.run`, started by serve()) posting with edgegw's own upstream client: no thread
(edgegw.telemetry.otelsdk says what a thread cost).

A request's spans are recorded in the Rust core as they happen (`TraceRecord`, one a request;
`Span` is a handle on one of its spans) and leave, encoded, when the server span ends; the
export task joins the entries of a batch (`encode_otlp_batch`) and posts the bytes.
The SDK's tracer (`start_span` validated every attribute, sampled, locked and called
processors: three quarters of what recording cost) and its `ReadableSpan` /
`BatchSpanProcessor` / Python protobuf encoder (most of what export cost) are not used:
both measured in bench.tracing, bench/README.md and edgegw.telemetry.otelsdk.

Sampling follows OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG with the SDK's rules
(default parentbased_always_on: a client's trace that is not sampled, `traceparent` flags
00, records nothing); an unsampled request records and propagates nothing.

Export never blocks a request. At most MAX_QUEUED_SPANS ended spans wait for the exporter;
past that a span is dropped, and so is a batch the collector did not take: both are counted
(`edgegw_tracing_spans_dropped_total{reason}` on the metrics endpoint) and logged at most
once a minute.

Per request (`RequestTrace`): one SERVER span, continued from the client's `traceparent`/
`tracestate`; children for authentication, parsing, the routing decision, each upstream
attempt (CLIENT, its `traceparent` sent upstream; a `connect` child when it opened a
connection), MCP tool executions. Routing code (model
aliases, failover) records its attempts with `RequestTrace.span("route.attempt", ...)`.
No prompt or completion text goes into a span unless TELEMETRY_TRACING_CONTENT=true: then
the request body is the server span's `gen_ai.user.message` event and each choice of the
answer a `gen_ai.choice` event (`Completion`, fed by the relays).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson
import trio

from edgegw._core import TraceRecord
from edgegw.ids import getrandbits, random_bits
from edgegw.telemetry.spanqueue import SpanQueue

if TYPE_CHECKING:
    from edgegw.settings import Settings
    from edgegw.telemetry.otelsdk import Pipeline
    from edgegw.upstream import OnConnect

log = logging.getLogger("edgegw.tracing")

# How long one export may take before its batch counts as dropped (the SDK default is 10 s;
# a collector on the edge site's network answers in milliseconds).
EXPORT_TIMEOUT_S = 5.0
# Spans per export request (the SDK's default).
EXPORT_BATCH_SPANS = 512
# Attribute values from clients (a model name) are cut to this length.
MAX_ATTRIBUTE_CHARS = 256
# TELEMETRY_TRACING_CONTENT: text kept per prompt or completion event.
MAX_CONTENT_CHARS = 4096
# Events kept per span (the SDK's default limit is 128).
MAX_EVENTS = 128

INSTRUMENTATION = "edgegw"
# opentelemetry-proto's SpanKind values.
INTERNAL, SERVER, CLIENT = 1, 2, 3


class Span:
    """A handle on one span being recorded: its index in the trace's `TraceRecord`, where
    its attributes, events and times are kept (no Python object holds them). It holds the
    record, not its `RequestTrace` (which holds the server span): no reference cycle, so a
    request's trace is freed when it ends, not by the cyclic collector."""

    __slots__ = ("record", "pipeline", "index", "span_id", "error", "ended")

    def __init__(
        self,
        trace: RequestTrace,
        name: str,
        parent_id: int | None,
        kind: int,
        attributes: dict[str, Any] | None,
        start_ns: int | None = None,
    ) -> None:
        self.record = record = trace.record
        self.pipeline = trace.tracing.pipeline
        self.span_id = span_id = getrandbits(64) or 1
        self.index = record.start(
            name, span_id, parent_id, kind == SERVER, kind,
            time.time_ns() if start_ns is None else start_ns, attributes,
        )  # fmt: skip
        self.error = False
        self.ended = False

    def set_attribute(self, key: str, value: Any) -> None:
        self.record.set(self.index, key, value)

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        self.record.update(self.index, dict(attributes))

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        self.record.event(self.index, name, dict(attributes or {}), time.time_ns(), MAX_EVENTS)

    def end(self) -> None:
        """Ended: kept with the trace's, which are exported together when the server span
        (the record's first) ends; a span ending after it is exported at once."""
        if not self.ended:
            self.ended = True
            if self.record.end(self.index, time.time_ns(), self.error):
                self.pipeline.export(*self.record.take_ended())


class Tracing:
    """The process's tracer and its export pipeline (module doc)."""

    def __init__(self, settings: Settings, version: str = "0.1.0") -> None:
        from edgegw.telemetry.otelsdk import Pipeline

        self.settings = settings
        self.content = settings.tracing_content
        self.queue = SpanQueue()
        self.pipeline: Pipeline = Pipeline(
            settings.tracing_endpoint, version, self.queue, EXPORT_TIMEOUT_S, EXPORT_BATCH_SPANS
        )

    def start_request(
        self, method: str, path: str, headers: Sequence[tuple[bytes, bytes]], request_id: str
    ) -> RequestTrace | None:
        """The request's trace, continuing the client's; None when it is not sampled."""
        parent = None
        for name, _ in headers:
            if name == b"traceparent" or name == b"tracestate":
                parent = self.pipeline.parent(headers)
                break
        if parent is None:
            trace_id, parent_id, state = random_bits(128), None, ""
        else:
            trace_id, parent_id, state = parent.trace_id, parent.span_id, parent.state
        if not self.sampled(trace_id, None if parent is None else parent.sampled):
            return None
        trace = RequestTrace(self, trace_id, state)
        trace.server = Span(
            trace,
            f"{method} {path}",
            parent_id,
            SERVER,
            {"http.request.method": method, "url.path": path, "edgegw.request_id": request_id},
        )
        return trace

    def passed_on(self, headers: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """For a request not sampled: the client's trace context as it goes upstream
        unchanged (no span of ours comes between), so the rest of its trace still joins
        up; nothing when the client sent none, or an invalid one."""
        parent = self.pipeline.parent(headers)
        if parent is None:
            return []
        flags = b"01" if parent.sampled else b"00"
        out = [(b"traceparent", b"00-%032x-%016x-%s" % (parent.trace_id, parent.span_id, flags))]
        if parent.state:
            out.append((b"tracestate", parent.state.encode()))
        return out

    def sampled(self, trace_id: int, parent_sampled: bool | None) -> bool:
        """OTEL_TRACES_SAMPLER's decision (the SDK's rules): `parentbased_*` follows a
        client's sampled flag; `traceidratio` keeps the traces whose low 64 trace-id bits are
        below ratio x 2^64, so every process decides the same for one trace."""
        sampler = self.settings.tracing_sampler
        if parent_sampled is not None and sampler.startswith("parentbased_"):
            return parent_sampled
        base = sampler.removeprefix("parentbased_")
        if base == "always_on":
            return True
        if base == "always_off":
            return False
        bound = round(self.settings.tracing_sampler_ratio * 2**64)
        return (trace_id & 0xFFFF_FFFF_FFFF_FFFF) < bound

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The export task: batches leave on their schedule until cancelled."""
        await self.pipeline.run(task_status=task_status)

    async def force_flush(self) -> None:
        """Export what is queued now."""
        await self.pipeline.flush()

    async def aclose(self) -> None:
        """Export what is queued and close the collector's connection."""
        await self.pipeline.aclose()


# (attribute, the usage member that gives it, the member read when the first is absent)
_USAGE_KEYS = (
    ("gen_ai.usage.input_tokens", "prompt_tokens", "input_tokens"),
    ("gen_ai.usage.output_tokens", "completion_tokens", "output_tokens"),
)


class RequestTrace:
    """One request's spans: the server span and the hooks its children are made with."""

    __slots__ = ("tracing", "id", "state", "server", "record", "completion")

    def __init__(self, tracing: Tracing, trace_id: int, state: str) -> None:
        self.tracing = tracing
        self.id = trace_id
        # The client's `tracestate`, passed on as it came.
        self.state = state
        self.server: Span
        # The spans themselves (`Span` is a handle on one).
        self.record = TraceRecord(trace_id, state)
        # The answer's text, fed by the relays; None unless TELEMETRY_TRACING_CONTENT.
        self.completion = Completion() if tracing.content else None

    @property
    def trace_id(self) -> str:
        return f"{self.id:032x}"

    def start(
        self, name: str, *, client: bool = False, attributes: Mapping[str, Any] | None = None
    ) -> Span:
        """A child of the server span, ended by the caller (`span.end()`)."""
        return Span(
            self, name, self.server.span_id, CLIENT if client else INTERNAL,
            None if attributes is None else dict(attributes),
        )  # fmt: skip

    def on_connect(self, attempt: Span, host: str, port: int) -> OnConnect:
        """`UpstreamPool.send`'s hook for one upstream attempt: each connection it opens
        is a `connect` child of `attempt` (TCP connect and TLS handshake), failed with the
        connect's error; a kept-alive connection makes none."""

        def connected(started_ns: int, error: BaseException | None) -> None:
            span = Span(
                self,
                "connect",
                attempt.span_id,
                INTERNAL,
                {"server.address": host, "server.port": port},
                started_ns,
            )
            if error is not None:
                self.fail(span, error)
            span.end()

        return connected

    def span(self, name: str, **attributes: Any) -> SpanScope:
        """A child span around a block (`with trace.span(...) as span:`); an exception
        leaving it marks it failed. The hook for routing decisions and attempts
        (`route.attempt`, with `gen_ai.provider.name`, `gen_ai.request.model`,
        `edgegw.route.reason`), guardrails and capacity checks."""
        return SpanScope(self, self.start(name, attributes=attributes or None))

    def finish(self, status: int | None, error: str | None) -> None:
        """End the server span with the answer's status (None: none was sent) and the
        error code that ended the request, if any."""
        span = self.server
        if status is not None:
            span.set_attribute("http.response.status_code", status)
        if error is not None:
            span.set_attribute("error.type", error)
        if error is not None or status is None or status >= 500:
            span.error = True
        span.end()

    def generation(
        self,
        *,
        operation: str,
        provider: str,
        model: str,
        response_model: str | None,
        usage: Mapping[str, Any] | None,
        finish_reasons: Sequence[str],
        ttft_s: float | None,
    ) -> None:
        """The GenAI semantic-convention attributes of a chat or completions request, and
        with TELEMETRY_TRACING_CONTENT its answer's `gen_ai.choice` events."""
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": provider,
            "gen_ai.system": provider,  # the conventions' older name, still read by many
            "gen_ai.request.model": clip(model),
        }
        if response_model:
            attrs["gen_ai.response.model"] = clip(response_model)
        if usage:
            for key, first, other in _USAGE_KEYS:
                n = usage.get(first)
                if n is None:
                    n = usage.get(other)
                if type(n) is int:
                    attrs[key] = n
        if finish_reasons:
            attrs["gen_ai.response.finish_reasons"] = [clip(r) for r in finish_reasons]
        if ttft_s is not None:
            attrs["gen_ai.server.time_to_first_token"] = ttft_s
        self.server.set_attributes(attrs)
        if self.completion is not None:
            self.completion.record(self.server)

    def fail(self, span: Span, e: BaseException | str) -> None:
        code = (
            e
            if isinstance(e, str)
            else getattr(e, "code", None) or getattr(e, "reason", None) or type(e).__name__
        )
        span.set_attribute("error.type", str(code))
        span.error = True

    def upstream_headers(self, span: Span) -> list[tuple[bytes, bytes]]:
        """`traceparent` (and `tracestate`) naming `span` as the parent, for the upstream."""
        out = [(b"traceparent", b"00-%032x-%016x-01" % (self.id, span.span_id))]
        if self.state:
            out.append((b"tracestate", self.state.encode()))
        return out

    def content(self, span: Span, event: str, text: str | bytes) -> None:
        """A prompt or completion as a span event, only with TELEMETRY_TRACING_CONTENT
        (bytes are decoded only then)."""
        if self.tracing.content:
            if isinstance(text, bytes):
                text = text.decode("utf-8", "replace")
            span.add_event(event, {"gen_ai.content": text[:MAX_CONTENT_CHARS]})


class Completion:
    """TELEMETRY_TRACING_CONTENT: an answer's text per choice as the client got it (a whole
    answer's messages, a stream's deltas joined), at most MAX_CONTENT_CHARS a choice, and
    its finish_reason; `record` makes them one `gen_ai.choice` event a choice."""

    __slots__ = ("texts", "sizes", "reasons")

    def __init__(self) -> None:
        # By choice index: the text's pieces, their length, the finish_reason.
        self.texts: dict[int, list[str]] = {}
        self.sizes: dict[int, int] = {}
        self.reasons: dict[int, str] = {}

    def answer(self, data: bytes) -> None:
        """A whole answer's JSON: its choices' `message.content` (or `text`)."""
        self._choices(data, "message")

    def delta(self, data: bytes) -> None:
        """A stream event's JSON: its choices' `delta.content` (or `text`)."""
        self._choices(data, "delta")

    def _choices(self, data: bytes, part: str) -> None:
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            return  # `[DONE]`, or nothing the client could read either
        if not isinstance(doc, dict):
            return
        for choice in doc.get("choices") or ():
            i = choice.get("index", 0) if isinstance(choice, dict) else None
            if type(i) is not int or (i not in self.texts and len(self.texts) >= MAX_EVENTS):
                continue
            pieces = self.texts.setdefault(i, [])
            message = choice.get(part)
            text = message.get("content") if isinstance(message, dict) else choice.get("text")
            size = self.sizes.get(i, 0)
            if isinstance(text, str) and text and size < MAX_CONTENT_CHARS:
                pieces.append(text[: MAX_CONTENT_CHARS - size])
                self.sizes[i] = size + len(pieces[-1])
            reason = choice.get("finish_reason")
            if isinstance(reason, str):
                self.reasons[i] = clip(reason)

    def record(self, span: Span) -> None:
        for i in sorted(self.texts):
            attrs: dict[str, Any] = {"index": i, "gen_ai.content": "".join(self.texts[i])}
            if i in self.reasons:
                attrs["finish_reason"] = self.reasons[i]
            span.add_event("gen_ai.choice", attrs)


class SpanScope:
    """`RequestTrace.span`'s context manager: a class, not `@contextmanager` (whose
    generator cost ~10 µs a span under load, two spans a request; py-spy, bench/README.md)."""

    __slots__ = ("trace", "span")

    def __init__(self, trace: RequestTrace, span: Span) -> None:
        self.trace = trace
        self.span = span

    def __enter__(self) -> Span:
        return self.span

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None, tb: Any) -> None:
        if e is not None:
            self.trace.fail(self.span, e)
        self.span.end()


def clip(value: str) -> str:
    return value[:MAX_ATTRIBUTE_CHARS]
