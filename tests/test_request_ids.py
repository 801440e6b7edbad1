"""Request ids end to end: the client's `X-Request-Id` kept when it is well-formed, else
one made; returned on every answer (errors and streams included) and sent upstream; local
answers keep SIE's `x-sie-request-id` consistent with it."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest
import trio

from edgegw.mock import MockUpstream

from .conftest import Gateway
from .fake_sglang import FakeSGLang, Script
from .rawhttp import request, sse_data
from .test_local import local_gateway, profile_yaml

CHAT = {"model": "openai/gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
MADE = re.compile(rb"[0-9a-f]{32}")


async def post(port: int, body: dict, headers: list[tuple[str, str]] | None = None):
    encoded = [(k, v.encode("latin-1")) for k, v in headers or []]
    return await request(port, "POST", "/v1/chat/completions", orjson.dumps(body), encoded)


async def test_a_clients_id_is_returned_and_sent_upstream(
    gateway: Gateway, mock: MockUpstream
) -> None:
    resp = await post(gateway.port, CHAT, [("x-request-id", "req-01HF:abc_9.z")])
    assert resp.status == 200
    assert resp.headers[b"x-request-id"] == b"req-01HF:abc_9.z"


@pytest.mark.parametrize(
    "given",
    ["", "a" * 129, "has space", 'quote"d', "caf\u00e9", "semi;colon"],
    ids=["empty", "too-long", "space", "quote", "non-ascii", "semicolon"],
)
async def test_a_malformed_id_is_replaced_never_echoed(gateway: Gateway, given: str) -> None:
    resp = await post(gateway.port, CHAT, [("x-request-id", given)] if given else None)
    assert resp.status == 200
    assert MADE.fullmatch(resp.headers[b"x-request-id"])


async def test_every_answer_carries_the_id(gateway: Gateway) -> None:
    rid = [("x-request-id", "abc-123")]
    cases = [
        await request(gateway.port, "GET", "/nope", b"", rid),  # 404 envelope
        await request(gateway.port, "GET", "/v1/chat/completions", b"", rid),  # 405
        await request(gateway.port, "POST", "/v1/chat/completions", b"{not json", rid),  # 400
        await post(gateway.port, {**CHAT, "model": "nobody/x"}, rid),  # unknown provider
        await request(gateway.port, "GET", "/health", b"", rid),
        await request(gateway.port, "GET", "/v1/models", b"", rid),
    ]
    for resp in cases:
        assert resp.headers[b"x-request-id"] == b"abc-123", resp.status
    stream = await post(gateway.port, {**CHAT, "stream": True}, rid)
    assert stream.status == 200
    assert stream.headers[b"x-request-id"] == b"abc-123"
    assert sse_data(stream.body)[-1] == b"[DONE]"


async def test_two_requests_get_two_ids(gateway: Gateway) -> None:
    a, b = await post(gateway.port, CHAT), await post(gateway.port, CHAT)
    assert a.headers[b"x-request-id"] != b.headers[b"x-request-id"]


async def test_the_upstream_gets_the_id(nursery: trio.Nursery) -> None:
    from .conftest import start_gateway
    from .echo_upstream import Answer, EchoUpstream

    echo = EchoUpstream()
    echo.answer = lambda seen: Answer(body=b'{"choices":[]}')
    await nursery.start(echo.serve)
    gw = await start_gateway(
        nursery, {"OPENAI_API_URL": f"http://127.0.0.1:{echo.port}/v1", "OPENAI_API_KEY": "k"}
    )
    resp = await post(gw.port, CHAT, [("x-request-id", "from-client")])
    assert resp.status == 200
    assert echo.seen[-1].headers["x-request-id"] == "from-client"
    made = await post(gw.port, CHAT)
    assert echo.seen[-1].headers["x-request-id"] == made.headers[b"x-request-id"].decode()


@pytest.fixture
async def local(nursery: trio.Nursery, tmp_path: Path) -> tuple[Gateway, FakeSGLang]:
    worker = FakeSGLang(Script(tokens=3))
    await nursery.start(worker.serve)
    gw = await local_gateway(nursery, tmp_path, profile_yaml([(worker.port, "default", None)]))
    return gw, worker


LOCAL = {"model": "qwen3-8b", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("stream", [False, True], ids=["answer", "stream"])
async def test_local_answers_use_the_request_id_as_sies(
    local: tuple[Gateway, FakeSGLang], stream: bool
) -> None:
    gw, worker = local
    resp = await post(gw.port, {**LOCAL, "stream": stream})
    assert resp.status == 200, resp.body
    rid = resp.headers[b"x-request-id"]
    assert resp.headers[b"x-sie-request-id"] == rid
    sent = next(r for r in worker.requests if r.path == "/v1/chat/completions")
    assert sent.body["rid"] == rid.decode()
    assert sent.headers["x-request-id"] == rid.decode()
    first = orjson.loads(sse_data(resp.body)[0]) if stream else orjson.loads(resp.body)
    assert first["id"] == "chatcmpl-" + rid.decode()


async def test_a_clients_id_is_never_a_workers_rid(local: tuple[Gateway, FakeSGLang]) -> None:
    """Two clients may send the same id; SGLang refuses a duplicate rid and aborts by it,
    so SIE's id stays the gateway's own, and the client still gets its id back."""
    gw, worker = local
    resp = await post(gw.port, LOCAL, [("x-request-id", "shared-id")])
    assert resp.status == 200
    assert resp.headers[b"x-request-id"] == b"shared-id"
    sie = resp.headers[b"x-sie-request-id"]
    assert MADE.fullmatch(sie)
    sent = next(r for r in worker.requests if r.path == "/v1/chat/completions")
    assert sent.body["rid"] == sie.decode()
    assert sent.headers["x-request-id"] == "shared-id"
