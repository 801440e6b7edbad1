"""What exporting a request's four spans (server, parse, route, upstream attempt) costs in
process, CPU µs per request: the SDK's way (a `ReadableSpan` per span, the
`BatchSpanProcessor`'s `encode_spans` + serialization of a 512-span batch) against edgegw's
(a tuple per span, `encode_otlp_spans` in the Rust core). Rounds interleaved, medians; one
core, no I/O. The HTTP POST of a batch is the same in both and left out.

    python -m bench.tracing_encode [--rounds 7] [--requests 2048]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from bench.harness import loadavg
from edgegw._core import encode_otlp_spans

BATCH = 512
SAMPLED = TraceFlags(TraceFlags.SAMPLED)
KINDS = {1: SpanKind.INTERNAL, 2: SpanKind.SERVER, 3: SpanKind.CLIENT}
RESOURCE_ATTRS = {"service.name": "edgegw", "service.version": "0.1.0"}


def request_spans(n: int) -> list[tuple[Any, ...]]:
    """The four spans of request `n`, as edgegw's pipeline queues them."""
    trace_id, server = (n << 64) | 0x4BF92F3577B34DA6, (n << 8) | 1
    t = time.time_ns()
    server_attrs = {
        "http.request.method": "POST",
        "url.path": "/v1/chat/completions",
        "edgegw.request_id": f"req-{n:024x}",
        "http.response.status_code": 200,
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "gen_ai.request.model": "openai/gpt-4o-mini",
        "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
        "gen_ai.usage.input_tokens": 7,
        "gen_ai.usage.output_tokens": 3,
        "gen_ai.response.finish_reasons": ["stop"],
    }
    upstream_attrs = {
        "http.request.method": "POST",
        "server.address": "127.0.0.1",
        "server.port": 8000,
        "url.full": "http://127.0.0.1:8000/v1/chat/completions",
        "http.response.status_code": 200,
    }
    return [
        ("parse", (trace_id, server + 2, server), False, 1, {}, None, (t, t + 9000), False, ""),
        (
            "route",
            (trace_id, server + 3, server),
            False,
            1,
            {"gen_ai.provider.name": "openai"},
            None,
            (t, t + 9000),
            False,
            "",
        ),
        (
            "POST /v1/chat/completions",
            (trace_id, server + 4, server),
            False,
            3,
            upstream_attrs,
            None,
            (t, t + 900_000),
            False,
            "",
        ),
        (
            "POST /v1/chat/completions",
            (trace_id, server, None),
            False,
            2,
            server_attrs,
            None,
            (t, t + 1_000_000),
            False,
            "",
        ),
    ]


def sdk_way(spans: list[tuple[Any, ...]], resource: Resource, scope: InstrumentationScope) -> int:
    readable = []
    for name, (trace_id, span_id, parent_id), remote, kind, attrs, _, times, error, _ in spans:
        parent = None
        if parent_id is not None:
            parent = SpanContext(trace_id, parent_id, is_remote=remote, trace_flags=SAMPLED)
        readable.append(
            ReadableSpan(
                name=name,
                context=SpanContext(trace_id, span_id, is_remote=False, trace_flags=SAMPLED),
                parent=parent,
                resource=resource,
                attributes=attrs,
                kind=KINDS[kind],
                status=Status(StatusCode.ERROR if error else StatusCode.UNSET),
                start_time=times[0],
                end_time=times[1],
                instrumentation_scope=scope,
            )
        )
    total = 0
    for i in range(0, len(readable), BATCH):
        total += len(encode_spans(readable[i : i + BATCH]).SerializePartialToString())
    return total


def edgegw_way(spans: list[tuple[Any, ...]]) -> int:
    total = 0
    for i in range(0, len(spans), BATCH):
        total += len(encode_otlp_spans(RESOURCE_ATTRS, "edgegw", "0.1.0", spans[i : i + BATCH]))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tracing_encode")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=2048)
    ns = parser.parse_args()
    os.sched_setaffinity(0, {min(1, (os.cpu_count() or 1) - 1)})
    resource = Resource(RESOURCE_ATTRS)
    scope = InstrumentationScope("edgegw", "0.1.0")
    ways = {
        "SDK: ReadableSpan + encode_spans": lambda s: sdk_way(s, resource, scope),
        "edgegw: tuple + encode_otlp_spans": edgegw_way,
    }
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    sizes: dict[str, int] = {}
    print(f"load average before: {loadavg()}")
    for r in range(ns.rounds):
        for name, fn in ways.items() if r % 2 else reversed(ways.items()):
            spans = [s for n in range(ns.requests) for s in request_spans(n)]
            start = time.process_time()
            sizes[name] = fn(spans)
            cpu[name].append((time.process_time() - start) / ns.requests * 1e6)
    print(f"load average after: {loadavg()}")
    for name in ways:
        print(
            f"{name:36s} {statistics.median(cpu[name]):7.1f} µs/request "
            f"(rounds: {', '.join(f'{x:.0f}' for x in cpu[name])}), {sizes[name]} bytes"
        )


if __name__ == "__main__":
    main()
