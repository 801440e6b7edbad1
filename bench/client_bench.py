"""Upstream client choice, closed loop against the same mock upstream (another process,
another core): edgegw's pool (response framing in Rust), the same keep-alive pattern with
h11 doing the framing (edgegw's first client), and httpcore's async pool on Trio."""

from __future__ import annotations

import time

import h11
import trio

from edgegw.upstream import Origin, UpstreamPool

BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":8}'
HEADERS = [(b"content-type", b"application/json")]


async def _drive(one_request, concurrency: int, seconds: float) -> tuple[float, float]:
    """(requests per second, client CPU µs per request)."""
    count = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal count
        while time.perf_counter() < deadline:
            await one_request()
            count += 1

    start, cpu = time.perf_counter(), time.process_time()
    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    return count / elapsed, cpu / count * 1e6


async def edgegw_pool_rps(port: int, concurrency: int, seconds: float) -> tuple[float, float]:
    pool = UpstreamPool(idle_per_host=256)
    origin = Origin.from_url(f"http://127.0.0.1:{port}/v1")

    async def one() -> None:
        resp = await pool.send(origin, b"POST", b"/v1/chat/completions", HEADERS, BODY)
        try:
            await resp.read(1 << 20)
        finally:
            await resp.aclose()

    try:
        return await _drive(one, concurrency, seconds)
    finally:
        await pool.aclose()


async def httpcore_rps(port: int, concurrency: int, seconds: float) -> tuple[float, float]:
    import httpcore

    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    async with httpcore.AsyncConnectionPool(
        max_connections=256, max_keepalive_connections=256
    ) as pool:

        async def one() -> None:
            resp = await pool.request("POST", url, headers=HEADERS, content=BODY)
            assert resp.status == 200

        return await _drive(one, concurrency, seconds)


async def h11_pool_rps(port: int, concurrency: int, seconds: float) -> tuple[float, float]:
    """A small keep-alive pool framed by h11: one connection per worker, reused."""
    free: list[tuple[trio.SocketStream, h11.Connection]] = []
    headers = [(b"host", b"127.0.0.1:%d" % port), (b"content-length", b"%d" % len(BODY)), *HEADERS]

    async def one() -> None:
        if free:
            stream, conn = free.pop()
        else:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            conn = h11.Connection(h11.CLIENT)
        data = conn.send(
            h11.Request(method=b"POST", target=b"/v1/chat/completions", headers=headers)
        )
        data += conn.send(h11.Data(data=BODY)) + conn.send(h11.EndOfMessage())
        await stream.send_all(data)
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.EndOfMessage):
                break
        conn.start_next_cycle()
        free.append((stream, conn))

    try:
        return await _drive(one, concurrency, seconds)
    finally:
        for stream, _ in free:
            await stream.aclose()
