"""What a misbehaving upstream can make edgegw do: nothing it should not. Compressed bodies
are decoded (never relayed mislabelled), large answers are bounded per answer and per
process, the provider's key quoted back is scrubbed, bad framing does not break /proxy."""

from __future__ import annotations

import gc
import gzip
import logging
import os
from collections.abc import Iterator

import orjson
import pytest
import trio
import trio.testing

from edgegw.mock import MockUpstream

from .bad_upstream import HANG, BadUpstream, Script, chunk, response
from .conftest import Gateway, start_gateway, upstream_env
from .rawhttp import request, sse_data

KEY = "sk-canary-0123456789abcdef"
CHAT = orjson.dumps({"model": "openai/gpt", "messages": [{"role": "user", "content": "hi"}]})
STREAM = orjson.dumps(
    {"model": "openai/gpt", "messages": [{"role": "user", "content": "hi"}], "stream": True}
)
# A stream that asks for usage: ANSWER (which carries usage) is relayed as the upstream sent it.
STREAM_USAGE = orjson.dumps({**orjson.loads(STREAM), "stream_options": {"include_usage": True}})
ANSWER = orjson.dumps(
    {
        "id": "c1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture(autouse=True)
def fds_back_to_baseline() -> Iterator[None]:
    """Whatever an upstream did, the gateway holds no socket of it afterwards."""
    gc.collect()
    before = open_fds()
    yield
    gc.collect()  # a leaked socket's ResourceWarning fails the test that leaked it
    assert open_fds() <= before


@pytest.fixture
async def bad(nursery: trio.Nursery) -> BadUpstream:
    upstream = BadUpstream()
    await nursery.start(upstream.serve)
    return upstream


async def gateway_for(nursery: trio.Nursery, bad: BadUpstream, **env: str) -> Gateway:
    return await start_gateway(
        nursery,
        {"OPENAI_API_URL": f"http://127.0.0.1:{bad.port}/v1", "OPENAI_API_KEY": KEY, **env},
    )


def json_answer(
    body: bytes, *, status: int = 200, extra: tuple[tuple[str, str], ...] = ()
) -> bytes:
    headers = [("content-type", "application/json"), ("content-length", str(len(body))), *extra]
    return response(status, headers, body)


async def test_edgegw_asks_for_identity(nursery: trio.Nursery, bad: BadUpstream) -> None:
    gw = await gateway_for(nursery, bad)
    bad.script = Script([(0, json_answer(ANSWER))])
    assert (await request(gw.port, "POST", "/v1/chat/completions", CHAT)).status == 200
    assert b"\r\naccept-encoding: identity\r\n" in bad.requests[-1].lower()


async def test_a_gzip_answer_is_decoded(nursery: trio.Nursery, bad: BadUpstream) -> None:
    gw = await gateway_for(nursery, bad)
    bad.script = Script(
        [(0, json_answer(gzip.compress(ANSWER), extra=(("content-encoding", "gzip"),)))]
    )
    resp = await request(gw.port, "POST", "/v1/chat/completions", CHAT)
    assert resp.status == 200
    assert b"content-encoding" not in resp.headers
    assert orjson.loads(resp.body)["choices"][0]["message"]["content"] == "hello"


async def test_a_gzip_stream_is_decoded(nursery: trio.Nursery, bad: BadUpstream) -> None:
    gw = await gateway_for(nursery, bad)
    events = b"data: " + ANSWER + b"\n\ndata: [DONE]\n\n"
    packed = gzip.compress(events)
    head = response(
        200,
        [("content-type", "text/event-stream"), ("transfer-encoding", "chunked"),
         ("content-encoding", "gzip")],
    )  # fmt: skip
    bad.script = Script(
        [(0, head), (0, chunk(packed[:10])), (0.01, chunk(packed[10:])), (0, b"0\r\n\r\n")]
    )
    resp = await request(gw.port, "POST", "/v1/chat/completions", STREAM_USAGE)
    assert resp.status == 200
    assert sse_data(resp.body) == [ANSWER, b"[DONE]"]


async def test_an_encoding_edgegw_cannot_decode_is_refused(
    nursery: trio.Nursery, bad: BadUpstream
) -> None:
    gw = await gateway_for(nursery, bad)
    bad.script = Script([(0, json_answer(b"\x00\x01", extra=(("content-encoding", "br"),)))])
    resp = await request(gw.port, "POST", "/v1/chat/completions", CHAT)
    assert resp.status == 502
    assert orjson.loads(resp.body)["error"]["code"] == "upstream_error"


async def test_an_answer_over_the_cap_is_refused(nursery: trio.Nursery, bad: BadUpstream) -> None:
    gw = await gateway_for(nursery, bad, UPSTREAM_MAX_RESPONSE_SIZE=str(256 * 1024))
    big = b'{"pad":"' + b"x" * (300 * 1024) + b'"}'
    bad.script = Script([(0, json_answer(big))])
    resp = await request(gw.port, "POST", "/v1/chat/completions", CHAT)
    assert resp.status == 502
    assert orjson.loads(resp.body)["error"]["code"] == "upstream_response_too_large"
    # The same through gzip: the decoded size counts, however small the compressed one.
    bad.script = Script(
        [(0, json_answer(gzip.compress(big), extra=(("content-encoding", "gzip"),)))]
    )
    resp = await request(gw.port, "POST", "/v1/chat/completions", CHAT)
    assert resp.status == 502
    assert orjson.loads(resp.body)["error"]["code"] == "upstream_response_too_large"


async def test_the_process_buffer_budget_bounds_held_answers(
    nursery: trio.Nursery, bad: BadUpstream
) -> None:
    gw = await gateway_for(nursery, bad, EDGEGW_RESPONSE_BUFFER_BUDGET=str(1 << 20))
    big = b'{"pad":"' + b"x" * (600 * 1024) + b'"}'  # charged twice: over 1 MiB
    bad.script = Script([(0, json_answer(big))])
    resp = await request(gw.port, "POST", "/v1/chat/completions", CHAT)
    assert resp.status == 503
    assert orjson.loads(resp.body)["error"]["code"] == "overloaded"
    assert resp.headers[b"retry-after"] == b"1"
    # What was charged is given back: a smaller answer fits, twice in a row.
    bad.script = Script([(0, json_answer(ANSWER))])
    for _ in range(2):
        assert (await request(gw.port, "POST", "/v1/chat/completions", CHAT)).status == 200


def quoting_error() -> bytes:
    body = orjson.dumps(
        {"error": {"message": f"Incorrect API key provided: {KEY}.", "code": "invalid_api_key"}}
    )
    return json_answer(body, status=401)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", CHAT),
        ("/v1/chat/completions", STREAM),
        ("/v1/responses", orjson.dumps({"model": "openai/gpt", "input": "hi"})),
        ("/v1/responses", orjson.dumps({"model": "openai/gpt", "input": "hi", "stream": True})),
        ("/proxy/openai/models", b""),
    ],
)
async def test_the_provider_key_quoted_back_is_scrubbed(
    nursery: trio.Nursery,
    bad: BadUpstream,
    caplog: pytest.LogCaptureFixture,
    path: str,
    body: bytes,
) -> None:
    caplog.set_level(logging.DEBUG)
    gw = await gateway_for(nursery, bad)
    bad.script = Script([(0, quoting_error())])
    method = "GET" if path.startswith("/proxy") else "POST"
    resp = await request(gw.port, method, path, body)
    assert resp.status == 401
    assert KEY.encode() not in resp.body
    assert b"[redacted]" in resp.body
    assert KEY not in caplog.text


