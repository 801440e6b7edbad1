"""Tracing: spans of every request, exported by OTLP/HTTP (TELEMETRY_TRACING_ENABLED).

The OpenTelemetry SDK is imported only when tracing is on (`Tracing`, built by
`Telemetry`): it costs a quarter of a second of every start. With tracing off no request
pays anything but `call.trace is None`: every hook in the request path is one such check.

The SDK's parts are constructed by class, never looked up by entry-point name (the frozen
binary has no entry points; edgegw.telemetry.otelsdk): the W3C propagator's rules for a
client's `traceparent` (`read_parent`) and its `TraceState`, a resource of our own
attributes plus OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES. Export is a task on the event
loop (`Tracing.run`, started by serve()) posting with edgegw's own upstream client: no thread
(edgegw.telemetry.otelsdk says what a thread cost).

A request's spans are recorded in the Rust core as they happen (`TraceRecord`, one a request;
`Span` is a handle on one of its spans) and leave, encoded, when the server span ends; the
export task joins the entries of a batch (`encode_otlp_batch`) and posts the bytes. Each hook
is one call into the record where it can be (ids, times, the attempt's name and attributes,
the GenAI attributes made there): the Python calls around the recording were most of what
it cost (bench/README.md).
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
from edgegw.ids import getrandbits
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
    its id, attributes, events and times are kept (no Python object holds them). It holds
    the record, not its `RequestTrace` (which holds the server span): no reference cycle, so
    a request's trace is freed when it ends, not by the cyclic collector. As a context
    manager (`RequestTrace.span`) it ends when its block does, failed by an exception
    leaving it: a class, not `@contextmanager` (whose generator cost ~10 µs a span under
    load; py-spy, bench/README.md)."""

    __slots__ = ("record", "pipeline", "index")

    def __init__(self, record: TraceRecord, pipeline: Pipeline, index: int) -> None:
        self.record = record
        self.pipeline = pipeline
        self.index = index

    @property
    def span_id(self) -> int:
        return self.record.span_id(self.index)

    def set_attribute(self, key: str, value: Any) -> None:
        self.record.set(self.index, key, value)

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        self.record.update(self.index, attributes if type(attributes) is dict else dict(attributes))

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        self.record.event(self.index, name, dict(attributes or {}), time.time_ns(), MAX_EVENTS)

    def fail(self, e: BaseException | str) -> None:
        """Failed: `error.type` names `e` (a code, or the exception's code or class)."""
        self.record.fail(self.index, error_type(e))

    def end(self) -> None:
        """Ended (once): kept with the trace's, which are exported together when the server
        span (the record's first) ends; a span ending after it is exported at once."""
        ended = self.record.close(self.index)
        if ended is not None:
            self.pipeline.export(*ended)

    def exported(self, ended: tuple[bytes, int] | None) -> None:
        """What a call ending a span returned, queued for export (if anything)."""
        if ended is not None:
            self.pipeline.export(*ended)

    def __enter__(self) -> Span:
        return self

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None, tb: Any) -> None:
        # `end` and `fail` written out: a span scope is two a request (parse, route).
        if e is not None:
            self.record.fail(self.index, error_type(e))
        ended = self.record.close(self.index)
        if ended is not None:
            self.pipeline.export(*ended)


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
        # OTEL_TRACES_SAMPLER, read once (`sampled`): whether a client's sampled flag
        # decides, and for a root the sampler it falls back to.
        sampler = settings.tracing_sampler
        self._parent_based = sampler.startswith("parentbased_")
        self._root = sampler.removeprefix("parentbased_")
        self._bound = round(settings.tracing_sampler_ratio * 2**64)

    def start_request(
        self, method: str, path: str, headers: Sequence[tuple[bytes, bytes]], request_id: str
    ) -> RequestTrace | None:
        """The request's trace, continuing the client's; None when it is not sampled."""
        parent = self.pipeline.parent(headers)
        if parent is None:
            trace_id, parent_id, state = getrandbits(128) or 1, None, ""
        else:
            trace_id, parent_id, state = parent.trace_id, parent.span_id, parent.state
        if not self.sampled(trace_id, None if parent is None else parent.sampled):
            return None
        return RequestTrace(self, trace_id, state, parent_id, (method, path, request_id))

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
        if parent_sampled is not None and self._parent_based:
            return parent_sampled
        root = self._root
        if root == "always_on":
            return True
        if root == "always_off":
            return False
        return (trace_id & 0xFFFF_FFFF_FFFF_FFFF) < self._bound

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The export task: batches leave on their schedule until cancelled."""
        await self.pipeline.run(task_status=task_status)

    async def force_flush(self) -> None:
        """Export what is queued now."""
        await self.pipeline.flush()

    async def aclose(self) -> None:
        """Export what is queued and close the collector's connection."""
        await self.pipeline.aclose()


