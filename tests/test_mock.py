"""edgegw.mock, driven over loopback by a raw h11 client.

The fixture is named `upstream`, not `mock`: conftest's `mock` carries an API key for the gateway
tests, while these tests want the mock's defaults."""

from __future__ import annotations

from dataclasses import replace

import h11
import orjson
import pytest
import trio

from edgegw.mock import MAX_BODY_BYTES, WORDS, MockConfig, MockUpstream

from .conftest import WAIT_S, wait_until
from .rawhttp import Client, Reply, exchange


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> MockUpstream:
    server = MockUpstream()
    await nursery.start(server.serve)
    return server


async def call(
    upstream: MockUpstream,
    method: str,
    path: str,
    body: object = None,
    headers: tuple[tuple[str, str], ...] = (),
) -> Reply:
    return await exchange(upstream.port, method, path, body, headers=headers)


async def raw_exchange(upstream: MockUpstream, data: bytes) -> bytes:
    """Send bytes as they are; return everything until the mock closes the connection."""
    async with await trio.open_tcp_stream("127.0.0.1", upstream.port) as stream:
        await stream.send_all(data)
        received = b""
        with trio.fail_after(WAIT_S):
            while chunk := await stream.receive_some(65536):
                received += chunk
        return received


def chat(**fields: object) -> dict[str, object]:
    return {"model": "mock-small", "messages": [{"role": "user", "content": "hi there"}], **fields}


async def test_chat_non_streaming_shape_and_usage(upstream: MockUpstream) -> None:
    reply = await call(upstream, "POST", "/v1/chat/completions?x=1", chat(model="m-1"))
    assert reply.status == 200 and reply.complete
    assert reply.headers["content-type"] == "application/json"
    body = reply.json()
    assert body["object"] == "chat.completion" and body["model"] == "m-1"
    (choice,) = body["choices"]
    assert choice["index"] == 0 and choice["finish_reason"] == "stop"
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] == " ".join(WORDS[i % len(WORDS)] for i in range(16))
    assert body["usage"] == {"prompt_tokens": 2, "completion_tokens": 16, "total_tokens": 18}
    (recorded,) = upstream.requests
    assert (recorded.method, recorded.path) == ("POST", "/v1/chat/completions?x=1")
    assert recorded.headers["content-type"] == "application/json"
    assert orjson.loads(recorded.body)["model"] == "m-1"


async def test_max_tokens_cap_and_n(upstream: MockUpstream) -> None:
    body = (
        await call(
            upstream, "POST", "/v1/completions", {"prompt": "a b c", "max_tokens": 3, "n": 2}
        )
    ).json()
    assert body["object"] == "text_completion"
    assert [c["finish_reason"] for c in body["choices"]] == ["length", "length"]
    assert [c["text"] for c in body["choices"]] == ["the quick brown", "quick brown fox"]
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 6, "total_tokens": 9}
    body = (
        await call(upstream, "POST", "/v1/chat/completions", chat(max_completion_tokens=16))
    ).json()
    assert body["choices"][0]["finish_reason"] == "stop"


