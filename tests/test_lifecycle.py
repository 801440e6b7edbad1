"""Shutdown and overload: the drain on SIGTERM, and the bound on requests in flight."""

from __future__ import annotations

from functools import partial

import orjson
import pytest
import trio
import trio.testing

from edgegw.mock import MockConfig, MockUpstream
from edgegw.server import serve
from edgegw.settings import Settings

from .conftest import UPSTREAM_KEY, start_gateway, upstream_env, wait_until
from .rawhttp import Client, request, sse_data

CHAT = {"model": "openai/m", "messages": [{"role": "user", "content": "hi"}]}


async def test_shutdown_drains_streams_then_ends_the_rest(
    nursery: trio.Nursery, mock: MockUpstream, mock_clock: trio.testing.MockClock
) -> None:
    # Virtual time: what the test waits for are timers (the mock's pace, the 1 s drain, its
    # own sleeps); the sockets between are all in this process. The core's relay thread
    # moves the streams' bytes on real time: the clock jumps only after 50 ms with every task
    # blocked, or a loaded machine could see the drain end before the short stream's last
    # events were relayed.
    mock_clock.autojump_threshold = 0.05
    settings = Settings.load(
        environ={"SERVER_PORT": "0", "SERVER_GRACEFUL_TIMEOUT": "1s", **upstream_env(mock)}
    )
    stop, stopped = trio.Event(), trio.Event()

    async def run(task_status: trio.TaskStatus[list[str]]) -> None:
        await serve(settings, shutdown_trigger=stop.wait, task_status=task_status)
        stopped.set()

    binds = await nursery.start(run)
    port = int(binds[0].rsplit(":", 1)[1])
    mock.config = MockConfig(api_key=UPSTREAM_KEY, token_rate=20, tokens=6)  # a 0.3 s stream
    results: dict[str, bytes] = {}

    async def stream(name: str, tokens: int) -> None:
        body = orjson.dumps(
            {**CHAT, "model": f"openai/m-{tokens}", "stream": True, "max_tokens": tokens}
        )
        results[name] = (await request(port, "POST", "/v1/chat/completions", body)).body

    async with await trio.open_tcp_stream("127.0.0.1", port) as idle:
        client = Client(idle)
        await client.send("POST", "/v1/chat/completions", CHAT)
        reply = await client.reply()
        assert reply.status == 200 and reply.complete
        client.conn.start_next_cycle()
        mock.config = MockConfig(api_key=UPSTREAM_KEY, token_rate=20, tokens=1000)
        async with trio.open_nursery() as clients:
            clients.start_soon(stream, "short", 6)  # finishes inside the drain time
            clients.start_soon(stream, "long", 1000)  # would take 50 s
            await trio.sleep(0.2)
            stop.set()
            await trio.sleep(0.1)
            # An idle keep-alive connection is closed by the server (Hypercorn closes idle
            # connections once terminating; a request dispatched during the drain would get
            # 503 with Connection: close), and no new connection is accepted.
            with trio.fail_after(2):
                assert await idle.receive_some(1024) == b""
            try:
                with trio.fail_after(2):
                    refused = await request(port, "GET", "/health")
            except OSError:
                refused = None
            assert refused is None or refused.status == 503
    short, long = sse_data(results["short"]), sse_data(results["long"])
    assert short[-1] == b"[DONE]"
    assert b"[DONE]" not in long and orjson.loads(long[-1])["error"]["code"] == "shutting_down"
    with trio.fail_after(8):
        await stopped.wait()


async def test_shutdown_ends_a_whole_answer_still_waiting_with_503(
    nursery: trio.Nursery, mock: MockUpstream, autojump_clock: trio.testing.MockClock
) -> None:
    # A whole answer has no cancel scope: the drain wakes its wait on the upstream.
    settings = Settings.load(
        environ={"SERVER_PORT": "0", "SERVER_GRACEFUL_TIMEOUT": "1s", **upstream_env(mock)}
    )
    stop = trio.Event()
    binds = await nursery.start(partial(serve, settings, shutdown_trigger=stop.wait))
    port = int(binds[0].rsplit(":", 1)[1])
    answers: list[tuple[int, bytes]] = []

    async def hang() -> None:
        body = orjson.dumps({**CHAT, "model": "openai/mock-hang"})
        resp = await request(port, "POST", "/v1/chat/completions", body)
        answers.append((resp.status, resp.body))

    async with trio.open_nursery() as clients:
        clients.start_soon(hang)
        await wait_until(lambda: bool(mock.requests))
        started = trio.current_time()
        stop.set()
    assert answers[0][0] == 503
    assert orjson.loads(answers[0][1])["error"]["code"] == "shutting_down"
    assert trio.current_time() - started == pytest.approx(1, abs=0.1)  # the drain time's end
    await wait_until(lambda: mock.open_connections == 0)


async def test_requests_past_the_in_flight_bound_get_503_at_once(
    nursery: trio.Nursery, mock: MockUpstream
) -> None:
    gw = await start_gateway(nursery, upstream_env(mock, EDGEGW_MAX_IN_FLIGHT="1"))
    hang = orjson.dumps({**CHAT, "model": "openai/mock-hang"})
    async with trio.open_nursery() as clients:
        clients.start_soon(request, gw.port, "POST", "/v1/chat/completions", hang)
        await wait_until(lambda: bool(mock.requests))
        with trio.fail_after(1):  # wall time: "at once" bounds a loopback answer, not a timer
            resp = await request(gw.port, "POST", "/v1/chat/completions", orjson.dumps(CHAT))
        assert resp.status == 503 and resp.headers[b"retry-after"] == b"1"
        assert orjson.loads(resp.body)["error"]["code"] == "overloaded"
        assert (await request(gw.port, "GET", "/health")).status == 200  # never counted
        clients.cancel_scope.cancel()