class RequestTrace:
    """One request's spans: the server span and the hooks its children are made with. Each
    hook is one call into the record where it can be (bench/README.md: the Python calls of
    the hooks, not the recording, were most of what tracing cost a request)."""

    __slots__ = ("tracing", "id", "state", "server", "record", "completion")

    def __init__(
        self,
        tracing: Tracing,
        trace_id: int,
        state: str,
        parent_id: int | None,
        head: tuple[str, str, str],
    ) -> None:
        self.tracing = tracing
        self.id = trace_id
        # The client's `tracestate`, passed on as it came.
        self.state = state
        # The spans themselves (`Span` is a handle on one); the server span's index is 0.
        self.record = record = TraceRecord(trace_id, state, getrandbits(64))
        method, path, request_id = head
        self.server = Span(
            record, tracing.pipeline, record.open_server(method, path, request_id, parent_id)
        )
        # The answer's text, fed by the relays; None unless TELEMETRY_TRACING_CONTENT.
        self.completion = Completion() if tracing.content else None

    @property
    def trace_id(self) -> str:
        return f"{self.id:032x}"

    def start(
        self, name: str, *, client: bool = False, attributes: Mapping[str, Any] | None = None
    ) -> Span:
        """A child of the server span, ended by the caller (`span.end()`)."""
        attrs = None if attributes is None else dict(attributes)
        index = self.record.open(name, 0, CLIENT if client else INTERNAL, attrs)
        return Span(self.record, self.tracing.pipeline, index)

    def span(self, name: str, **attributes: Any) -> Span:
        """A child span around a block (`with trace.span(...) as span:`); an exception
        leaving it marks it failed. The hook for parsing, routing decisions and attempts
        (`route.attempt`, with `gen_ai.provider.name`, `gen_ai.request.model`,
        `edgegw.route.reason`), guardrails and capacity checks."""
        index = self.record.open(name, 0, INTERNAL, attributes or None)
        return Span(self.record, self.tracing.pipeline, index)

    def attempt(self, method: bytes, target: bytes, host: str, port: int) -> Span:
        """An upstream attempt: a CLIENT span `{method} {path}` with the method, the
        server's address and port and the path, ended by `attempt_done` (or failed)."""
        index = self.record.open_attempt(method, target, host, port)
        return Span(self.record, self.tracing.pipeline, index)

    def attempt_done(self, span: Span, status: int, new_connection: bool) -> None:
        """The attempt's response head came: its status (5xx: failed) and whether it opened
        its connection (a new connection's time includes its connect and TLS handshake)."""
        span.exported(self.record.close_attempt(span.index, status, new_connection))

    def on_connect(self, attempt: Span, host: str, port: int) -> OnConnect:
        """`UpstreamPool.send`'s hook for one upstream attempt: each connection it opens
        is a `connect` child of `attempt` (TCP connect and TLS handshake), failed with the
        connect's error; a kept-alive connection makes none."""
        record, index = self.record, attempt.index

        def connected(started_ns: int, error: BaseException | None) -> None:
            code = None if error is None else error_type(error)
            attempt.exported(record.connect(index, started_ns, host, port, code))

        return connected

    def finish(self, status: int | None, error: str | None) -> None:
        """End the server span with the answer's status (None: none was sent) and the
        error code that ended the request, if any (a 5xx, no answer or an error: failed)."""
        ended = self.record.finish(status, error)
        if ended is not None:
            self.tracing.pipeline.export(*ended)

    def generation(
        self,
        *,
        operation: str,
        provider: str,
        model: str,
        response_model: str | None,
        usage: dict[str, Any] | None,
        finish_reasons: Sequence[str],
        ttft_s: float | None,
    ) -> None:
        """The GenAI semantic-convention attributes of a chat or completions request
        (`TraceRecord.generation`: operation, provider, models clipped, token usage by
        OpenAI's or Anthropic's names, finish reasons, time to first token), and with
        TELEMETRY_TRACING_CONTENT its answer's `gen_ai.choice` events."""
        self.record.generation(
            operation, provider, model, response_model, usage, finish_reasons, ttft_s
        )
        if self.completion is not None:
            self.completion.record(self.server)

    def fail(self, span: Span, e: BaseException | str) -> None:
        span.fail(e)

    def upstream_headers(self, span: Span) -> list[tuple[bytes, bytes]]:
        """`traceparent` (and `tracestate`) naming `span` as the parent, for the upstream."""
        out = [(b"traceparent", self.record.traceparent(span.index))]
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


def error_type(e: BaseException | str) -> str:
    """A span's `error.type`: the code given, or an exception's code, reason or class."""
    if isinstance(e, str):
        return e
    return str(getattr(e, "code", None) or getattr(e, "reason", None) or type(e).__name__)


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


def clip(value: str) -> str:
    return value[:MAX_ATTRIBUTE_CHARS]