async def test_chat_stream_sequence(upstream: MockUpstream) -> None:
    upstream.config = replace(upstream.config, tokens=5, chunk_tokens=2)
    fields = {"stream": True, "stream_options": {"include_usage": True}}
    reply = await call(upstream, "POST", "/v1/chat/completions", chat(**fields))
    assert reply.status == 200 and reply.complete
    assert reply.headers["content-type"] == "text/event-stream"
    assert reply.headers["transfer-encoding"] == "chunked"
    *chunks, done = reply.events()
    assert done == "[DONE]"
    assert len({(c["id"], c["created"], c["model"]) for c in chunks}) == 1
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    contents = [c["choices"][0]["delta"]["content"] for c in chunks[1:4]]
    assert contents == ["the quick", " brown fox", " jumps"]
    assert chunks[4]["choices"] == [
        {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
    ]
    assert chunks[5]["choices"] == []
    assert chunks[5]["usage"] == {"prompt_tokens": 2, "completion_tokens": 5, "total_tokens": 7}
    assert all(c["usage"] is None for c in chunks[:5])
    assert len(chunks) == 6


async def test_stream_with_two_choices(upstream: MockUpstream) -> None:
    upstream.config = replace(upstream.config, tokens=3)
    reply = await call(upstream, "POST", "/v1/chat/completions", chat(stream=True, n=2))
    *chunks, done = reply.events()
    assert done == "[DONE]"
    assert all("usage" not in c for c in chunks)
    for index in (0, 1):
        mine = [c["choices"][0] for c in chunks if c["choices"][0]["index"] == index]
        assert mine[0]["delta"] == {"role": "assistant", "content": ""}
        assert "".join(c["delta"].get("content", "") for c in mine) == " ".join(
            WORDS[index : index + 3]
        )
        assert [c["finish_reason"] for c in mine] == [None] * 4 + ["stop"]


async def test_completions_stream(upstream: MockUpstream) -> None:
    upstream.config = replace(upstream.config, tokens=2)
    reply = await call(upstream, "POST", "/v1/completions", {"prompt": "x", "stream": True})
    *chunks, done = reply.events()
    assert done == "[DONE]"
    assert [c["choices"][0]["text"] for c in chunks] == ["the", " quick", ""]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert {c["object"] for c in chunks} == {"text_completion"}


@pytest.mark.parametrize("status", [400, 429, 503])
async def test_scripted_error(upstream: MockUpstream, status: int) -> None:
    reply = await call(upstream, "POST", "/v1/chat/completions", chat(model=f"mock-error-{status}"))
    assert reply.status == status
    assert set(reply.json()["error"]) == {"message", "type", "param", "code"}
    assert reply.headers.get("retry-after") == ("7" if status == 429 else None)


async def test_break_after_closes_mid_stream(upstream: MockUpstream) -> None:
    reply = await call(
        upstream, "POST", "/v1/chat/completions", chat(model="mock-break-after-2", stream=True)
    )
    assert reply.status == 200 and not reply.complete
    events = reply.events()
    assert len(events) == 3 and "[DONE]" not in events
    assert all(e["choices"][0]["finish_reason"] is None for e in events)
    assert upstream.stream_disconnects == 0


async def test_hang_ends_when_the_client_leaves(upstream: MockUpstream) -> None:
    async with await trio.open_tcp_stream("127.0.0.1", upstream.port) as stream:
        await Client(stream).send("POST", "/v1/chat/completions", chat(model="mock-hang"))
        await wait_until(lambda: len(upstream.requests) == 1)
        assert upstream.open_connections == 1
    await wait_until(lambda: upstream.open_connections == 0)


async def test_slow_first_byte(upstream: MockUpstream) -> None:
    start = trio.current_time()
    reply = await call(upstream, "POST", "/v1/completions", {"model": "mock-slow-first-byte-30"})
    assert reply.status == 200
    assert trio.current_time() - start >= 0.03


async def test_client_leaving_mid_stream_is_counted(upstream: MockUpstream) -> None:
    upstream.config = replace(upstream.config, tokens=100_000, token_rate=2000)
    async with await trio.open_tcp_stream("127.0.0.1", upstream.port) as stream:
        client = Client(stream)
        await client.send("POST", "/v1/chat/completions", chat(stream=True))
        data_events = 0
        while data_events < 3:
            if isinstance(await client.event(), h11.Data):
                data_events += 1
    await wait_until(lambda: upstream.stream_disconnects == 1)
    await wait_until(lambda: upstream.open_connections == 0)


async def test_error_rate_is_deterministic(upstream: MockUpstream) -> None:
    upstream.config = replace(upstream.config, error_rate=0.5, error_status=503)
    statuses = [(await call(upstream, "POST", "/v1/completions", {"prompt": "x"})).status
                for _ in range(4)]  # fmt: skip
    assert statuses == [200, 503, 200, 503]


async def test_api_key(upstream: MockUpstream) -> None:
    upstream.config = replace(upstream.config, api_key="sk-test")
    denied = await call(upstream, "GET", "/v1/models")
    assert denied.status == 401 and denied.json()["error"]["code"] == "invalid_api_key"
    allowed = await call(
        upstream, "GET", "/v1/models", headers=(("authorization", "Bearer sk-test"),)
    )
    assert [m["id"] for m in allowed.json()["data"]] == ["mock-small", "mock-large"]
    assert (await call(upstream, "GET", "/health")).json() == {"status": "ok"}


async def test_keep_alive_and_errors_on_one_connection(upstream: MockUpstream) -> None:
    async with await trio.open_tcp_stream("127.0.0.1", upstream.port) as stream:
        client = Client(stream)
        statuses = []
        for method, path, body in [
            ("GET", "/health", None),
            ("GET", "/nope", None),
            ("GET", "/v1/chat/completions", None),
            ("POST", "/v1/chat/completions", b"{not json"),
            ("POST", "/v1/chat/completions", {"n": 0}),
            ("POST", "/v1/chat/completions", chat(stream=True)),
        ]:
            await client.send(method, path, body)
            reply = await client.reply()
            statuses.append(reply.status)
            if reply.status >= 400:
                assert set(reply.json()["error"]) == {"message", "type", "param", "code"}
            client.conn.start_next_cycle()
        assert statuses == [200, 404, 405, 400, 400, 200]
        assert upstream.open_connections == 1


async def test_oversized_body_is_413(upstream: MockUpstream) -> None:
    head = b"POST /v1/completions HTTP/1.1\r\nhost: m\r\ncontent-length: %d\r\n\r\n"
    received = await raw_exchange(upstream, head % (MAX_BODY_BYTES + 1))
    assert received.startswith(b"HTTP/1.1 413 ")
    assert upstream.requests[-1].body == b""


async def test_garbage_does_not_hurt_the_server(upstream: MockUpstream) -> None:
    received = await raw_exchange(upstream, b"\x00\x01 not http at all\r\n\r\n")
    assert received.startswith(b"HTTP/1.1 400 ")
    assert (await call(upstream, "GET", "/health")).status == 200


async def test_config_is_validated() -> None:
    with pytest.raises(ValueError):
        MockConfig(chunk_tokens=0)
    with pytest.raises(ValueError):
        MockConfig(error_rate=1.5)


async def test_request_pipelined_behind_a_stream(upstream: MockUpstream) -> None:
    upstream.config = replace(upstream.config, tokens=3, token_rate=1000)
    health = h11.Request(method="GET", target="/health", headers=[("host", "mock")])
    async with await trio.open_tcp_stream("127.0.0.1", upstream.port) as stream:
        client = Client(stream)
        await client.send("POST", "/v1/completions", {"stream": True})
        # Sent before the stream is answered, so the mock's watcher is the one that reads it.
        await stream.send_all(h11.Connection(h11.CLIENT).send(health))
        first = await client.reply()
        assert first.complete and first.events()[-1] == "[DONE]"
        client.conn.start_next_cycle()
        client.conn.send(health)  # only to move the client's h11 along: the bytes went out above
        client.conn.send(h11.EndOfMessage())
        assert (await client.reply()).json() == {"status": "ok"}
    assert [r.path for r in upstream.requests] == ["/v1/completions", "/health"]
    assert upstream.stream_disconnects == 0


async def test_expect_100_continue(upstream: MockUpstream) -> None:
    head = b"POST /v1/completions HTTP/1.1\r\nhost: m\r\nexpect: 100-continue\r\n"
    async with await trio.open_tcp_stream("127.0.0.1", upstream.port) as stream:
        await stream.send_all(head + b"content-length: 2\r\nconnection: close\r\n\r\n")
        with trio.fail_after(WAIT_S):
            assert (await stream.receive_some(65536)).startswith(b"HTTP/1.1 100 ")
            await stream.send_all(b"{}")
            received = b""
            while chunk := await stream.receive_some(65536):
                received += chunk
    assert received.startswith(b"HTTP/1.1 200 ")
