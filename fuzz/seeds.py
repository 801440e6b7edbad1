"""Write the seed corpora, fuzz/corpus/<target>/<name>: a handful of real inputs per target
(what an OpenAI SDK, a provider or an OTLP exporter sends). Run from the repository root with
the project's venv (the OTLP seeds need opentelemetry-proto, from the test extras):

    python fuzz/seeds.py

Inputs of the cut targets (sse, http1_response, relay) start with the cut points: one byte k, then
k little-endian u16 offsets (fuzz/src/lib.rs `cuts`).
"""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

CORPUS = Path(__file__).parent / "corpus"


def with_cuts(stream: bytes, *at: int) -> bytes:
    return bytes([len(at)]) + b"".join(struct.pack("<H", a) for a in at) + stream


def dumps(doc: object) -> bytes:
    return json.dumps(doc).encode()


USER = {"role": "user", "content": "Say hello in one word."}
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "strict": True,
    },
}

REQUEST = {
    "chat": dumps({"model": "openai/gpt-4o-mini", "messages": [USER], "temperature": 0.2}),
    "chat_stream": dumps(
        {
            "model": "gpt-4o",
            "messages": [{"role": "system", "content": "Be brief."}, USER],
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_completion_tokens": 64,
            "stop": ["\n\n"],
        }
    ),
    "chat_tools": dumps(
        {
            "model": "anthropic/claude-sonnet",
            "messages": [
                USER,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "-3 C"},
            ],
            "tools": [TOOL],
            "tool_choice": "auto",
            "parallel_tool_calls": False,
        }
    ),
    "chat_local": dumps(
        {
            "model": "gemma-3-270m",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
                    ],
                }
            ],
            "top_k": 40,
            "min_tokens": 1,
            "repetition_penalty": 1.1,
            "chat_template_kwargs": {"enable_thinking": False},
            "logit_bias": {"50256": -100},
            "seed": 7,
            "routing_key": "user-42",
            "response_format": {"type": "regex", "regex": "[a-z]+"},
        }
    ),
    "chat_schema": dumps(
        {
            "model": "m",
            "messages": [USER],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "a", "schema": {"type": "object"}, "strict": True},
            },
            "logprobs": True,
            "top_logprobs": 3,
            "n": 2,
            "reasoning_effort": "low",
        }
    ),
    "completions": dumps({"model": "m", "prompt": "Once upon a time", "max_tokens": 16, "n": 1}),
    "escapes": b'{"model":"m\\u00e9","messages":[{"role":"user","content":"\\ud83d\\ude00 \\" \\\\"}],'
    b'"temperature":1e0,"seed":-9223372036854775808}',
}

PASSTHROUGH = {
    "responses": dumps({"model": "openai/gpt-4.1", "input": "Hello", "stream": True}),
    "messages": dumps(
        {"model": "claude-3-5-haiku", "max_tokens": 256, "messages": [USER], "system": "x"}
    ),
    "images": dumps({"model": "gpt-image-1", "prompt": "a cat", "size": "1024x1024", "n": 1}),
    "no_model": b'{ "input" : [ {"model": "nested"} ] , "stream" : null }',
}


def head(*lines: bytes) -> bytes:
    return b"\r\n".join(lines) + b"\r\n\r\n"


HEAD = {
    "openai_sdk": head(
        b"POST /v1/chat/completions HTTP/1.1",
        b"Host: localhost:8080",
        b"Accept-Encoding: gzip, deflate",
        b"Connection: keep-alive",
        b"Accept: application/json",
        b"Content-Type: application/json",
        b"User-Agent: OpenAI/Python 1.99.9",
        b"Authorization: Bearer sk-test",
        b"X-Stainless-Lang: python",
        b"Content-Length: 123",
    ),
    "curl_get": head(
        b"GET /v1/models HTTP/1.1", b"Host: gw", b"User-Agent: curl/8.5.0", b"Accept: */*"
    ),
    "chunked_expect": head(
        b"POST /v1/completions HTTP/1.1",
        b"Host: gw",
        b"Transfer-Encoding: chunked",
        b"Expect: 100-continue",
        b"Connection: close",
    ),
    "http10": head(b"GET /health HTTP/1.0", b"Connection: keep-alive"),
    "upgrade": head(
        b"OPTIONS * HTTP/1.1",
        b"Host: gw",
        b"Connection: Upgrade, HTTP2-Settings",
        b"Upgrade: h2c",
        b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA",
    ),
    "smuggle": head(
        b"POST / HTTP/1.1", b"Host: gw", b"Content-Length: 4", b"Transfer-Encoding : chunked"
    ),
}

