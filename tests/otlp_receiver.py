"""A real OTLP/HTTP trace receiver on loopback: POST /v1/traces, protobuf bodies decoded
with opentelemetry-proto into plain span records."""

from __future__ import annotations

import gzip
import ssl
import zlib
from dataclasses import dataclass, field
from typing import Any

import trio
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from edgegw import plainhttp


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict[str, Any]
    events: list[str]
    status_code: int
    start_ns: int
    end_ns: int
    resource: dict[str, Any] = field(default_factory=dict)
    # Each event's attributes, in the order of `events`.
    event_attributes: list[dict[str, Any]] = field(default_factory=list)


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self.port = 0
        # The headers of each export request, as received.
        self.headers: list[dict[str, str]] = []
        # Statuses to answer the next export requests with, before taking any (with
        # `Retry-After: 0` on a 429 or 503).
        self.refuse: list[int] = []

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        server = plainhttp.Server("otlp receiver", self._answer)
        await server.serve_tcp("127.0.0.1", 0, task_status=task_status)

    async def serve_tls(
        self,
        context: ssl.SSLContext,
        *,
        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        server = plainhttp.Server("otlp receiver (tls)", self._answer)
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        task_status.started(listeners[0].socket.getsockname()[1])
        tls = [trio.SSLListener(listener, context) for listener in listeners]
        await trio.serve_listeners(server.serve_connection, tls)

    async def _answer(self, request: plainhttp.Request, out: plainhttp.Responder) -> None:
        if request.path != "/v1/traces" or request.method != "POST":
            await out.send(404, [], b"")
            return
        self.requests += 1
        self.headers.append(dict(request.headers))
        assert request.headers.get("content-type") == "application/x-protobuf"
        if self.refuse:
            status = self.refuse.pop(0)
            await out.send(status, [(b"retry-after", b"0")] if status in (429, 503) else [], b"")
            return
        body = request.body or b""
        encoding = request.headers.get("content-encoding")
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        msg = ExportTraceServiceRequest()
        msg.ParseFromString(body)
        for rs in msg.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.spans.append(
                        ReceivedSpan(
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            kind=s.kind,
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            events=[e.name for e in s.events],
                            status_code=s.status.code,
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                            resource=resource,
                            event_attributes=[
                                {a.key: _value(a.value) for a in e.attributes} for e in s.events
                            ],
                        )
                    )
        await out.send(200, [(b"content-type", b"application/x-protobuf")], b"")

    def tree(self, trace_id: str) -> dict[str, list[str]]:
        """Span name -> the names of its children, within one trace."""
        spans = [s for s in self.spans if s.trace_id == trace_id]
        by_id = {s.span_id: s for s in spans}
        out: dict[str, list[str]] = {s.name: [] for s in spans}
        for s in spans:
            if s.parent_id in by_id:
                out[by_id[s.parent_id].name].append(s.name)
        return {k: sorted(v) for k, v in out.items()}