async def test_proxy_drops_a_content_length_beside_chunked_framing(
    nursery: trio.Nursery, bad: BadUpstream
) -> None:
    gw = await gateway_for(nursery, bad)
    head = response(200, [("content-type", "text/plain"), ("content-length", "5"),
                          ("transfer-encoding", "chunked")])  # fmt: skip
    bad.script = Script([(0, head + chunk(b"hello ") + chunk(b"world") + b"0\r\n\r\n")])
    resp = await request(gw.port, "GET", "/proxy/openai/files", b"")
    assert resp.status == 200
    assert resp.body == b"hello world"
    # The gateway still answers afterwards.
    assert (await request(gw.port, "GET", "/health")).status == 200


async def test_upstream_failures_are_logged(
    nursery: trio.Nursery, bad: BadUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    gw = await gateway_for(nursery, bad)
    bad.script = Script([(0, b"HTTP/1.1 200 OK\r\nconte")])  # cut inside the head
    resp = await request(gw.port, "POST", "/v1/chat/completions", CHAT)
    assert resp.status == 502
    assert any(r.levelno >= logging.WARNING and "502" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("end", ["close", "reset"])
async def test_a_stream_cut_mid_event_ends_with_a_parseable_error_event(
    nursery: trio.Nursery, bad: BadUpstream, end: str
) -> None:
    gw = await gateway_for(nursery, bad)
    whole = b"data: " + ANSWER + b"\n\n"
    head = response(200, [("content-type", "text/event-stream"), ("transfer-encoding", "chunked")])
    # One whole event and half of the next in one piece, then the upstream goes away.
    bad.script = Script([(0, head + chunk(whole + b'data: {"partial_marker":'))], end=end)
    resp = await request(gw.port, "POST", "/v1/chat/completions", STREAM_USAGE)
    assert resp.status == 200
    assert resp.body.startswith(whole)
    events = resp.body.split(b"\n\n")
    assert events[-1] == b""  # the body ends with a whole event
    assert [orjson.loads(e.removeprefix(b"data: ")) for e in events[:-1]][0]["id"] == "c1"
    error = orjson.loads(events[-2].removeprefix(b"data: "))["error"]
    assert error["code"] in ("upstream_connection_lost", "upstream_stream_truncated")
    assert b"partial_marker" not in resp.body
    assert b"[DONE]" not in resp.body


async def test_the_key_in_a_stream_split_across_pieces_is_scrubbed(
    nursery: trio.Nursery, bad: BadUpstream
) -> None:
    gw = await gateway_for(nursery, bad)
    event = b'data: {"error":{"message":"bad key ' + KEY.encode() + b'"}}\n\n'
    head = response(200, [("content-type", "text/event-stream"), ("transfer-encoding", "chunked")])
    half = len(event) // 2
    bad.script = Script(
        [(0, head + chunk(event[:half])), (0.02, chunk(event[half:]) + chunk(b"data: [DONE]\n\n")),
         (0, b"0\r\n\r\n")]
    )  # fmt: skip
    resp = await request(gw.port, "POST", "/v1/chat/completions", STREAM)
    assert resp.status == 200
    assert KEY.encode() not in resp.body and b"[redacted]" in resp.body


QUOTING_ANSWER = orjson.dumps(
    {
        "id": "c1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": f"key {KEY}"}}],
    }
)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/chat/completions", CHAT),
        ("POST", "/v1/responses", orjson.dumps({"model": "openai/gpt", "input": "hi"})),
        ("GET", "/proxy/openai/files", b""),
    ],
)
async def test_the_key_quoted_in_a_2xx_answer_is_scrubbed(
    nursery: trio.Nursery, bad: BadUpstream, method: str, path: str, body: bytes
) -> None:
    """Whole, and through /proxy in pieces that split the key."""
    gw = await gateway_for(nursery, bad)
    head = response(200, [("content-type", "application/json"), ("transfer-encoding", "chunked")])
    cut = QUOTING_ANSWER.index(KEY.encode()) + 5
    bad.script = Script(
        [(0, head + chunk(QUOTING_ANSWER[:cut])), (0.02, chunk(QUOTING_ANSWER[cut:])),
         (0, b"0\r\n\r\n")]
    )  # fmt: skip
    resp = await request(gw.port, method, path, body)
    assert resp.status == 200
    assert KEY.encode() not in resp.body
    assert resp.body == QUOTING_ANSWER.replace(KEY.encode(), b"[redacted]")


