"""What an idle kept-alive connection holds: nothing of the request it served (the cycle with
its ASGI scope, h11 state and buffers is released before the wait for the next request), so
that thousands of idle connections cost only their socket, task and wait."""

from __future__ import annotations

import gc

import orjson
import trio
import trio.testing

from edgegw.bench.loadgen import send_one
from edgegw.http1.cycle import Cycle

from .conftest import Gateway


def cycles_alive() -> int:
    gc.collect()
    return sum(isinstance(o, Cycle) for o in gc.get_objects())


async def test_an_idle_kept_alive_connection_holds_no_cycle(gateway: Gateway) -> None:
    chat = orjson.dumps({"model": "openai/m", "messages": [{"role": "user", "content": "hi"}]})
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{gateway.port}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(chat)}\r\n\r\n"
    )
    streams = [await trio.open_tcp_stream("127.0.0.1", gateway.port) for _ in range(3)]
    try:
        for stream in streams:
            assert await send_one(stream, head.encode() + chat) == (200, True)
        await trio.testing.wait_all_tasks_blocked()
        # Three connections wait for their next request; none keeps its last cycle.
        assert cycles_alive() == 0
        assert await send_one(streams[0], head.encode() + chat) == (200, True)
    finally:
        for stream in streams:
            await stream.aclose()