OPENAI_STREAM = (
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":'
    b'{"role":"assistant","content":""}}]}\n\n'
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":'
    b'{"content":"Hello"}}]}\n\n'
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":'
    b'{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}\n\n'
    b"data: [DONE]\n\n"
)
ANTHROPIC_STREAM = (
    b"event: message_start\r\n"
    b'data: {"type":"message_start","message":{"id":"m1"}}\r\n\r\n'
    b": ping\r\n\r\n"
    b"event: content_block_delta\r\n"
    b'data: {"type":"content_block_delta","delta":{"text":"Hi"}}\r\n\r\n'
    b"event: message_stop\r\n"
    b'data: {"type":"message_stop"}\r\n\r\n'
)
SSE = {
    "openai": with_cuts(OPENAI_STREAM, 7, 120, 121, 200),
    "anthropic_crlf": with_cuts(ANTHROPIC_STREAM, 52, 53, 54, 70),
    "bom_cr_retry": with_cuts(
        b"\xef\xbb\xbfretry: 1500\rid: 7\rdata: a\rdata: b\r\rdata\n\nevent: x\n\n", 1, 2, 3, 32
    ),
    "truncated": with_cuts(b"data: whole\n\ndata: half", 3),
    "uncut": with_cuts(OPENAI_STREAM),
}

JSON_BODY = b'{"id":"c1","object":"chat.completion","choices":[]}'
SSE_CHUNKED = b"".join(
    b"%x\r\n%s\r\n" % (len(part), part) for part in OPENAI_STREAM.split(b"\n\n")[:-1]
)
HTTP1 = {
    "length": with_cuts(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        % (len(JSON_BODY), JSON_BODY),
        30,
        70,
    ),
    "chunked_sse": with_cuts(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
        b"\r\n" + SSE_CHUNKED + b"0\r\nX-Trailer: 1\r\n\r\n",
        90,
        91,
        200,
    ),
    "continue": with_cuts(
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\nDate: x\r\n\r\n", 10
    ),
    "close_delimited": with_cuts(b"HTTP/1.0 200 OK\r\nServer: x\r\n\r\nbody until close", 5),
    "error_json": with_cuts(
        b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 37\r\n\r\n"
        b'{"error":{"message":"slow","code":1}}'
    ),
}

# The relay target: a whole upstream response (bit 4 of the first byte withholds usage).
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
KEYED = b'data: {"error":{"message":"bad key sk-k3y"}}\n\n'


def hiding_usage(seed: bytes) -> bytes:
    return bytes([seed[0] | 0x10]) + seed[1:]


RELAY = {
    "chunked": with_cuts(
        SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + SSE_CHUNKED + b"0\r\n\r\n", 70, 71, 160
    ),
    "usage_withheld": hiding_usage(
        with_cuts(SSE_HEAD + b"Content-Length: %d\r\n\r\n" % len(OPENAI_STREAM) + OPENAI_STREAM, 90)
    ),
    "to_the_close": with_cuts(SSE_HEAD + b"\r\n" + ANTHROPIC_STREAM, 60, 61),
    "key_quoted": with_cuts(SSE_HEAD + b"\r\n" + KEYED + b"data: [DONE]\n\n", 80, 81),
    "cut_mid_event": with_cuts(
        SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + SSE_CHUNKED[:150], 75
    ),
}


def attrs(**kv: str) -> list[KeyValue]:
    return [KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in kv.items()]