async def test_endless_response_headers_are_cut(nursery: trio.Nursery, bad: BadUpstream) -> None:
    gw = await gateway_for(nursery, bad)
    header = b"x-filler: " + b"y" * 1000 + b"\r\n"
    bad.script = Script([(0, b"HTTP/1.1 200 OK\r\n")] + [(0, header)] * 200, end=HANG)
    resp = await request(gw.port, "POST", "/v1/chat/completions", CHAT)
    assert resp.status == 502
    assert orjson.loads(resp.body)["error"]["code"] == "bad_upstream_response"
    assert (await request(gw.port, "GET", "/health")).status == 200


async def test_a_blackhole_upstream_times_out(nursery: trio.Nursery, bad: BadUpstream) -> None:
    gw = await gateway_for(nursery, bad, UPSTREAM_FIRST_BYTE_TIMEOUT="300ms")
    bad.script = Script([], end=HANG)  # reads the request, never answers
    for body in (CHAT, STREAM):
        resp = await request(gw.port, "POST", "/v1/chat/completions", body)
        assert resp.status == 504
        assert orjson.loads(resp.body)["error"]["code"] == "upstream_timeout"
    assert (await request(gw.port, "GET", "/health")).status == 200


async def test_a_reset_at_byte_n_of_a_whole_answer_is_a_502(
    nursery: trio.Nursery, bad: BadUpstream
) -> None:
    gw = await gateway_for(nursery, bad)
    whole = json_answer(ANSWER)
    for cut in (5, len(whole) // 2, len(whole) - 3):
        bad.script = Script([(0, whole[:cut])], end="reset")
        resp = await request(gw.port, "POST", "/v1/chat/completions", CHAT)
        assert resp.status == 502, cut
        assert KEY.encode() not in resp.body


# A whole answer has no cancel scope of its own (edgegw.watch.WholeExchange): its deadline is
# the watch's timer, which wakes the wait on the upstream connection, or cancels the scope of
# a wait off it. Virtual time: what each test waits for is that timer.


async def test_a_whole_answer_that_stalls_mid_body_ends_at_the_idle_timeout(
    nursery: trio.Nursery, bad: BadUpstream, autojump_clock: trio.testing.MockClock
) -> None:
    gw = await gateway_for(
        nursery, bad, UPSTREAM_FIRST_BYTE_TIMEOUT="60s", UPSTREAM_IDLE_TIMEOUT="2s"
    )
    whole = json_answer(ANSWER)
    bad.script = Script([(0, whole[: len(whole) - 10])], end=HANG)  # the head, then silence
    started = trio.current_time()
    resp = await request(gw.port, "POST", "/v1/chat/completions", CHAT)
    assert resp.status == 504
    assert orjson.loads(resp.body)["error"]["code"] == "upstream_timeout"
    # The body's idle timeout, counted from the head, not the first byte's 60 s.
    assert trio.current_time() - started == pytest.approx(2, abs=0.1)
    # The woken connection was closed, not pooled: the next answer comes on a new one.
    assert gw.pool.idle_count() == 0 and gw.pool.open_connections == 0
    bad.script = Script([(0, json_answer(ANSWER))])
    assert (await request(gw.port, "POST", "/v1/chat/completions", CHAT)).status == 200
    assert bad.connections == 2


async def test_a_whole_answer_waiting_for_its_head_ends_at_the_first_byte_timeout(
    nursery: trio.Nursery, mock: MockUpstream, autojump_clock: trio.testing.MockClock
) -> None:
    gw = await start_gateway(
        nursery, upstream_env(mock, UPSTREAM_FIRST_BYTE_TIMEOUT="5s", UPSTREAM_IDLE_TIMEOUT="1s")
    )
    model = {"model": "openai/m", "messages": [{"role": "user", "content": "hi"}]}
    assert (
        await request(gw.port, "POST", "/v1/chat/completions", orjson.dumps(model))
    ).status == 200
    # On the kept-alive connection this time: the wait the timer wakes is a pooled one's.
    started = trio.current_time()
    hang = orjson.dumps({**model, "model": "openai/mock-hang"})
    resp = await request(gw.port, "POST", "/v1/chat/completions", hang)
    assert resp.status == 504
    assert orjson.loads(resp.body)["error"]["code"] == "upstream_timeout"
    assert trio.current_time() - started == pytest.approx(5, abs=0.1)
    assert gw.pool.reused == 1 and gw.pool.open_connections == 0


async def test_a_retry_backoff_ends_at_the_first_byte_timeout(
    nursery: trio.Nursery, bad: BadUpstream, autojump_clock: trio.testing.MockClock
) -> None:
    # A 503 whose Retry-After is waited: a wait off any connection, under a scope of its own.
    gw = await gateway_for(
        nursery,
        bad,
        UPSTREAM_FIRST_BYTE_TIMEOUT="3s",
        UPSTREAM_RETRY_MAX_RETRY_AFTER="60s",
        UPSTREAM_RETRY_DEADLINE="120s",
    )
    busy = orjson.dumps({"error": {"message": "busy"}})
    bad.script = Script([(0, json_answer(busy, status=503, extra=(("retry-after", "30"),)))])
    started = trio.current_time()
    resp = await request(gw.port, "POST", "/v1/chat/completions", CHAT)
    assert resp.status == 504
    assert orjson.loads(resp.body)["error"]["code"] == "upstream_timeout"
    assert trio.current_time() - started == pytest.approx(3, abs=0.1)
    assert len(bad.requests) == 1  # the retry never went
