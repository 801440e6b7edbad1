"""Tracing against a real OTLP/HTTP receiver on loopback: the span tree of a chat request,
a stream, a local request and a routed request's failover; an upstream connect, opened or
refused; prompt and completion text only with TELEMETRY_TRACING_CONTENT; the client's trace continued and propagated upstream; a
collector that is down costs requests nothing and its drops are counted."""

from __future__ import annotations

import ssl
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
import trio
import trustme

from edgegw.mock import MockUpstream
from edgegw.telemetry.tracing import MAX_CONTENT_CHARS

from .conftest import UPSTREAM_KEY, Gateway, sample, scrape, start_gateway
from .echo_upstream import Answer, EchoUpstream, Seen
from .fake_sglang import FakeSGLang, Script
from .otlp_receiver import OtlpReceiver, ReceivedSpan
from .rawhttp import request
from .test_local import local_gateway, profile_yaml

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
INTERNAL, SERVER, CLIENT = 1, 2, 3  # opentelemetry-proto's Span.SpanKind
ERROR = 2  # opentelemetry-proto's Status.StatusCode
CHAT = {"model": "openai/gpt-4o-mini", "messages": [{"role": "user", "content": "secret prompt"}]}
ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "gpt-4o-mini-2024-07-18",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
}


def chunk(delta: dict, finish: str | None = None, usage: dict | None = None) -> bytes:
    doc = {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        doc["usage"] = usage
    return b"data: " + orjson.dumps(doc) + b"\n\n"


def answer(seen: Seen) -> Answer:
    if orjson.loads(seen.body).get("stream"):
        return Answer(
            headers=[("content-type", "text/event-stream")],
            chunks=[
                chunk({"role": "assistant", "content": "Hel"}),
                chunk({"content": "lo"}),
                chunk({}, "stop", {"prompt_tokens": 7, "completion_tokens": 2}),
                b"data: [DONE]\n\n",
            ],
            gap_s=0.01,
        )
    return Answer(body=orjson.dumps(ANSWER))


@pytest.fixture
async def collector(nursery: trio.Nursery) -> OtlpReceiver:
    receiver = OtlpReceiver()
    receiver.port = await nursery.start(receiver.serve)
    return receiver


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> EchoUpstream:
    echo = EchoUpstream()
    echo.answer = answer
    await nursery.start(echo.serve)
    return echo


def tracing_env(endpoint: str, **extra: str) -> dict[str, str]:
    return {
        "TELEMETRY_ENABLED": "true",
        "TELEMETRY_TRACING_ENABLED": "true",
        "TELEMETRY_TRACING_OTLP_ENDPOINT": endpoint,
        **extra,
    }


async def traced_local(
    nursery: trio.Nursery,
    collector: OtlpReceiver,
    tmp_path: Path,
    tokens: int,
    path: str = "",
    **env: str,
) -> tuple[FakeSGLang, Gateway]:
    """A fake SGLang worker of `tokens` words and a gateway serving its one local model,
    tracing to `collector` (at `path`: "" for the path-less endpoint)."""
    worker = FakeSGLang(Script(tokens=tokens))
    await nursery.start(worker.serve)
    gw = await local_gateway(
        nursery,
        tmp_path,
        profile_yaml([(worker.port, "default", None)]),
        tracing_env(f"http://127.0.0.1:{collector.port}{path}", **env),
    )
    return worker, gw


async def traced_gateway(
    nursery: trio.Nursery, collector: OtlpReceiver, upstream: EchoUpstream, scheme: str = "http"
) -> Gateway:
    return await traced_to(
        nursery, f"{scheme}://127.0.0.1:{collector.port}", f"http://127.0.0.1:{upstream.port}/v1"
    )


async def traced_to(nursery: trio.Nursery, collector_url: str, openai_url: str) -> Gateway:
    """A gateway tracing to `collector_url` (path-less: /v1/traces is appended), its
    OpenAI provider at `openai_url`."""
    return await start_gateway(
        nursery,
        tracing_env(collector_url, OPENAI_API_URL=openai_url, OPENAI_API_KEY="sk-upstream-key"),
    )


async def exported(gw: Gateway, condition: Callable[[], bool]) -> None:
    """Flush the gateway's spans until `condition()` holds (the server span ends just
    after the answer's last byte)."""
    tracing = gw.telemetry.tracing
    assert tracing is not None
    with trio.fail_after(5):
        while True:
            await tracing.force_flush()
            if condition():
                return
            await trio.sleep(0.01)


def server_span(collector: OtlpReceiver, path: str) -> ReceivedSpan | None:
    found = [s for s in collector.spans if s.kind == SERVER and s.name == f"POST {path}"]
    return found[-1] if found else None


async def test_chat_span_tree_continues_the_clients_trace(
    nursery: trio.Nursery, collector: OtlpReceiver, upstream: EchoUpstream
) -> None:
    gw = await traced_gateway(nursery, collector, upstream)
    resp = await request(
        gw.port,
        "POST",
        "/v1/chat/completions",
        orjson.dumps(CHAT),
        [("traceparent", TRACEPARENT), ("tracestate", "vendor=1")],
    )
    assert resp.status == 200, resp.body
    await exported(gw, lambda: server_span(collector, "/v1/chat/completions") is not None)
    server = server_span(collector, "/v1/chat/completions")
    assert server is not None
    assert (server.trace_id, server.parent_id) == (TRACE_ID, CLIENT_SPAN)
    assert collector.tree(TRACE_ID)["POST /v1/chat/completions"] == [
        "POST /v1/chat/completions",  # the upstream attempt
        "connect",  # the attempt's (the tree is by name): a fresh gateway's first connection
        "parse",
        "route",
    ]
    attempt = next(s for s in collector.spans if s.kind == CLIENT)
    assert attempt.parent_id == server.span_id
    assert attempt.attributes["http.response.status_code"] == 200
    assert attempt.attributes["server.port"] == upstream.port
    attrs = server.attributes
    assert attrs["gen_ai.provider.name"] == "openai"
    assert attrs["gen_ai.request.model"] == "openai/gpt-4o-mini"
    assert attrs["gen_ai.response.model"] == "gpt-4o-mini-2024-07-18"
    assert attrs["gen_ai.usage.input_tokens"] == 7
    assert attrs["gen_ai.usage.output_tokens"] == 3
    assert attrs["gen_ai.response.finish_reasons"] == ["stop"]
    assert attrs["http.response.status_code"] == 200
    assert attrs["edgegw.request_id"] == resp.headers[b"x-request-id"].decode()
    assert server.resource["service.name"] == "edgegw"
    # Propagated: the provider saw the same trace, with the attempt as its parent.
    seen = upstream.seen[-1].headers
    assert seen["traceparent"] == f"00-{TRACE_ID}-{attempt.span_id}-01"
    assert seen["tracestate"] == "vendor=1"
    assert seen["x-request-id"] == resp.headers[b"x-request-id"].decode()
    # No prompt or completion text in any span without TELEMETRY_TRACING_CONTENT.
    assert "secret prompt" not in repr(collector.spans)


async def test_parse_and_route_spans_say_what_was_decided_and_what_failed(
    nursery: trio.Nursery, collector: OtlpReceiver, upstream: EchoUpstream
) -> None:
    gw = await traced_gateway(nursery, collector, upstream)
    bodies = {
        "ok": orjson.dumps(CHAT),
        "bad json": b'{"model": "openai/gpt-4o-mini", "messages": [',
        "no such model": orjson.dumps({**CHAT, "model": "nope/" + "m" * 300}),
    }
    traces = {}
    for i, (case, body) in enumerate(bodies.items()):
        traces[case] = f"{i + 1:032x}"
        parent = f"00-{traces[case]}-{CLIENT_SPAN}-01"
        resp = await request(
            gw.port, "POST", "/v1/chat/completions", body, [("traceparent", parent)]
        )
        assert (resp.status == 200) == (case == "ok"), (case, resp.body)
    await exported(gw, lambda: sum(s.kind == SERVER for s in collector.spans) == 3)

    def spans(case: str) -> dict[str, ReceivedSpan]:
        return {s.name: s for s in collector.spans if s.trace_id == traces[case]}

    ok = spans("ok")
    parse, route = ok["parse"], ok["route"]
    (server,) = [s for s in collector.spans if s.trace_id == traces["ok"] and s.kind == SERVER]
    assert parse.status_code != ERROR and "error.type" not in parse.attributes
    assert route.attributes == {
        "gen_ai.request.model": "openai/gpt-4o-mini",
        "edgegw.route.target": "openai",
        "edgegw.route.named_profile": False,
    }
    assert route.status_code != ERROR
    assert route.parent_id == parse.parent_id == server.span_id
    assert parse.end_ns <= route.start_ns <= route.end_ns
    # A body that does not parse: its parse span failed with the request error's code, and
    # no routing was done.
    bad = spans("bad json")
    assert bad["parse"].status_code == ERROR
    assert bad["parse"].attributes == {"error.type": "invalid_request"}
    assert "route" not in bad
    # No target for the model: the route span failed, with the model asked for (clipped).
    missing = spans("no such model")["route"]
    assert missing.status_code == ERROR
    assert missing.attributes["gen_ai.request.model"] == ("nope/" + "m" * 300)[:256]
    assert "edgegw.route.target" not in missing.attributes
    assert missing.attributes["error.type"] == "unknown_provider"


async def test_stream_span_has_ttft_and_histograms_have_exemplars(
    nursery: trio.Nursery, collector: OtlpReceiver, upstream: EchoUpstream
) -> None:
    gw = await traced_gateway(nursery, collector, upstream)
    resp = await request(
        gw.port, "POST", "/v1/chat/completions", orjson.dumps({**CHAT, "stream": True})
    )
    assert resp.status == 200
    assert resp.body.endswith(b"data: [DONE]\n\n")
    await exported(gw, lambda: server_span(collector, "/v1/chat/completions") is not None)
    server = server_span(collector, "/v1/chat/completions")
    assert server is not None
    assert server.attributes["gen_ai.server.time_to_first_token"] > 0
    assert server.attributes["gen_ai.usage.output_tokens"] == 2
    assert server.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    text = await scrape(gw.metrics_port)
    # Four upstream pieces, 10 ms apart: three gaps between the client writes, or two when
    # a loaded machine reads two pieces at once (they go out in one write).
    assert sample(text, "inference_gateway_inter_token_gap_seconds_count") in (2, 3)
    assert sample(text, "gen_ai_server_time_to_first_token_seconds_count") == 1
    om = await request(
        gw.metrics_port, "GET", "/metrics", b"", [("accept", "application/openmetrics-text")]
    )
    assert f'# {{trace_id="{server.trace_id}"}}'.encode() in om.body


PROMPT_CANARY = "canary-prompt-7f3a"
ANSWER_CANARY = "canary-answer-91c2"
# Choice 0's text, longer than what an event keeps; choice 1 ends by length.
LONG_ANSWER = ANSWER_CANARY + "x" * MAX_CONTENT_CHARS
CHOICE_EVENTS = [
    {"index": 0, "finish_reason": "stop", "gen_ai.content": LONG_ANSWER[:MAX_CONTENT_CHARS]},
    {"index": 1, "finish_reason": "length", "gen_ai.content": "second"},
]


def canary_answer(seen: Seen) -> Answer:
    """Two choices: LONG_ANSWER (streamed in three deltas) and "second"."""

    def piece(i: int, delta: dict, finish: str | None = None) -> bytes:
        doc = {"id": "c", "object": "chat.completion.chunk", "model": "gpt-4o-mini"}
        doc["choices"] = [{"index": i, "delta": delta, "finish_reason": finish}]
        return b"data: " + orjson.dumps(doc) + b"\n\n"

    if orjson.loads(seen.body).get("stream"):
        chunks = [
            piece(0, {"role": "assistant", "content": ANSWER_CANARY}),
            piece(1, {"role": "assistant", "content": "sec"}),
            piece(0, {"content": LONG_ANSWER[len(ANSWER_CANARY) : 100]}),
            piece(1, {"content": "ond"}, "length"),
            piece(0, {"content": LONG_ANSWER[100:]}),
            piece(0, {}, "stop"),
            b"data: [DONE]\n\n",
        ]
        return Answer(headers=[("content-type", "text/event-stream")], chunks=chunks)
    choices = [
        {"index": 0, "message": {"role": "assistant", "content": LONG_ANSWER}},
        {"index": 1, "message": {"role": "assistant", "content": "second"}},
    ]
    choices[0]["finish_reason"], choices[1]["finish_reason"] = "stop", "length"
    return Answer(body=orjson.dumps({**ANSWER, "choices": choices}))


async def canary_request(gw: Gateway, stream: bool) -> None:
    body = {
        "model": "openai/gpt-4o-mini",
        "messages": [{"role": "user", "content": PROMPT_CANARY}],
        "n": 2,
        "stream": stream,
    }
    resp = await request(gw.port, "POST", "/v1/chat/completions", orjson.dumps(body))
    assert resp.status == 200, resp.body
    assert ANSWER_CANARY.encode() in resp.body


@pytest.mark.parametrize("stream", [False, True])
async def test_content_on_records_the_prompt_and_each_choice(
    nursery: trio.Nursery, collector: OtlpReceiver, upstream: EchoUpstream, stream: bool
) -> None:
    upstream.answer = canary_answer
    gw = await start_gateway(
        nursery,
        tracing_env(
            f"http://127.0.0.1:{collector.port}",
            OPENAI_API_URL=f"http://127.0.0.1:{upstream.port}/v1",
            OPENAI_API_KEY="sk-upstream-key",
            TELEMETRY_TRACING_CONTENT="true",
        ),
    )
    await canary_request(gw, stream)
    await exported(gw, lambda: server_span(collector, "/v1/chat/completions") is not None)
    server = server_span(collector, "/v1/chat/completions")
    assert server is not None
    assert server.events == ["gen_ai.user.message", "gen_ai.choice", "gen_ai.choice"]
    prompt, *choices = server.event_attributes
    assert PROMPT_CANARY in prompt["gen_ai.content"]
    assert choices == CHOICE_EVENTS


@pytest.mark.parametrize("stream", [False, True])
async def test_content_off_puts_no_text_in_any_span(
    nursery: trio.Nursery, collector: OtlpReceiver, upstream: EchoUpstream, stream: bool
) -> None:
    upstream.answer = canary_answer
    gw = await traced_gateway(nursery, collector, upstream)
    await canary_request(gw, stream)
    await exported(gw, lambda: server_span(collector, "/v1/chat/completions") is not None)
    spans = repr(collector.spans)
    assert "gen_ai.choice" not in spans and "gen_ai.user.message" not in spans
    assert PROMPT_CANARY not in spans and ANSWER_CANARY not in spans


async def test_content_on_records_a_local_streams_text_as_the_client_got_it(
    nursery: trio.Nursery, collector: OtlpReceiver, tmp_path: Path
) -> None:
    worker, gw = await traced_local(
        nursery, collector, tmp_path, 5, TELEMETRY_TRACING_CONTENT="true"
    )
    body = {"model": "qwen3-8b", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    resp = await request(gw.port, "POST", "/v1/chat/completions", orjson.dumps(body))
    assert resp.status == 200, resp.body
    chunks = [
        orjson.loads(line[6:]) for line in resp.body.split(b"\n") if line.startswith(b"data: {")
    ]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert len(text.split()) == 5
    await exported(gw, lambda: server_span(collector, "/v1/chat/completions") is not None)
    server = server_span(collector, "/v1/chat/completions")
    assert server is not None
    assert server.events == ["gen_ai.user.message", "gen_ai.choice"]
    assert server.event_attributes[1] == {
        "index": 0,
        "finish_reason": "stop",
        "gen_ai.content": text,
    }


async def test_local_request_span_tree(
    nursery: trio.Nursery, collector: OtlpReceiver, tmp_path: Path
) -> None:
    worker, gw = await traced_local(nursery, collector, tmp_path, 3, path="/v1/traces")
    body = {"model": "qwen3-8b", "messages": [{"role": "user", "content": "hi"}]}
    resp = await request(
        gw.port, "POST", "/v1/chat/completions", orjson.dumps(body), [("traceparent", TRACEPARENT)]
    )
    assert resp.status == 200, resp.body
    await exported(gw, lambda: server_span(collector, "/v1/chat/completions") is not None)
    tree = collector.tree(TRACE_ID)
    assert tree["POST /v1/chat/completions"] == ["POST /v1/chat/completions", "parse", "route"]
    attempt = next(s for s in collector.spans if s.kind == CLIENT)
    assert attempt.attributes["server.port"] == worker.port
    sent = next(r for r in worker.requests if r.path == "/v1/chat/completions")
    assert sent.headers["traceparent"] == f"00-{TRACE_ID}-{attempt.span_id}-01"
    server = server_span(collector, "/v1/chat/completions")
    assert server is not None
    assert server.attributes["gen_ai.provider.name"] == "local"
    # The gateway made the id: SIE's request id is the same one.
    assert resp.headers[b"x-sie-request-id"] == resp.headers[b"x-request-id"]


async def test_a_local_stream_records_its_finish_reasons(
    nursery: trio.Nursery, collector: OtlpReceiver, tmp_path: Path
) -> None:
    worker, gw = await traced_local(nursery, collector, tmp_path, 3)
    body = {
        "model": "qwen3-8b",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "n": 2,
        "max_tokens": 2,  # fewer than the fake's 3 words: both choices end by length
    }
    resp = await request(gw.port, "POST", "/v1/chat/completions", orjson.dumps(body))
    assert resp.status == 200, resp.body
    assert resp.body.count(b'"finish_reason":"length"') == 2
    await exported(gw, lambda: server_span(collector, "/v1/chat/completions") is not None)
    server = server_span(collector, "/v1/chat/completions")
    assert server is not None
    assert server.attributes["gen_ai.response.finish_reasons"] == ["length", "length"]


async def test_failover_span_tree(
    nursery: trio.Nursery, collector: OtlpReceiver, mock: MockUpstream, tmp_path: Path
) -> None:
    """A routed request whose first deployment answers 500: one `route.attempt` span per
    deployment, the first failed with the failover's reason, an upstream attempt for each."""
    config = tmp_path / "routing.json"
    deployments = [
        {"provider": "openai", "model": "mock-error-500"},
        {"provider": "groq", "model": "m2"},
    ]
    config.write_bytes(
        orjson.dumps({"models": {"fast": {"strategy": "round_robin", "deployments": deployments}}})
    )
    env = tracing_env(
        f"http://127.0.0.1:{collector.port}",
        ROUTING_ENABLED="true",
        ROUTING_CONFIG_PATH=str(config),
    )
    for pid in ("openai", "groq"):
        env[f"{pid.upper()}_API_URL"] = f"http://127.0.0.1:{mock.port}/v1"
        env[f"{pid.upper()}_API_KEY"] = UPSTREAM_KEY
    gw = await start_gateway(nursery, env)
    resp = await request(
        gw.port,
        "POST",
        "/v1/chat/completions",
        orjson.dumps({"model": "fast", "messages": [{"role": "user", "content": "hi"}]}),
        [("traceparent", TRACEPARENT)],
    )
    assert resp.status == 200, resp.body
    await exported(gw, lambda: server_span(collector, "/v1/chat/completions") is not None)
    tree = collector.tree(TRACE_ID)
    children = tree["POST /v1/chat/completions"]
    assert children.count("route.attempt") == 2
    assert children.count("POST /v1/chat/completions") == 2  # one upstream attempt each
    attempts = sorted(
        (s for s in collector.spans if s.name == "route.attempt"), key=lambda s: s.start_ns
    )
    assert [a.attributes["gen_ai.provider.name"] for a in attempts] == ["openai", "groq"]
    assert attempts[0].status_code == 2 and attempts[0].attributes["error.type"] == "500"
    assert attempts[1].status_code != 2
    server = server_span(collector, "/v1/chat/completions")
    assert server is not None and server.attributes["gen_ai.provider.name"] == "groq"


async def test_a_new_connection_is_a_connect_span_of_its_attempt(
    nursery: trio.Nursery, collector: OtlpReceiver, upstream: EchoUpstream
) -> None:
    gw = await traced_gateway(nursery, collector, upstream)
    for _ in range(2):  # the second on the connection the first left open
        resp = await request(gw.port, "POST", "/v1/chat/completions", orjson.dumps(CHAT))
        assert resp.status == 200
    await exported(gw, lambda: sum(s.kind == SERVER for s in collector.spans) == 2)
    first, second = sorted(
        (s for s in collector.spans if s.kind == CLIENT), key=lambda s: s.start_ns
    )
    (connect,) = [s for s in collector.spans if s.name == "connect"]
    assert connect.parent_id == first.span_id and connect.trace_id == first.trace_id
    assert connect.kind == INTERNAL and connect.status_code != ERROR
    assert connect.attributes == {"server.address": "127.0.0.1", "server.port": upstream.port}
    assert first.start_ns <= connect.start_ns <= connect.end_ns <= first.end_ns
    assert first.attributes["edgegw.upstream.new_connection"] is True
    assert second.attributes["edgegw.upstream.new_connection"] is False


async def test_an_https_upstreams_connect_span_covers_its_handshake(
    nursery: trio.Nursery,
    collector: OtlpReceiver,
    collector_ca: trustme.CA,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An HTTPS provider (its CA trusted through SSL_CERT_FILE): the first attempt's
    `connect` span holds the TCP connect and the TLS handshake, and the `traceparent` naming
    the attempt arrives over TLS."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    collector_ca.issue_cert("127.0.0.1").configure_cert(context)
    tls_upstream = EchoUpstream()
    tls_upstream.answer = answer
    port = await nursery.start(tls_upstream.serve, context)
    ca_file = tmp_path / "ca.pem"
    collector_ca.cert_pem.write_to_path(str(ca_file))
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    gw = await traced_to(
        nursery, f"http://127.0.0.1:{collector.port}", f"https://127.0.0.1:{port}/v1"
    )
    resp = await request(gw.port, "POST", "/v1/chat/completions", orjson.dumps(CHAT))
    assert resp.status == 200, resp.body
    await exported(gw, lambda: server_span(collector, "/v1/chat/completions") is not None)
    attempt = next(s for s in collector.spans if s.kind == CLIENT)
    (connect,) = [s for s in collector.spans if s.name == "connect"]
    assert connect.parent_id == attempt.span_id and connect.status_code != ERROR
    assert connect.attributes == {"server.address": "127.0.0.1", "server.port": port}
    assert attempt.start_ns <= connect.start_ns <= connect.end_ns <= attempt.end_ns
    assert attempt.attributes["edgegw.upstream.new_connection"] is True
    (seen,) = tls_upstream.seen
    assert seen.headers["traceparent"] == f"00-{attempt.trace_id}-{attempt.span_id}-01"


async def test_a_refused_connect_is_a_failed_connect_span(
    nursery: trio.Nursery, collector: OtlpReceiver
) -> None:
    """Through the generation route and /proxy (each makes its own attempt span; the
    generation's three attempts, edgegw.retry's default, one each)."""
    port = await closed_port()
    gw = await start_gateway(
        nursery,
        tracing_env(
            f"http://127.0.0.1:{collector.port}",
            OPENAI_API_URL=f"http://127.0.0.1:{port}/v1",
            OPENAI_API_KEY="sk-upstream-key",
            UPSTREAM_RETRY_BACKOFF="10ms",
        ),
    )
    resp = await request(gw.port, "POST", "/v1/chat/completions", orjson.dumps(CHAT))
    assert resp.status == 502
    resp = await request(gw.port, "GET", "/proxy/openai/v1/models")
    assert resp.status == 502
    await exported(gw, lambda: sum(s.kind == SERVER for s in collector.spans) == 2)
    attempts = sorted((s for s in collector.spans if s.kind == CLIENT), key=lambda s: s.start_ns)
    assert [a.name for a in attempts] == ["POST /v1/chat/completions"] * 3 + ["GET /v1/models"]
    connects = sorted((s for s in collector.spans if s.name == "connect"), key=lambda s: s.start_ns)
    assert [c.parent_id for c in connects] == [a.span_id for a in attempts]
    for attempt, connect in zip(attempts, connects, strict=True):
        assert attempt.status_code == ERROR
        assert connect.status_code == ERROR
        assert connect.attributes == {
            "server.address": "127.0.0.1",
            "server.port": port,
            "error.type": "upstream_unreachable",
        }


async def closed_port() -> int:
    """A loopback port nothing listens on."""
    closed = trio.socket.socket()
    await closed.bind(("127.0.0.1", 0))
    port: int = closed.getsockname()[1]
    closed.close()
    return port


async def test_collector_down_leaves_requests_alone_and_counts_drops(
    nursery: trio.Nursery, upstream: EchoUpstream
) -> None:
    port = await closed_port()
    gw = await start_gateway(
        nursery,
        tracing_env(
            f"http://127.0.0.1:{port}",
            OPENAI_API_URL=f"http://127.0.0.1:{upstream.port}/v1",
            OPENAI_API_KEY="sk-upstream-key",
        ),
    )
    for _ in range(5):
        resp = await request(gw.port, "POST", "/v1/chat/completions", orjson.dumps(CHAT))
        assert resp.status == 200
    tracing = gw.telemetry.tracing
    assert tracing is not None
    await exported(gw, lambda: tracing.queue.dropped["export_failed"] >= 20)
    text = await scrape(gw.metrics_port)
    dropped = sample(text, "edgegw_tracing_spans_dropped_total", reason="export_failed")
    assert dropped is not None and dropped >= 20  # 4 spans a request, the first 5


async def test_a_full_queue_drops_and_counts(
    nursery: trio.Nursery, collector: OtlpReceiver, upstream: EchoUpstream
) -> None:
    gw = await traced_gateway(nursery, collector, upstream)
    tracing = gw.telemetry.tracing
    assert tracing is not None
    tracing.queue.limit = 2  # as if the exporter had fallen behind
    tracing.queue.pending = 2
    resp = await request(gw.port, "POST", "/v1/chat/completions", orjson.dumps(CHAT))
    assert resp.status == 200
    await exported(gw, lambda: tracing.queue.dropped["queue_full"] >= 5)
    text = await scrape(gw.metrics_port)
    # server, parse, route, the upstream attempt and its connect
    assert sample(text, "edgegw_tracing_spans_dropped_total", reason="queue_full") == 5


def test_tracing_off_never_imports_the_sdk() -> None:
    code = (
        "import sys, trio\n"
        "from edgegw.settings import Settings\n"
        "from edgegw.telemetry.recording import Telemetry\n"
        "import edgegw.server\n"
        "t = Telemetry(Settings.load(environ={'TELEMETRY_ENABLED': 'true'}))\n"
        "assert t.tracing is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("sampler", "ratio", "flags", "traced"),
    [
        ("parentbased_always_on", "1", "00", False),  # the client did not sample its trace
        ("parentbased_always_on", "1", "01", True),
        ("always_on", "1", "00", True),
        ("traceidratio", "0", "01", False),
        ("parentbased_traceidratio", "0", "01", True),  # the client's decision wins
        ("parentbased_traceidratio", "0", None, False),
        ("always_off", "1", "01", False),
    ],
)
async def test_sampling_follows_otel_traces_sampler(
    nursery: trio.Nursery,
    collector: OtlpReceiver,
    upstream: EchoUpstream,
    sampler: str,
    ratio: str,
    flags: str | None,
    traced: bool,
) -> None:
    gw = await start_gateway(
        nursery,
        tracing_env(
            f"http://127.0.0.1:{collector.port}",
            OPENAI_API_URL=f"http://127.0.0.1:{upstream.port}/v1",
            OPENAI_API_KEY="sk-upstream-key",
            OTEL_TRACES_SAMPLER=sampler,
            OTEL_TRACES_SAMPLER_ARG=ratio,
        ),
    )
    headers = [] if flags is None else [("traceparent", f"00-{TRACE_ID}-{CLIENT_SPAN}-{flags}")]
    resp = await request(gw.port, "POST", "/v1/chat/completions", orjson.dumps(CHAT), headers)
    assert resp.status == 200
    # A traced request's last act is ending its server span. Its traceparent upstream
    # names our attempt span; an untraced one passes the client's on unchanged (or none).
    sent = upstream.seen[-1].headers.get("traceparent")
    if traced:
        assert sent is not None and sent.startswith(f"00-{TRACE_ID}-")
        assert sent != f"00-{TRACE_ID}-{CLIENT_SPAN}-{flags}"
    elif flags is None:
        assert sent is None
    else:
        assert sent == f"00-{TRACE_ID}-{CLIENT_SPAN}-{flags}"
    if traced:
        await exported(gw, lambda: server_span(collector, "/v1/chat/completions") is not None)
    else:
        tracing = gw.telemetry.tracing
        assert tracing is not None
        await tracing.force_flush()
        assert collector.spans == []


def test_a_ratio_keeps_the_traces_below_it() -> None:
    from edgegw.settings import Settings
    from edgegw.telemetry.tracing import Tracing

    settings = Settings.load(
        environ={
            "TELEMETRY_ENABLED": "true",
            "TELEMETRY_TRACING_ENABLED": "true",
            "OTEL_TRACES_SAMPLER": "traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": "0.25",
        }
    )
    tracing = Tracing(settings)
    assert tracing.sampled((1 << 64) // 4 - 1, None)
    assert not tracing.sampled((1 << 64) // 4, None)
    assert tracing.sampled((7 << 64) + 5, True) == tracing.sampled(5, None)  # low bits only


async def test_spans_leave_on_the_schedule_delay_with_the_otlp_headers(
    nursery: trio.Nursery,
    collector: OtlpReceiver,
    upstream: EchoUpstream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Read from the process environment, as the SDK's exporter reads its own variables.
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-tenant=edge-1")
    gw = await traced_gateway(nursery, collector, upstream)
    resp = await request(gw.port, "POST", "/v1/chat/completions", orjson.dumps(CHAT))
    assert resp.status == 200
    with trio.fail_after(5):  # no force_flush: the export task's own schedule
        while True:
            if server_span(collector, "/v1/chat/completions") is not None:
                break
            await trio.sleep(0.02)
    assert all(h.get("x-tenant") == "edge-1" for h in collector.headers)
    tracing = gw.telemetry.tracing
    assert tracing is not None
    assert tracing.queue.exported >= 4 and tracing.queue.pending == 0


async def test_a_gzip_batch_retried_after_a_503_arrives_whole(
    nursery: trio.Nursery,
    collector: OtlpReceiver,
    upstream: EchoUpstream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The exporter's variables, read from the process environment as the SDK reads them.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    collector.refuse = [503]  # with Retry-After: 0, so the retry follows at once
    gw = await traced_gateway(nursery, collector, upstream)
    resp = await request(gw.port, "POST", "/v1/chat/completions", orjson.dumps(CHAT))
    assert resp.status == 200
    await exported(gw, lambda: server_span(collector, "/v1/chat/completions") is not None)
    assert collector.requests == 2 and collector.refuse == []
    assert all(h.get("content-encoding") == "gzip" for h in collector.headers)
    tracing = gw.telemetry.tracing
    assert tracing is not None
    assert tracing.queue.dropped == {"queue_full": 0, "export_failed": 0}


async def test_a_collector_refusing_for_good_is_not_retried(
    nursery: trio.Nursery, collector: OtlpReceiver, upstream: EchoUpstream
) -> None:
    collector.refuse = [400]
    gw = await traced_gateway(nursery, collector, upstream)
    resp = await request(gw.port, "POST", "/v1/chat/completions", orjson.dumps(CHAT))
    assert resp.status == 200
    tracing = gw.telemetry.tracing
    assert tracing is not None
    await exported(gw, lambda: tracing.queue.dropped["export_failed"] >= 4)
    assert collector.requests == 1  # a 400 is final, as for the SDK's exporter


@pytest.fixture
def collector_ca() -> trustme.CA:
    return trustme.CA()


async def tls_collector(nursery: trio.Nursery, ca: trustme.CA) -> OtlpReceiver:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    receiver = OtlpReceiver()
    receiver.port = await nursery.start(receiver.serve_tls, context)
    return receiver


async def test_an_https_collector_is_verified_against_otlp_certificate(
    nursery: trio.Nursery,
    upstream: EchoUpstream,
    collector_ca: trustme.CA,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    collector = await tls_collector(nursery, collector_ca)
    ca_file = tmp_path / "ca.pem"
    collector_ca.cert_pem.write_to_path(str(ca_file))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", str(ca_file))
    gw = await traced_gateway(nursery, collector, upstream, "https")
    resp = await request(gw.port, "POST", "/v1/chat/completions", orjson.dumps(CHAT))
    assert resp.status == 200
    await exported(gw, lambda: server_span(collector, "/v1/chat/completions") is not None)


async def test_an_https_collector_not_verified_gets_nothing(
    nursery: trio.Nursery, upstream: EchoUpstream, collector_ca: trustme.CA
) -> None:
    collector = await tls_collector(nursery, collector_ca)  # its CA is not the system's
    gw = await traced_gateway(nursery, collector, upstream, "https")
    resp = await request(gw.port, "POST", "/v1/chat/completions", orjson.dumps(CHAT))
    assert resp.status == 200
    tracing = gw.telemetry.tracing
    assert tracing is not None
    await exported(gw, lambda: tracing.queue.dropped["export_failed"] >= 4)
    assert collector.requests == 0 and collector.spans == []


@pytest.mark.parametrize(
    ("env", "refusal"),
    [
        (
            {"OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem"},
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
        ),
        (
            {"OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY": "/nonexistent/key.pem"},
            "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY is set without",
        ),
        ({"OTEL_EXPORTER_OTLP_HEADERS": "x-a=b%0D%0Ax-b=c"}, "OTEL_EXPORTER_OTLP_HEADERS"),
    ],
)
def test_an_unusable_exporter_setting_stops_the_start(
    env: dict[str, str], refusal: str, tmp_path: Path
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "edgegw", "serve", "--port", "0"],
        env={
            **tracing_env("https://127.0.0.1:9/v1/traces"),
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 78, proc.stderr
    assert refusal in proc.stderr and "Traceback" not in proc.stderr
