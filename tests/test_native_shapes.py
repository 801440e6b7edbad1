"""The native routes answer in their own API's shapes and are observed like chat: the
official Anthropic SDK raises on a stream edgegw ends with an error (and on edgegw's own
refusals), the OpenAI SDK's Responses stream gets the Responses API's `error` event, and
/v1/messages and /v1/responses record provider, model, status, usage and the WARNING of a
failed stream."""

from __future__ import annotations

import logging
from typing import Any

import anthropic
import orjson
import pytest
import trio

from .bad_upstream import RESET, BadUpstream, Script, chunk, response
from .conftest import (
    Gateway,
    in_thread,
    openai_client,
    sample,
    scrape,
    start_gateway,
    wait_until,
)
from .echo_upstream import Answer, EchoUpstream
from .native_streams import TEXT_START, message_end, message_start, sse, text_delta
from .rawhttp import request

ANTHROPIC_KEY = "sk-ant-provider"
SSE = [("content-type", "text/event-stream")]


MESSAGE_START = message_start(input_tokens=11)
TEXT_DELTA = text_delta("Hel")
MESSAGE_END = message_end(output_tokens=7)
# A stream cut inside an event: what a provider's dropped connection leaves.
CUT = b'event: content_block_delta\ndata: {"type":"content_block_de'


def responses_event(kind: str, seq: int, **doc: Any) -> bytes:
    return sse(kind, {"type": kind, "sequence_number": seq, **doc})


RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1,
    "model": "gpt-4.1",
    "status": "in_progress",
    "output": [],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
}
RESPONSES_HEAD = [
    responses_event("response.created", 0, response=RESPONSE),
    responses_event("response.in_progress", 1, response=RESPONSE),
]


@pytest.fixture
async def echo(nursery: trio.Nursery) -> EchoUpstream:
    upstream = EchoUpstream()
    await nursery.start(upstream.serve)
    return upstream


@pytest.fixture
async def gw(nursery: trio.Nursery, echo: EchoUpstream) -> Gateway:
    base = f"http://127.0.0.1:{echo.port}"
    env = {
        "OPENAI_API_URL": f"{base}/v1",
        "OPENAI_API_KEY": "sk-openai",
        "ANTHROPIC_API_URL": f"{base}/anthropic/v1",
        "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
        "TELEMETRY_ENABLED": "true",
    }
    return await start_gateway(nursery, env)


def anthropic_client(gw: Gateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.base, api_key="client-key", max_retries=0, timeout=10)


def stream_text(client: anthropic.Anthropic, model: str) -> str:
    with client.messages.stream(
        model=model, max_tokens=32, messages=[{"role": "user", "content": "Hi"}]
    ) as stream:
        return "".join(stream.text_stream)


# --- /v1/messages ----------------------------------------------------------------------


async def test_anthropic_sdk_streams_a_whole_answer(gw: Gateway, echo: EchoUpstream) -> None:
    echo.answer = lambda seen: Answer(
        headers=SSE, chunks=[MESSAGE_START, TEXT_START, TEXT_DELTA, *MESSAGE_END]
    )
    client = anthropic_client(gw)
    try:
        assert await in_thread(stream_text, client, "anthropic/claude-sonnet-4-5") == "Hel"
    finally:
        client.close()


