"""Tracing: spans of every request, exported by OTLP/HTTP (TELEMETRY_TRACING_ENABLED).

With tracing off no request pays anything but `call.trace is None`, and the OpenTelemetry
SDK is not even imported (it costs a quarter of a second of every start). Of the SDK only
the W3C propagator's rules (`read_parent`), TraceState, the resource and the sampler are
used, constructed by class (the frozen binary has no entry points; edgegw.telemetry.otelsdk).

A request's trace is one Rust object, the core's `TraceRecord` (rust/src/trace.rs names
its spans, events and attributes): a SERVER span continued from the client's
`traceparent`, children for authentication, parsing, routing, each upstream attempt and
MCP tool. When the server span ends its spans go, encoded, to the `SpanQueue`; `Tracing.run`
exports them in batches with edgegw's own upstream client, never blocking a request: past
MAX_QUEUED_SPANS, spans are dropped, counted and logged once a minute. Sampling follows
OTEL_TRACES_SAMPLER(_ARG); an unsampled request passes the client's context on unchanged.
No prompt or completion text is recorded unless TELEMETRY_TRACING_CONTENT=true
(`Completion`, `Call.trace_content`). bench/README.md has what the SDK's own tracer cost.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import orjson
import trio

from edgegw._core import (
    TRACE_MAX_ATTRIBUTE_CHARS,
    TRACE_MAX_CONTENT_CHARS,
    TRACE_MAX_EVENTS,
    SpanQueue,
    TraceRecord,
    read_traceparent,
)
from edgegw.ids import getrandbits
from edgegw.telemetry.otelsdk import read_parent, trace_state

if TYPE_CHECKING:
    from edgegw.settings import Settings
    from edgegw.telemetry.otelsdk import Pipeline

log = logging.getLogger("edgegw.tracing")

# How long one export may take before its batch counts as dropped (the SDK default is 10 s;
# a collector on the edge site's network answers in milliseconds).
EXPORT_TIMEOUT_S = 5.0
# Spans per export request (the SDK's default).
EXPORT_BATCH_SPANS = 512
# Attribute values from clients (a model name) are cut to this length (the core's limit).
MAX_ATTRIBUTE_CHARS = TRACE_MAX_ATTRIBUTE_CHARS
# Spans waiting for export, at most: ~350 bytes each as they wait (encoded), so under 1 MiB
# while a collector is down (the SDK's default, OTEL_BSP_MAX_QUEUE_SIZE, is the same).
MAX_QUEUED_SPANS = 2048
# Choices kept by TELEMETRY_TRACING_CONTENT, as the events a span keeps (the SDK's default
# limit; the core's, which it applies to every span).
MAX_EVENTS = TRACE_MAX_EVENTS
# TELEMETRY_TRACING_CONTENT: text kept a choice (the core's, which keeps as much of a prompt).
MAX_CONTENT_CHARS = TRACE_MAX_CONTENT_CHARS


class Tracing:
    """The process's tracer and its export pipeline (module doc)."""

    def __init__(self, settings: Settings, version: str = "0.1.0") -> None:
        from edgegw.telemetry.otelsdk import Pipeline

        self.settings = settings
        self.content = settings.tracing_content
        self.queue = SpanQueue(MAX_QUEUED_SPANS, EXPORT_BATCH_SPANS)
        self.pipeline: Pipeline = Pipeline(
            settings.tracing_endpoint, version, self.queue, EXPORT_TIMEOUT_S
        )
        # OTEL_TRACES_SAMPLER, read once (`sampled`): whether a client's sampled flag
        # decides, and for a root the sampler it falls back to.
        sampler = settings.tracing_sampler
        self._parent_based = sampler.startswith("parentbased_")
        self._root = sampler.removeprefix("parentbased_")
        self._bound = round(settings.tracing_sampler_ratio * 2**64)

    def start_request(
        self, method: str, path: str, headers: Sequence[tuple[bytes, bytes]], request_id: str
    ) -> TraceRecord | None:
        """The request's trace, continuing the client's; None when it is not sampled."""
        got = read_traceparent(headers)  # read_parent's, without its Parent
        if got is None:
            trace_id, parent_id, state, parent_sampled = getrandbits(128) or 1, None, "", None
        else:
            trace_id, parent_id, parent_sampled, raw_state = got
            state = trace_state(raw_state)
        if not self.sampled(trace_id, parent_sampled):
            return None
        trace = TraceRecord(trace_id, state, getrandbits(64), self.queue, self.content)
        trace.open_server(method, path, request_id, parent_id)
        return trace

    def completion(self) -> Completion:
        """A traced request's answer text, with TELEMETRY_TRACING_CONTENT (`Completion`)."""
        return Completion()

    def passed_on(self, headers: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """For a request not sampled: the client's trace context as it goes upstream
        unchanged (no span of ours comes between), so the rest of its trace still joins
        up; nothing when the client sent none, or an invalid one."""
        parent = read_parent(headers)
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

    def wake(self) -> None:
        """A whole batch waits (`TraceRecord.finish` said so): export it now."""
        self.pipeline.wake()

    async def force_flush(self) -> None:
        """Export what is queued now."""
        await self.pipeline.flush()

    async def aclose(self) -> None:
        """Export what is queued and close the collector's connection."""
        await self.pipeline.aclose()


class Completion:
    """TELEMETRY_TRACING_CONTENT: an answer's text per choice as the client got it (a whole
    answer's messages, a stream's deltas joined), at most MAX_CONTENT_CHARS a choice, and
    its finish_reason; `choices` hands them to the trace (one `gen_ai.choice` event each)."""

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

    def choices(self) -> list[tuple[int, str, str | None]]:
        """(index, text, finish_reason) of each choice, by index."""
        return [(i, "".join(self.texts[i]), self.reasons.get(i)) for i in sorted(self.texts)]


def clip(value: str) -> str:
    return value[:MAX_ATTRIBUTE_CHARS]
