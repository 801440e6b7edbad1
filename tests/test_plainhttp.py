"""edgegw/plainhttp.py's own rules, on loopback: the limits (body, connections, one cycle),
HEAD, and what a handler's failure turns into. Keep-alive, 100-continue, pipelining and a
client going away are driven through the mock upstream in test_mock.py."""

from __future__ import annotations

import pytest
import trio

from edgegw import plainhttp

from .rawhttp import request


async def echo(req: plainhttp.Request, out: plainhttp.Responder) -> None:
    if req.path == "/boom":
        raise RuntimeError("a bug in the handler")
    body = b"none" if req.body is None else b"%d bytes" % len(req.body)
    await out.send(200, [(b"x-accept", req.header("accept").encode())], body)


async def start(
    nursery: trio.Nursery,
    limits: plainhttp.Limits = plainhttp.Limits(),  # noqa: B008 (frozen)
) -> tuple[plainhttp.Server, int]:
    server = plainhttp.Server("test server", echo, limits=limits)
    port = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
    return server, port


async def read_all(stream: trio.SocketStream) -> bytes:
    received = b""
    while chunk := await stream.receive_some(65536):
        received += chunk
    return received


async def test_whole_answers_and_head(nursery: trio.Nursery) -> None:
    _, port = await start(nursery)
    got = await request(port, "POST", "/x", b"abc", [("accept", "a"), ("accept", "b")])
    assert (got.status, got.body) == (200, b"3 bytes")
    assert got.headers[b"x-accept"] == b"a, b"
    head = await request(port, "HEAD", "/x")
    assert head.body == b"" and head.headers[b"content-length"] == b"7"


async def test_body_over_the_limit_is_left_unread_and_the_connection_closed(
    nursery: trio.Nursery,
) -> None:
    _, port = await start(nursery, plainhttp.Limits(max_body_bytes=10))
    sized = b"POST /x HTTP/1.1\r\nhost: t\r\ncontent-length: 11\r\n\r\n"  # refused unread
    chunked = b"POST /x HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\nb\r\n" + b"x" * 11
    for sent in (sized, chunked):
        async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
            await stream.send_all(sent)
            received = await read_all(stream)
        assert received.startswith(b"HTTP/1.1 200 ")
        assert b"\r\nconnection: close\r\n" in received and received.endswith(b"\r\n\r\nnone")


async def test_connections_beyond_the_limit_are_closed_at_once(nursery: trio.Nursery) -> None:
    server, port = await start(nursery, plainhttp.Limits(max_connections=1))
    async with await trio.open_tcp_stream("127.0.0.1", port) as first:
        await first.send_all(b"GET /x HTTP/1.1\r\nhost: t\r\n\r\n")
        assert (await first.receive_some(65536)).startswith(b"HTTP/1.1 200 ")
        assert server.open_connections == 1
        async with await trio.open_tcp_stream("127.0.0.1", port) as second:
            await second.send_all(b"GET /x HTTP/1.1\r\nhost: t\r\n\r\n")
            assert await read_all(second) == b""


async def test_an_idle_kept_alive_connection_is_closed_after_one_cycle(
    nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    server, port = await start(nursery, plainhttp.Limits(cycle_timeout_s=30))
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        await stream.send_all(b"GET /x HTTP/1.1\r\nhost: t\r\n\r\n")
        start_s = trio.current_time()
        assert (await read_all(stream)).startswith(b"HTTP/1.1 200 ")
        assert trio.current_time() - start_s >= 30
    assert server.open_connections == 0


async def test_a_failing_handler_is_answered_500_and_logged(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    _, port = await start(nursery)
    got = await request(port, "GET", "/boom")
    assert (got.status, got.body) == (500, b"internal server error\n")
    assert got.headers[b"connection"] == b"close"
    assert "test server: unexpected error" in caplog.text
    malformed = await trio.open_tcp_stream("127.0.0.1", port)
    async with malformed:
        await malformed.send_all(b"\x00 not http\r\n\r\n")
        assert (await read_all(malformed)).startswith(b"HTTP/1.1 400 Bad Request\r\n")