async def test_anthropic_sdk_raises_on_a_stream_cut_mid_event(
    gw: Gateway, echo: EchoUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    chunks = [MESSAGE_START, TEXT_START, TEXT_DELTA, CUT]
    echo.answer = lambda seen: Answer(headers=SSE, chunks=chunks)
    await _raises_with(gw, "upstream_stream_truncated", caplog)


async def test_anthropic_sdk_raises_on_a_connection_reset_mid_stream(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    head = [("content-type", "text/event-stream"), ("transfer-encoding", "chunked")]
    pieces = [response(200, head), *(chunk(e) for e in (MESSAGE_START, TEXT_START, TEXT_DELTA))]
    bad = BadUpstream(Script([(0, p) for p in pieces], end=RESET))
    await nursery.start(bad.serve)
    env = {
        "ANTHROPIC_API_URL": f"http://127.0.0.1:{bad.port}/v1",
        "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
    }
    gw = await start_gateway(nursery, env)
    await _raises_with(gw, "upstream_connection_lost", caplog)


async def _raises_with(gw: Gateway, code: str, caplog: pytest.LogCaptureFixture) -> None:
    client = anthropic_client(gw)
    try:
        with pytest.raises(anthropic.APIStatusError) as raised:
            await in_thread(stream_text, client, "anthropic/claude-sonnet-4-5")
    finally:
        client.close()
    body = raised.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "api_error"
    assert body["error"]["code"] == code
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("stream ended with" in w and "claude-sonnet-4-5" in w for w in warnings), warnings


async def test_anthropic_sdk_raises_on_edgegws_own_refusal(gw: Gateway, echo: EchoUpstream) -> None:
    client = anthropic_client(gw)
    try:
        with pytest.raises(anthropic.BadRequestError) as raised:
            await in_thread(
                client.messages.create,
                model="nowhere/claude",
                max_tokens=5,
                messages=[{"role": "user", "content": "Hi"}],
            )
    finally:
        client.close()
    body = raised.value.body
    assert isinstance(body, dict)
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["code"] == "unknown_provider"
    assert echo.seen == []


@pytest.mark.parametrize(
    ("env", "status", "anthropic_type"),
    [
        ({"EDGEGW_API_KEYS": "the-only-key"}, 401, "authentication_error"),
        ({"ALLOWED_MODELS": "anthropic/other"}, 403, "permission_error"),
        ({"ANTHROPIC_API_URL": "http://127.0.0.1:9/v1"}, 502, "api_error"),
    ],
    ids=["no-key", "model-not-allowed", "unreachable"],
)
async def test_messages_refusals_carry_anthropics_type_names(
    nursery: trio.Nursery, echo: EchoUpstream, env: dict[str, str], status: int, anthropic_type: str
) -> None:
    base = f"http://127.0.0.1:{echo.port}"
    gw = await start_gateway(
        nursery,
        {"ANTHROPIC_API_URL": f"{base}/anthropic/v1", "ANTHROPIC_API_KEY": ANTHROPIC_KEY, **env},
    )
    body = b'{"model":"anthropic/claude","max_tokens":5,"messages":[]}'
    resp = await request(gw.port, "POST", "/v1/messages", body)
    doc = orjson.loads(resp.body)
    assert resp.status == status
    assert doc["type"] == "error" and doc["error"]["type"] == anthropic_type


async def test_messages_are_observed_like_chat(
    gw: Gateway, echo: EchoUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="edgegw.access")
    echo.answer = lambda seen: Answer(
        headers=SSE, chunks=[MESSAGE_START, TEXT_START, TEXT_DELTA, *MESSAGE_END]
    )
    body = orjson.dumps(
        {
            "model": "anthropic/claude-sonnet-4-5",
            "max_tokens": 32,
            "stream": True,
            "messages": [{"role": "user", "content": "Hi"}],
        }
    )
    resp = await request(gw.port, "POST", "/v1/messages", body)
    assert resp.status == 200

    def logged() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "edgegw.access"]

    # The core's relay writes a stream's last bytes: the request is logged once it took the
    # stream back, which may be just after the client read them.
    await wait_until(lambda: bool(logged()))
    access = logged()
    assert "provider=anthropic" in access[-1]
    assert "model='anthropic/claude-sonnet-4-5'" in access[-1] and "ttft=-" not in access[-1]
    text = await scrape(gw.metrics_port)
    usage = "gen_ai_client_token_usage_sum"
    labels = {"gen_ai_provider_name": "anthropic"}
    assert sample(text, usage, gen_ai_token_type="input", **labels) == 11
    assert sample(text, usage, gen_ai_token_type="output", **labels) == 7
    duration = "gen_ai_server_request_duration_seconds_count"
    assert sample(text, duration, **labels) == 1


# --- /v1/responses ---------------------------------------------------------------------


async def test_responses_stream_ends_with_the_responses_error_event(
    gw: Gateway, echo: EchoUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    delta = responses_event(
        "response.output_text.delta", 2, item_id="m1", output_index=0, content_index=0, delta="Hi"
    )
    echo.answer = lambda seen: Answer(headers=SSE, chunks=[*RESPONSES_HEAD, delta, CUT])

    def read(client: Any) -> list[Any]:
        with client.responses.create(model="openai/gpt-4.1", input="Hi", stream=True) as stream:
            return list(stream)

    with openai_client(gw.base) as client:
        events = await in_thread(read, client)
    assert [e.type for e in events][-1] == "error"
    last = events[-1]
    assert last.code == "upstream_stream_truncated"
    # The next number after the three events relayed.
    assert last.sequence_number == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("stream ended with" in w for w in warnings), warnings


async def test_responses_are_observed_like_chat(gw: Gateway, echo: EchoUpstream) -> None:
    done = {
        **RESPONSE,
        "status": "completed",
        "usage": {"input_tokens": 5, "output_tokens": 3, "total_tokens": 8},
    }
    echo.answer = lambda seen: Answer(body=orjson.dumps(done))
    with openai_client(gw.base) as client:
        answer = await in_thread(client.responses.create, model="openai/gpt-4.1", input="Hi")
    assert answer.status == "completed"
    text = await scrape(gw.metrics_port)
    usage = "gen_ai_client_token_usage_sum"
    labels = {"gen_ai_provider_name": "openai"}
    assert sample(text, usage, gen_ai_token_type="input", **labels) == 5
    assert sample(text, usage, gen_ai_token_type="output", **labels) == 3
