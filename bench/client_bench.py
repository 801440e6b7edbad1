"""Upstream client choice: edgegw's h11 pool against httpcore's async pool on Trio, both
driving the same mock upstream (another process, another core), closed loop."""

from __future__ import annotations

import time

import trio

from edgegw.upstream import Origin, UpstreamPool

BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":8}'
HEADERS = [(b"content-type", b"application/json")]


async def _drive(one_request, concurrency: int, seconds: float) -> float:
    count = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal count
        while time.perf_counter() < deadline:
            await one_request()
            count += 1

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)
    return count / (time.perf_counter() - start)


async def h11_pool_rps(port: int, concurrency: int, seconds: float) -> float:
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


async def httpcore_rps(port: int, concurrency: int, seconds: float) -> float:
    import httpcore

    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    async with httpcore.AsyncConnectionPool(
        max_connections=256, max_keepalive_connections=256
    ) as pool:

        async def one() -> None:
            resp = await pool.request("POST", url, headers=HEADERS, content=BODY)
            assert resp.status == 200

        return await _drive(one, concurrency, seconds)
