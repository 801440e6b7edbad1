"""The upstream pool's per-host connection cap: requests past it queue, get a connection as
one comes back (handed over, not parked idle) or a slot as one closes, and a queued request
that outlives its first-byte deadline is the gateway's 504. The upstream here is a fake that
counts the connections it accepted and holds every answer until the test lets it go."""

from __future__ import annotations

import orjson
import trio
import trio.testing

from edgegw.errors import GatewayError
from edgegw.mock import MockConfig, MockUpstream
from edgegw.upstream import JOINED_BODY_BYTES, Origin, UpstreamPool

from .conftest import UPSTREAM_KEY, start_gateway, upstream_env, wait_until
from .echo_upstream import EchoUpstream
from .rawhttp import request, sse_data

ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n%b\r\n{}"


class CountingUpstream:
    """Accepts connections and counts them; answers each request once `release` is set
    (keep-alive), or closes the connection after its first answer when `close_after`."""

    def __init__(self) -> None:
        self.accepted = 0
        self.requests = 0
        self.release = trio.Event()
        self.close_after = False
        self.port = 0

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        self.accepted += 1
        buffered = b""
        async with stream:
            while True:
                while b"\r\n\r\n" not in buffered:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buffered += data
                _, buffered = buffered.split(b"\r\n\r\n", 1)  # the pool's GETs carry no body
                self.requests += 1
                await self.release.wait()
                await stream.send_all(
                    ANSWER % (b"connection: close\r\n" if self.close_after else b"")
                )
                if self.close_after:
                    return


async def exchange(pool: UpstreamPool, origin: Origin, statuses: list[int]) -> None:
    resp = await pool.send(origin, b"GET", b"/x", [])
    try:
        await resp.read(1024)
        statuses.append(resp.status)
    finally:
        await resp.aclose()


async def test_requests_past_the_cap_queue_and_reuse_the_connections(
    nursery: trio.Nursery,
) -> None:
    upstream = CountingUpstream()
    await nursery.start(upstream.serve)
    origin = Origin.from_url(f"http://127.0.0.1:{upstream.port}")
    pool = UpstreamPool(max_per_host=2)
    statuses: list[int] = []
    async with trio.open_nursery() as clients:
        for _ in range(5):
            clients.start_soon(exchange, pool, origin, statuses)
        await wait_until(lambda: upstream.requests == 2)
        await trio.testing.wait_all_tasks_blocked()
        assert (upstream.accepted, pool.open_connections, pool.queued) == (2, 2, 3)
        upstream.release.set()
    assert statuses == [200] * 5
    # The three queued requests were each handed a connection that came back: none opened.
    assert (upstream.accepted, upstream.requests) == (2, 5)
    assert (pool.connections_opened, pool.reused) == (2, 3)
    assert (pool.open_connections, pool.idle_count()) == (2, 2)
    await pool.aclose()


async def test_a_connection_that_closes_frees_its_slot_for_the_next_in_line(
    nursery: trio.Nursery,
) -> None:
    upstream = CountingUpstream()
    upstream.close_after = True  # every answer ends its connection: nothing to hand over
    await nursery.start(upstream.serve)
    origin = Origin.from_url(f"http://127.0.0.1:{upstream.port}")
    pool = UpstreamPool(max_per_host=1)
    statuses: list[int] = []
    async with trio.open_nursery() as clients:
        for _ in range(3):
            clients.start_soon(exchange, pool, origin, statuses)
        await wait_until(lambda: upstream.requests == 1)
        await trio.testing.wait_all_tasks_blocked()
        assert (upstream.accepted, pool.queued) == (1, 2)
        upstream.release.set()
    assert statuses == [200] * 3
    assert upstream.accepted == 3 and pool.connections_opened == 3 and pool.reused == 0
    assert pool.open_connections <= 1


async def test_a_cancelled_wait_leaves_the_line_and_the_count_intact(
    nursery: trio.Nursery,
) -> None:
    upstream = CountingUpstream()
    await nursery.start(upstream.serve)
    origin = Origin.from_url(f"http://127.0.0.1:{upstream.port}")
    pool = UpstreamPool(max_per_host=1)
    statuses: list[int] = []
    async with trio.open_nursery() as clients:
        clients.start_soon(exchange, pool, origin, statuses)
        await wait_until(lambda: upstream.requests == 1)
        with trio.move_on_after(0.05) as waited:  # queued behind the held answer, then given up
            await exchange(pool, origin, statuses)
        assert waited.cancelled_caught and pool.queued == 1
        upstream.release.set()
    await exchange(pool, origin, statuses)  # the one connection, still counted once
    assert statuses == [200, 200]
    assert (upstream.accepted, pool.connections_opened, pool.open_connections) == (1, 1, 1)
    await pool.aclose()