def otlp_request() -> ExportMetricsServiceRequest:
    gauge = Metric(
        name="sie.worker.queue_depth",
        gauge=Gauge(data_points=[NumberDataPoint(attributes=attrs(pool="a"), as_int=3)]),
    )
    counter = Metric(
        name="sie.tokens",
        sum=Sum(
            data_points=[NumberDataPoint(attributes=attrs(kind="output"), as_double=12.5)],
            aggregation_temporality=AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA,
            is_monotonic=True,
        ),
    )
    hist = Metric(
        name="sie.latency",
        histogram=Histogram(
            data_points=[
                HistogramDataPoint(
                    attributes=attrs(route="chat"),
                    count=4,
                    sum=1.5,
                    bucket_counts=[1, 2, 1],
                    explicit_bounds=[0.1, 1.0],
                )
            ],
            aggregation_temporality=AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE,
        ),
    )
    return ExportMetricsServiceRequest(
        resource_metrics=[
            ResourceMetrics(
                resource=Resource(attributes=attrs(**{"service.name": "sie-worker"})),
                scope_metrics=[ScopeMetrics(metrics=[gauge, counter, hist])],
            )
        ]
    )


OTLP_BYTES = otlp_request().SerializeToString()
OTLP = {
    "gauge_sum_histogram": OTLP_BYTES,
    "two_resources": OTLP_BYTES + OTLP_BYTES,  # repeated fields concatenate
    "empty": b"",
}


def capped(cap: int, data: bytes) -> bytes:
    return struct.pack("<H", cap) + data


GUNZIP = {
    "otlp": capped(65535, gzip.compress(OTLP_BYTES)),
    "two_members": capped(4096, gzip.compress(b"a" * 100) + gzip.compress(JSON_BODY)),
    "over_cap": capped(64, gzip.compress(bytes(1000))),
    "truncated": capped(4096, gzip.compress(JSON_BODY)[:-3]),
}

# Guardrails: request bodies with and without secrets, and policy input documents.
GUARD = {
    "chat_secret": dumps(
        {
            "model": "openai/gpt-4o",
            "messages": [
                {
                    "role": "user",
                    "content": "key sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX, card 4111 1111 1111 1111",
                },
                {
                    "role": "user",
                    "content": "Authorization: Bearer abcdefghijklmnopqrstuvwxyz api_key=zzzzzzzzzz",
                },
            ],
        }
    ),
    "input": dumps(
        {
            "method": "POST",
            "path": "/v1/chat/completions",
            "phase": "pre_call",
            "request": {"body": "a forbidden 1234 word", "model": "openai/gpt-4o"},
            "identity": {"sub": "alice", "groups": ["a"]},
            "detected": ["credit_card", "email"],
        }
    ),
    "text": b"write to jane@example.com, token: abcdefghij; 5500-0055-5555-5559",
}


def response(status: int, flags: int, *lines: bytes) -> bytes:
    """The respond target's input: status, flags (1 HTTP/1.1, 2 HEAD, 4 keep-alive), lines."""
    return struct.pack("<HB", status - 100, flags) + b"\n".join(lines)


RESPOND = {
    "json": response(200, 5, b"content-type: application/json", b"content-length: 12"),
    "sse": response(200, 5, b"content-type: text/event-stream", b"cache-control: no-cache"),
    "http10_close": response(200, 0, b"content-type: text/plain"),
    "head_request": response(200, 7, b"content-length: 5", b"Date: then"),
    "error_close": response(
        429, 5, b"retry-after: 1", b"Connection: close", b"x-ratelimit-reset-requests: 1s"
    ),
}


def ops(*quads: tuple[int, int, int, int]) -> bytes:
    """The ledger target's input: [op, holders, amount, time step] each."""
    return bytes(b for quad in quads for b in quad)


LEDGER = {
    # The tenant's rpm 3 (op 0x02) admitted three times at once, refused, then settled.
    "burst": ops((2, 1, 1, 0), (2, 1, 1, 0), (2, 1, 1, 0), (2, 1, 1, 0), (3, 0, 5, 8)),
    # Tenant and key, concurrency and tokens, time passing between.
    "both": ops((0x25, 3, 40, 0), (0x25, 3, 40, 1), (3, 0, 10, 64), (0x25, 3, 200, 255)),
}


def main() -> None:
    for target, seeds in {
        "request": REQUEST,
        "passthrough": PASSTHROUGH,
        "head": HEAD,
        "sse": SSE,
        "http1_response": HTTP1,
        "otlp": OTLP,
        "gunzip": GUNZIP,
        "guard": GUARD,
        "respond": RESPOND,
        "ledger": LEDGER,
        "relay": RELAY,
    }.items():
        folder = CORPUS / target
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in seeds.items():
            (folder / name).write_bytes(data)


if __name__ == "__main__":
    main()
