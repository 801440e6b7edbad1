"""When the pool takes an idle upstream connection again, and when it must not: one that
looks alive is reused whatever its descriptor's number (past FD_SETSIZE too, as under real
load); one whose peer closed it or sent bytes nobody asked for is not; nor one whose answer
was framed both by chunks and by a Content-Length."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator

import pytest
import trio
import trio.testing

from edgegw.upstream import Origin, UpstreamPool

from .conftest import wait_until
from .raw_upstream import RawUpstream, delivered

OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
# The most descriptors select() can watch.
FD_SETSIZE = 1024
# Descriptors held open to push new ones past FD_SETSIZE, with room for the test's own.
NEEDED = FD_SETSIZE + 256


@pytest.fixture(params=["low", "past_fd_setsize"])
def descriptors(request: pytest.FixtureRequest) -> Iterator[None]:
    """With "past_fd_setsize", every descriptor the test opens is numbered past
    FD_SETSIZE: the lower ones are held open (the lowest free number is always taken)."""
    if request.param == "low":
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < NEEDED:
        pytest.skip(f"RLIMIT_NOFILE's hard limit {hard} is below the {NEEDED} this needs")
    if soft != resource.RLIM_INFINITY and soft < NEEDED:
        resource.setrlimit(resource.RLIMIT_NOFILE, (NEEDED, hard))
    held = [os.open(os.devnull, os.O_RDONLY)]
    try:
        while held[-1] <= FD_SETSIZE and len(held) < NEEDED:
            held.append(os.dup(held[0]))
        assert held[-1] > FD_SETSIZE
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def exchange(pool: UpstreamPool, origin: Origin) -> tuple[int, bytes]:
    resp = await pool.send(origin, b"GET", b"/x", [])
    try:
        return resp.status, await resp.read(1024)
    finally:
        await resp.aclose()


async def start(nursery: trio.Nursery, answer: bytes) -> tuple[RawUpstream, Origin]:
    upstream = RawUpstream(answer=answer)
    await nursery.start(upstream.serve)
    return upstream, Origin.from_url(f"http://127.0.0.1:{upstream.port}")


@pytest.mark.usefixtures("descriptors")
async def test_sequential_requests_share_one_connection(nursery: trio.Nursery) -> None:
    upstream, origin = await start(nursery, OK)
    pool = UpstreamPool()
    for _ in range(20):
        assert await exchange(pool, origin) == (200, b"{}")
    assert (upstream.connections, upstream.requests) == (1, 20)
    assert (pool.connections_opened, pool.reused) == (1, 19)
    await pool.aclose()


@pytest.mark.usefixtures("descriptors")
@pytest.mark.parametrize("peer", ["closes", "sends_stray_bytes"])
async def test_an_idle_connection_the_peer_closed_or_spoke_on_is_not_reused(
    nursery: trio.Nursery, peer: str
) -> None:
    upstream, origin = await start(nursery, OK)
    pool = UpstreamPool()
    assert await exchange(pool, origin) == (200, b"{}")
    (stream,) = upstream.streams
    await trio.testing.wait_all_tasks_blocked()  # the upstream's send is over
    if peer == "closes":
        await stream.send_eof()
    else:  # reused, these would be read as the next request's answer
        await stream.send_all(OK)
    await wait_until(lambda: delivered(stream))
    assert await exchange(pool, origin) == (200, b"{}")
    assert (upstream.connections, pool.connections_opened, pool.reused) == (2, 2, 0)
    await pool.aclose()


@pytest.mark.parametrize(
    ("framing", "connections"),
    [
        pytest.param(b"transfer-encoding: chunked\r\n", 1, id="chunked"),
        pytest.param(b"content-length: 3\r\ntransfer-encoding: chunked\r\n", 2, id="both"),
        pytest.param(b"transfer-encoding: chunked\r\ncontent-length: 99\r\n", 2, id="both-after"),
    ],
)
async def test_an_answer_framed_both_ways_is_read_by_its_chunks_and_not_reused(
    nursery: trio.Nursery, framing: bytes, connections: int
) -> None:
    answer = b"HTTP/1.1 200 OK\r\n%b\r\n5\r\nhello\r\n0\r\n\r\n" % framing
    upstream, origin = await start(nursery, answer)
    pool = UpstreamPool()
    for _ in range(2):
        assert await exchange(pool, origin) == (200, b"hello")
    assert (upstream.connections, upstream.requests) == (connections, 2)
    assert pool.reused == 2 - connections
    await pool.aclose()