async def test_a_request_queued_past_its_first_byte_deadline_is_504(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    # Virtual time: the stream's pace and the first-byte deadline are timers.
    mock = MockUpstream(MockConfig(api_key=UPSTREAM_KEY, token_rate=2, tokens=10))
    await nursery.start(mock.serve, "127.0.0.1", 0)
    gw = await start_gateway(
        nursery,
        upstream_env(mock, UPSTREAM_POOL_MAX_PER_HOST="1", UPSTREAM_FIRST_BYTE_TIMEOUT="300ms"),
    )
    stream_body = orjson.dumps(
        {"model": "openai/m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    )
    answers: list[bytes] = []

    async def stream() -> None:
        resp = await request(gw.port, "POST", "/v1/chat/completions", stream_body)
        answers.append(resp.body)

    nursery.start_soon(stream)  # holds the one connection for 5 s of virtual time
    await wait_until(lambda: len(mock.requests) == 1)
    body = orjson.dumps({"model": "openai/m", "messages": [{"role": "user", "content": "hi"}]})
    queued = await request(gw.port, "POST", "/v1/chat/completions", body)
    assert queued.status == 504
    assert orjson.loads(queued.body)["error"]["code"] == "upstream_timeout"
    assert len(mock.requests) == 1 and gw.pool.queued == 1  # it never reached the upstream
    await wait_until(lambda: bool(answers), within_s=30)
    assert sse_data(answers[0])[-1] == b"[DONE]"
    again = await request(gw.port, "POST", "/v1/chat/completions", body)
    assert again.status == 200 and gw.pool.connections_opened == 1


async def test_bodies_on_either_side_of_the_joined_size_arrive_whole(
    nursery: trio.Nursery,
) -> None:
    """A body up to JOINED_BODY_BYTES goes out in one write with its head, a larger one
    after it: both arrive as sent, with their length, on one kept-alive connection."""
    echo = EchoUpstream()
    port = await nursery.start(echo.serve)
    pool = UpstreamPool()
    origin = Origin("http", "127.0.0.1", port, "")
    bodies = [b"s" * JOINED_BODY_BYTES, bytes(range(256)) * 512 + b"end", b""]
    for body in bodies:
        resp = await pool.send(origin, b"POST", b"/v1/traces", [], body)
        try:
            assert resp.status == 200 and await resp.read(1024) == b'{"ok":true}'
        finally:
            await resp.aclose()
    assert [s.body for s in echo.seen] == bodies
    assert [s.headers["content-length"] for s in echo.seen] == [str(len(b)) for b in bodies]
    assert pool.open_connections == 1
    await pool.aclose()


async def test_a_byte_that_could_split_the_request_is_refused_before_anything_is_sent(
    nursery: trio.Nursery,
) -> None:
    """The pool's last guard against header injection: CR or LF in a header's name or
    value, a colon in its name, CR, LF, space or tab in the target; each refused with 400
    before a connection is opened. A clean request then goes through."""
    upstream = CountingUpstream()
    await nursery.start(upstream.serve)
    upstream.release.set()
    pool = UpstreamPool()
    origin = Origin.from_url(f"http://127.0.0.1:{upstream.port}")
    bad: list[tuple[bytes, list[tuple[bytes, bytes]]]] = [
        (b"/v1/models", [(b"x-a", b"1\r\nx-b: 2")]),
        (b"/v1/models", [(b"x-a", b"1\nx-b: 2")]),
        (b"/v1/models", [(b"x-a", b"1\r")]),
        (b"/v1/models", [(b"x-a\r\nx-b", b"2")]),
        (b"/v1/models", [(b"x-a\nx-b", b"2")]),
        (b"/v1/models", [(b"x-a:b", b"2")]),
        (b"/v1/models HTTP/1.0\r\nx: y", []),
        (b"/v1/models\n", []),
        (b"/v1 /models", []),
        (b"/v1\t/models", []),
    ]
    for target, headers in bad:
        try:
            await pool.send(origin, b"GET", target, headers, b"")
        except GatewayError as e:
            assert e.status == 400, (target, headers)
        else:
            raise AssertionError(f"sent {target!r} {headers!r}")
    assert upstream.accepted == 0
    resp = await pool.send(origin, b"GET", b"/v1/models", [(b"x-a", b"1: 2\t3")], b"")
    assert resp.status == 200
    await resp.aclose()
    assert upstream.requests == 1
    await pool.aclose()
