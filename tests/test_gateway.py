"""End to end on loopback: the official openai SDK (and a raw client where bytes matter)
through a real gateway to the mock upstream, both started by the test on port 0."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import orjson
import pytest
import trio
import trio.testing
from openai import APIError, BadRequestError, InternalServerError, OpenAI, RateLimitError

from edgegw.mock import MockUpstream

from .conftest import (
    UPSTREAM_KEY,
    Gateway,
    in_thread,
    openai_client,
    start_gateway,
    upstream_env,
    wait_until,
)
from .rawhttp import request, sse_data

MESSAGES = [{"role": "user", "content": "Hello there"}]


@pytest.fixture
def sdk(gateway: Gateway) -> Iterator[OpenAI]:
    with openai_client(gateway.base) as client:
        yield client


async def test_chat_non_streaming_with_the_sdk(
    gateway: Gateway, mock: MockUpstream, sdk: OpenAI
) -> None:
    c = sdk
    resp = await in_thread(
        c.chat.completions.create, model="openai/gpt-4o-mini", messages=MESSAGES, max_tokens=5
    )
    assert resp.object == "chat.completion"
    assert resp.model == "gpt-4o-mini"
    assert resp.choices[0].finish_reason == "length"
    assert len(resp.choices[0].message.content.split()) == 5
    assert resp.usage.completion_tokens == 5
    sent = orjson.loads(mock.requests[-1].body)
    assert sent == {"model": "gpt-4o-mini", "messages": MESSAGES, "max_tokens": 5}
    assert mock.requests[-1].path == "/v1/chat/completions"


async def test_chat_streaming_with_the_sdk(gateway: Gateway, sdk: OpenAI) -> None:
    c = sdk

    def run() -> list:
        return list(
            c.chat.completions.create(
                model="openai/gpt-4o-mini",
                messages=MESSAGES,
                stream=True,
                stream_options={"include_usage": True},
                max_tokens=4,
            )
        )

    chunks = await trio.to_thread.run_sync(run)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert len(text.split()) == 4
    assert chunks[-1].usage.completion_tokens == 4
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "length"


async def test_completions_streaming_and_not(
    gateway: Gateway, mock: MockUpstream, sdk: OpenAI
) -> None:
    c = sdk
    resp = await in_thread(
        c.completions.create, model="openai/gpt-3.5-turbo-instruct", prompt="Say", max_tokens=3
    )
    assert resp.object == "text_completion"
    assert len(resp.choices[0].text.split()) == 3
    assert mock.requests[-1].path == "/v1/completions"

    def run() -> list:
        return list(c.completions.create(model="openai/x", prompt="Say", max_tokens=3, stream=True))

    chunks = await trio.to_thread.run_sync(run)
    assert (
        "".join(ch.choices[0].text for ch in chunks if ch.choices).split()
        == resp.choices[0].text.split()
    )


async def test_client_credentials_never_reach_the_upstream(
    gateway: Gateway, mock: MockUpstream
) -> None:
    resp = await request(
        gateway.port,
        "POST",
        "/v1/chat/completions",
        orjson.dumps({"model": "openai/m", "messages": MESSAGES}),
        [("authorization", "Bearer client-secret"), ("x-api-key", "client-secret-2")],
    )
    assert resp.status == 200
    seen = mock.requests[-1].headers
    assert seen["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert "x-api-key" not in seen
    assert all("client-secret" not in v for v in seen.values())


async def test_sie_extension_refused_for_a_remote_provider(
    gateway: Gateway, mock: MockUpstream, sdk: OpenAI
) -> None:
    before = len(mock.requests)
    with pytest.raises(BadRequestError) as info:
        await in_thread(
            sdk.chat.completions.create,
            model="openai/m",
            messages=MESSAGES,
            extra_body={"lora_adapter": "sql"},
        )
    assert info.value.code == "unsupported_field"
    assert info.value.param == "lora_adapter"
    assert len(mock.requests) == before


async def test_invalid_request_is_rejected_before_the_upstream(
    gateway: Gateway, mock: MockUpstream, sdk: OpenAI
) -> None:
    with pytest.raises(BadRequestError) as info:
        await in_thread(
            sdk.chat.completions.create,
            model="openai/m",
            messages=MESSAGES,
            temperature=-1,
        )
    assert (info.value.status_code, info.value.code, info.value.param) == (
        400,
        "invalid_request",
        "temperature",
    )
    assert mock.requests == []


async def test_upstream_error_keeps_status_and_retry_after(gateway: Gateway, sdk: OpenAI) -> None:
    with pytest.raises(RateLimitError) as info:
        await in_thread(
            sdk.chat.completions.create,
            model="openai/mock-error-429",
            messages=MESSAGES,
        )
    assert info.value.response.headers["retry-after"] == "7"
    body = info.value.response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}

    with pytest.raises(InternalServerError) as info2:
        await in_thread(
            sdk.chat.completions.create,
            model="openai/mock-error-500",
            messages=MESSAGES,
        )
    assert info2.value.status_code == 500


async def test_streaming_upstream_error_before_first_byte_is_a_json_error(gateway: Gateway) -> None:
    resp = await request(
        gateway.port,
        "POST",
        "/v1/chat/completions",
        orjson.dumps({"model": "openai/mock-error-503", "messages": MESSAGES, "stream": True}),
    )
    assert resp.status == 503
    assert resp.headers[b"content-type"] == b"application/json"
    assert set(orjson.loads(resp.body)["error"]) == {"message", "type", "param", "code"}


async def test_stream_broken_after_first_byte_ends_with_error_event(
    gateway: Gateway, sdk: OpenAI
) -> None:
    resp = await request(
        gateway.port,
        "POST",
        "/v1/chat/completions",
        orjson.dumps({"model": "openai/mock-break-after-2", "messages": MESSAGES, "stream": True}),
    )
    assert resp.status == 200
    events = sse_data(resp.body)
    assert b"[DONE]" not in events
    last = orjson.loads(events[-1])
    assert last["error"]["code"] == "upstream_connection_lost"
    assert sum(1 for e in events if b'"content"' in e) >= 2

    def run() -> None:
        for _ in sdk.chat.completions.create(
            model="openai/mock-break-after-2", messages=MESSAGES, stream=True
        ):
            pass

    with pytest.raises(APIError):
        await trio.to_thread.run_sync(run)


async def test_client_disconnect_cancels_the_upstream_stream(
    nursery: trio.Nursery, mock: MockUpstream
) -> None:
    gw = await start_gateway(nursery, upstream_env(mock))
    mock.config = type(mock.config)(api_key=UPSTREAM_KEY, token_rate=20, tokens=1000)
    resp = await request(
        gw.port,
        "POST",
        "/v1/chat/completions",
        orjson.dumps({"model": "openai/m", "messages": MESSAGES, "stream": True}),
        max_chunks=2,
    )
    assert resp.status == 200
    # The bound: the upstream is cancelled within 1 s.
    await wait_until(lambda: mock.stream_disconnects >= 1, within_s=1)
    # The cancelled exchange left no connection in the pool. Wall time: the gateway's
    # cleanup is socket work in other tasks, with no event to wait on.
    await trio.sleep(0.05)
    assert gw.pool.idle_count() == 0
    assert gw.pool.open_connections == 0


async def test_client_disconnect_cancels_a_non_streaming_request(
    nursery: trio.Nursery, mock: MockUpstream
) -> None:
    gw = await start_gateway(nursery, upstream_env(mock))
    stream = await trio.open_tcp_stream("127.0.0.1", gw.port)
    body = orjson.dumps({"model": "openai/mock-hang", "messages": MESSAGES})
    await stream.send_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        + b"content-length: %d\r\n\r\n" % len(body)
        + body
    )
    await wait_until(lambda: mock.open_connections >= 1 and bool(mock.requests), within_s=1)
    await stream.aclose()
    await wait_until(lambda: mock.open_connections == 0, within_s=1)
    assert gw.pool.open_connections == 0


async def test_unreachable_upstream_is_502_and_timeout_is_504(
    nursery: trio.Nursery, mock: MockUpstream, autojump_clock: trio.testing.MockClock
) -> None:
    # Virtual time: the wait is the first-byte timer (the mock never answers), not a peer.
    closed = trio.socket.socket()
    await closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    gw = await start_gateway(
        nursery, {"OPENAI_API_URL": f"http://127.0.0.1:{port}/v1", "OPENAI_API_KEY": "k"}
    )
    body = orjson.dumps({"model": "openai/m", "messages": MESSAGES})
    resp = await request(gw.port, "POST", "/v1/chat/completions", body)
    assert resp.status == 502
    assert orjson.loads(resp.body)["error"]["code"] == "upstream_unreachable"

    gw2 = await start_gateway(nursery, upstream_env(mock, UPSTREAM_FIRST_BYTE_TIMEOUT="300ms"))
    resp = await request(
        gw2.port,
        "POST",
        "/v1/chat/completions",
        orjson.dumps({"model": "openai/mock-hang", "messages": MESSAGES}),
    )
    assert resp.status == 504
    assert orjson.loads(resp.body)["error"]["code"] == "upstream_timeout"


async def _paced_stream(gw: Gateway, mock: MockUpstream, rate: int) -> list[bytes]:
    """The SSE data of a streamed chat whose 10 tokens the mock sends `rate` a second."""
    mock.config = type(mock.config)(api_key=UPSTREAM_KEY, token_rate=rate, tokens=10)
    resp = await request(
        gw.port,
        "POST",
        "/v1/chat/completions",
        orjson.dumps({"model": "openai/m", "messages": MESSAGES, "stream": True}),
    )
    return sse_data(resp.body)


async def test_stalled_stream_ends_with_error_event(
    nursery: trio.Nursery, mock: MockUpstream, autojump_clock: trio.testing.MockClock
) -> None:
    # Virtual time: the waits are timers, the mock's pace (2 tokens/s) and the idle timeout.
    gw = await start_gateway(nursery, upstream_env(mock, UPSTREAM_IDLE_TIMEOUT="200ms"))
    events = await _paced_stream(gw, mock, rate=2)
    assert b"[DONE]" not in events
    assert orjson.loads(events[-1])["error"]["code"] == "upstream_timeout"


@pytest.mark.parametrize(("rate", "stalls"), [(2, True), (10, False)])
async def test_a_stream_deadline_kept_through_the_writes_still_bounds_silence(
    nursery: trio.Nursery,
    mock: MockUpstream,
    autojump_clock: trio.testing.MockClock,
    rate: int,
    stalls: bool,
) -> None:
    # A blocked write gives up first (SERVER_WRITE_STALL_TIMEOUT under the idle bound): the
    # pump keeps one deadline through the writes, moved at most every 50 ms (edgegw.pump).
    env = upstream_env(mock, UPSTREAM_IDLE_TIMEOUT="200ms", SERVER_WRITE_STALL_TIMEOUT="100ms")
    gw = await start_gateway(nursery, env)
    events = await _paced_stream(gw, mock, rate=rate)
    if stalls:  # 500 ms between tokens
        assert b"[DONE]" not in events
        assert orjson.loads(events[-1])["error"]["code"] == "upstream_timeout"
    else:  # 100 ms between tokens: ten of them, each within the bound
        assert events[-1] == b"[DONE]"
        text = "".join(
            orjson.loads(e)["choices"][0]["delta"].get("content") or ""
            for e in events[:-1]
            if orjson.loads(e).get("choices")
        )
        assert len(text.split()) == 10


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("GET", "/nope", b"", 404, "not_found"),
        ("GET", "/v1/chat/completions", b"", 405, "method_not_allowed"),
        (
            "POST",
            "/v1/chat/completions",
            b'{"model":"gpt-4o","messages":[{"role":"user","content":"x"}]}',
            400,
            "unknown_provider",
        ),
        (
            "POST",
            "/v1/chat/completions",
            b'{"model":"groq/llama","messages":[{"role":"user","content":"x"}]}',
            400,
            "provider_not_configured",
        ),
        (
            "POST",
            "/v1/chat/completions",
            b'{"model":"openai/","messages":[{"role":"user","content":"x"}]}',
            400,
            "invalid_request",
        ),
        ("POST", "/v1/chat/completions", b"not json", 400, "invalid_request"),
        (
            "POST",
            "/v1/completions",
            b'{"model":"openai/m","prompt":"x","top_k":1}',
            400,
            "unsupported_field",
        ),
    ],
)
async def test_error_envelope(
    gateway: Gateway, method: str, path: str, body: bytes, status: int, code: str
) -> None:
    resp = await request(gateway.port, method, path, body)
    assert resp.status == status
    err = orjson.loads(resp.body)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == code


async def test_provider_query_parameter(gateway: Gateway, mock: MockUpstream) -> None:
    resp = await request(
        gateway.port,
        "POST",
        "/v1/chat/completions?provider=openai",
        orjson.dumps({"model": "gpt-4o", "messages": MESSAGES}),
    )
    assert resp.status == 200
    assert orjson.loads(mock.requests[-1].body)["model"] == "gpt-4o"


async def test_body_size_cap(nursery: trio.Nursery, mock: MockUpstream) -> None:
    gw = await start_gateway(nursery, upstream_env(mock, SERVER_MAX_REQUEST_BODY_SIZE="2048"))
    big = orjson.dumps({"model": "openai/m", "messages": [{"role": "user", "content": "x" * 4096}]})
    resp = await request(gw.port, "POST", "/v1/chat/completions", big)
    assert resp.status == 413
    assert orjson.loads(resp.body)["error"]["code"] == "payload_too_large"


async def test_client_api_keys(nursery: trio.Nursery, mock: MockUpstream) -> None:
    gw = await start_gateway(nursery, upstream_env(mock, EDGEGW_API_KEYS="k-one, k-two"))
    body = orjson.dumps({"model": "openai/m", "messages": MESSAGES})
    assert (await request(gw.port, "GET", "/health")).status == 200
    denied = await request(
        gw.port, "POST", "/v1/chat/completions", body, [("authorization", "Bearer nope")]
    )
    assert denied.status == 401
    assert orjson.loads(denied.body)["error"]["code"] == "invalid_api_key"
    assert (await request(gw.port, "GET", "/v1/models")).status == 401
    ok = await request(
        gw.port, "POST", "/v1/chat/completions", body, [("authorization", "Bearer k-two")]
    )
    assert ok.status == 200
    ok2 = await request(gw.port, "POST", "/v1/chat/completions", body, [("x-api-key", "k-one")])
    assert ok2.status == 200
    # The client's key is not forwarded; the provider's is.
    assert mock.requests[-1].headers["authorization"] == f"Bearer {UPSTREAM_KEY}"


async def test_models_list(gateway: Gateway, sdk: OpenAI) -> None:
    resp = await in_thread(sdk.models.list)
    ids = [m.id for m in resp.data]
    assert ids == ["openai/mock-small", "openai/mock-large"]


async def test_pooled_connections_are_reused(gateway: Gateway, mock: MockUpstream) -> None:
    body = orjson.dumps({"model": "openai/m", "messages": MESSAGES})
    for _ in range(5):
        assert (await request(gateway.port, "POST", "/v1/chat/completions", body)).status == 200
    assert gateway.pool.open_connections == 1
    assert gateway.pool.idle_count() == 1


async def test_no_key_reaches_the_logs(
    nursery: trio.Nursery, mock: MockUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    gw = await start_gateway(nursery, upstream_env(mock, EDGEGW_API_KEYS="client-key-xyz"))
    body = orjson.dumps({"model": "openai/mock-error-401", "messages": MESSAGES})
    for headers in ([("authorization", "Bearer wrong-key-abc")], [("x-api-key", "client-key-xyz")]):
        await request(gw.port, "POST", "/v1/chat/completions", body, headers)
    await request(
        gw.port,
        "POST",
        "/v1/chat/completions",
        orjson.dumps({"model": "openai/m", "messages": MESSAGES, "stream": True}),
        [("x-api-key", "client-key-xyz")],
        max_chunks=1,
    )
    # Let the disconnect watch act and log. Wall time: that is the gateway's socket work
    # after the client hung up, with no event to wait on.
    await trio.sleep(0.6)
    text = caplog.text
    for secret in ("client-key-xyz", "wrong-key-abc", UPSTREAM_KEY):
        assert secret not in text
