"""Streams relayed by the core's relay thread (edgegw.handoff; rust/src/relay.rs and
rust/src/relay_loop.rs). The official SDK reads them as it reads the pump's; for the same
upstream bytes a client gets the same body from the core as from the pump
(EDGEGW_STREAM_RELAY=trio), faults included; the deadlines (an upstream silence, a client that
stops reading) and a client gone end them as they end the pump's. Each test checks the core
relayed the stream: `Handoff.handed` counts the streams it took."""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

import orjson
import pytest
import trio

from edgegw.watch import WATCH_DELAY_S

from .bad_upstream import HANG, RESET, BadUpstream, Script, chunk, response
from .conftest import (
    UPSTREAM_KEY,
    Gateway,
    MockUpstream,
    in_thread,
    openai_client,
    sample,
    scrape,
    start_gateway,
    upstream_env,
    wait_until,
)
from .rawhttp import Client, request, sse_data
from .test_guardrails import policy_dir

KEY = "sk-canary-0123456789abcdef"
MESSAGES = [{"role": "user", "content": "hi"}]
STREAM = orjson.dumps({"model": "openai/gpt", "messages": MESSAGES, "stream": True})
STREAM_USAGE = orjson.dumps({**orjson.loads(STREAM), "stream_options": {"include_usage": True}})
SSE = [("content-type", "text/event-stream")]
CHUNKED = [*SSE, ("transfer-encoding", "chunked")]


def event(i: int) -> bytes:
    delta = {"content": f"w{i} "}
    body = {"id": "c1", "object": "chat.completion.chunk", "model": "gpt"}
    return b"data: " + orjson.dumps({**body, "choices": [{"index": 0, "delta": delta}]}) + b"\n\n"


EVENTS = b"".join(event(i) for i in range(6))
USAGE = b'data: {"id":"c1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":6}}\n\n'
DONE = b"data: [DONE]\n\n"
FINISH = b'data: {"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'


def chunked(*pieces: bytes) -> list[tuple[float, bytes]]:
    """A chunked stream in `pieces` (a short pause before each, so each is its own read)."""
    head = response(200, CHUNKED)
    return [(0, head)] + [(0.01, chunk(p)) for p in pieces] + [(0.01, b"0\r\n\r\n")]


# name: (the script, the request). The same bytes go to both relays.
SCRIPTS: dict[str, tuple[Script, bytes]] = {
    "whole, one event a piece": (
        Script(chunked(*(event(i) for i in range(6)), FINISH, DONE)),
        STREAM,
    ),
    "events cut anywhere": (
        Script(chunked(EVENTS[:7], EVENTS[7:300], EVENTS[300:], FINISH + DONE[:5], DONE[5:])),
        STREAM,
    ),
    "usage asked for": (Script(chunked(EVENTS, FINISH, USAGE, DONE)), STREAM_USAGE),
    "usage not asked for is withheld": (Script(chunked(EVENTS, FINISH, USAGE, DONE)), STREAM),
    "content-length framing": (
        Script(
            [(0, response(200, [*SSE, ("content-length", str(len(EVENTS + DONE)))]))]
            + [(0.01, EVENTS), (0.01, DONE)]
        ),
        STREAM,
    ),  # fmt: skip
    "to the close": (Script([(0, response(200, SSE)), (0.01, EVENTS), (0.01, DONE)]), STREAM),
    "no [DONE], whole": (Script(chunked(EVENTS)), STREAM),
    "cut mid-event, closed": (
        Script([(0, response(200, CHUNKED)), (0.01, chunk(EVENTS + b'data: {"cut'))]),
        STREAM,
    ),
    "cut mid-event, reset": (
        Script([(0, response(200, CHUNKED)), (0.01, chunk(EVENTS + b'data: {"cut'))], end=RESET),
        STREAM,
    ),
    "cut in a chunk's size line": (
        Script([(0, response(200, CHUNKED)), (0.01, chunk(EVENTS) + b"1")]),
        STREAM,
    ),
    "bad chunk framing": (
        Script([(0, response(200, CHUNKED)), (0.01, chunk(EVENTS) + b"zz\r\nxx\r\n")]),
        STREAM,
    ),
    "the key split across pieces": (
        Script(
            chunked(
                b'data: {"error":{"message":"bad key ' + KEY.encode()[:9],
                KEY.encode()[9:] + b'"}}\n\n',
                DONE,
            )
        ),
        STREAM,
    ),  # fmt: skip
    # The whole body read with the upstream's head: relayed within the hand-over itself.
    "whole with the head": (
        Script([(0, response(200, CHUNKED) + chunk(EVENTS + FINISH) + chunk(DONE) + b"0\r\n\r\n")]),
        STREAM,
    ),
    "whole with the head, content-length": (
        Script(
            [
                (
                    0,
                    response(200, [*SSE, ("content-length", str(len(EVENTS + DONE)))])
                    + EVENTS
                    + DONE,
                )
            ]
        ),
        STREAM,
    ),  # fmt: skip
    "cut mid-event, whole with the head": (
        Script([(0, response(200, CHUNKED) + chunk(EVENTS + b'data: {"cut') + b"0\r\n\r\n")]),
        STREAM,
    ),
    "an event over the bound": (
        Script(chunked(EVENTS, b"data: " + b"x" * (1 << 20), b"\n\n", DONE)),
        STREAM,
    ),
}


async def body_from(gw: Gateway, req: bytes) -> bytes:
    resp = await request(gw.port, "POST", "/v1/chat/completions", req)
    assert resp.status == 200
    return resp.body


@pytest.fixture
async def bad(nursery: trio.Nursery) -> BadUpstream:
    upstream = BadUpstream()
    await nursery.start(upstream.serve)
    return upstream


async def both(nursery: trio.Nursery, bad: BadUpstream, **env: str) -> tuple[Gateway, Gateway]:
    """A gateway relaying in the core and one relaying with the pump, on the same upstream."""
    base = {"OPENAI_API_URL": f"http://127.0.0.1:{bad.port}/v1", "OPENAI_API_KEY": KEY, **env}
    core = await start_gateway(nursery, base)
    pump = await start_gateway(nursery, {**base, "EDGEGW_STREAM_RELAY": "trio"})
    assert core.handoff is not None and pump.handoff is None
    return core, pump


@pytest.mark.parametrize("name", list(SCRIPTS))
async def test_the_core_sends_what_the_pump_sends(
    nursery: trio.Nursery, bad: BadUpstream, name: str
) -> None:
    core, pump = await both(nursery, bad)
    assert core.handoff is not None
    bad.script, req = SCRIPTS[name]
    from_pump = await body_from(pump, req)
    from_core = await body_from(core, req)
    assert core.handoff.handed == 1
    assert from_core == from_pump
    # What the relays owe every stream, whichever sent it.
    assert KEY.encode() not in from_core
    assert from_core.endswith(b"\n\n")
    last = sse_data(from_core)[-1]
    assert last == b"[DONE]" or b'"error"' in last or name == "no [DONE], whole"
    if name == "usage not asked for is withheld":
        assert b'"usage"' not in from_core
    if name.startswith("cut") or name == "bad chunk framing":
        assert b'"cut' not in from_core and b"[DONE]" not in from_core


async def test_streams_the_core_wrote_whole_keep_the_connection(
    nursery: trio.Nursery, bad: BadUpstream
) -> None:
    # The core writes the client's head with the first events and the terminator with the
    # last: two streams and a plain request on one kept-alive connection, each framed whole.
    core, _ = await both(nursery, bad)
    assert core.handoff is not None
    bad.script = Script([(0, response(200, CHUNKED) + chunk(EVENTS) + chunk(DONE) + b"0\r\n\r\n")])
    async with await trio.open_tcp_stream("127.0.0.1", core.port) as stream:
        client = Client(stream)
        for _ in range(2):
            await client.send("POST", "/v1/chat/completions", STREAM)
            reply = await client.reply()
            assert reply.complete and reply.status == 200
            assert reply.headers["content-type"] == "text/event-stream"
            assert reply.headers["transfer-encoding"] == "chunked"
            assert "x-request-id" in reply.headers
            assert reply.body == EVENTS + DONE
            client.conn.start_next_cycle()
        await client.send("GET", "/v1/models")
        assert (await client.reply()).status == 200
    assert core.handoff.handed == 2


async def test_a_coded_stream_is_left_to_the_pump(nursery: trio.Nursery, bad: BadUpstream) -> None:

    core, _ = await both(nursery, bad)
    assert core.handoff is not None
    packed = gzip.compress(EVENTS + DONE)
    bad.script = Script([(0, response(200, [*CHUNKED, ("content-encoding", "gzip")]) + chunk(packed)
                          + b"0\r\n\r\n")])  # fmt: skip
    assert await body_from(core, STREAM) == EVENTS + DONE
    assert core.handoff.handed == 0


async def test_the_sdk_reads_a_stream_the_core_relayed(
    nursery: trio.Nursery, mock: MockUpstream
) -> None:
    gw = await start_gateway(nursery, upstream_env(mock, TELEMETRY_ENABLED="true"))
    assert gw.handoff is not None

    def run() -> list:
        with openai_client(gw.base) as c:
            return list(
                c.chat.completions.create(
                    model="openai/gpt-4o-mini",
                    messages=MESSAGES,
                    stream=True,
                    stream_options={"include_usage": True},
                    max_tokens=5,
                )
            )

    chunks = await in_thread(run)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert len(text.split()) == 5
    assert chunks[-1].usage.completion_tokens == 5
    assert gw.handoff.handed == 1
    # The tap's usage and the writes' times reached the telemetry after the core gave the
    # stream back.
    metrics = await scrape(gw.metrics_port)
    ttft = sample(metrics, "gen_ai_server_time_to_first_token_seconds_count")
    assert ttft == 1
    tokens = sample(metrics, "gen_ai_client_token_usage_sum", gen_ai_token_type="output")
    assert tokens == 5
    # The upstream connection went back to the pool, whole.
    await wait_until(lambda: gw.pool.idle_count() == 1)


@pytest.mark.parametrize("relay", ["core", "pump", "judged /proxy"])
@pytest.mark.parametrize("watched", [False, True])
async def test_a_client_that_leaves_after_done_had_the_whole_stream(
    nursery: trio.Nursery,
    bad: BadUpstream,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    relay: str,
    watched: bool,
) -> None:
    # The official openai SDK reads to [DONE] and closes the response there, before the
    # body's terminator (openai/_streaming.py). Its stream was whole: recorded 200, not 499,
    # and the upstream connection, read to its end, goes back to the pool. `watched`: the
    # stream lasts long enough for the disconnect watch to look at it (WATCH_DELAY_S).
    # "judged /proxy": a /proxy stream the guardrails judge as it passes (the pump's sink).
    path = "/v1/chat/completions"
    if relay == "judged /proxy":
        path = "/proxy/openai/chat/completions"
        gw = await start_gateway(
            nursery,
            {
                "OPENAI_API_URL": f"http://127.0.0.1:{bad.port}/v1",
                "OPENAI_API_KEY": KEY,
                "GUARDRAILS_ENABLED": "true",
                "GUARDRAILS_POLICY_DIR": str(policy_dir(tmp_path)),
            },
        )
    else:
        core, pump = await both(nursery, bad)
        gw = core if relay == "core" else pump
    caplog.set_level(logging.INFO, "edgegw.access")
    before_done = 3 * WATCH_DELAY_S if watched else 0
    bad.script = Script(
        [
            (0, response(200, CHUNKED) + chunk(EVENTS)),
            (before_done, chunk(DONE)),
            (0.2, b"0\r\n\r\n"),
        ]
    )
    stream = await trio.open_tcp_stream("127.0.0.1", gw.port)
    await Client(stream).send("POST", path, STREAM)
    got = b""
    while b"data: [DONE]" not in got:
        data = await stream.receive_some(65536)
        assert data, got
        got += data
    await stream.aclose()
    await wait_until(lambda: gw.pool.idle_count() == 1)
    await wait_until(lambda: any(path in r.getMessage() for r in caplog.records))
    [line] = [r.getMessage() for r in caplog.records if path in r.getMessage()]
    assert line.split()[2] == "200", line
    assert (0 if gw.handoff is None else gw.handoff.handed) == (relay == "core")


async def test_a_silent_upstream_fails_the_stream(
    nursery: trio.Nursery, bad: BadUpstream, autojump_clock: trio.testing.MockClock
) -> None:
    # Virtual time: the wait is the idle timeout.
    core, _ = await both(nursery, bad, UPSTREAM_IDLE_TIMEOUT="2s")
    assert core.handoff is not None
    bad.script = Script([(0, response(200, CHUNKED) + chunk(EVENTS))], end=HANG)
    body = await body_from(core, STREAM)
    assert core.handoff.handed == 1
    assert body.startswith(EVENTS)
    assert orjson.loads(sse_data(body)[-1])["error"]["code"] == "upstream_timeout"
    assert trio.current_time() >= 2


async def test_streams_that_keep_coming_outlive_the_idle_timeout(
    nursery: trio.Nursery, bad: BadUpstream, autojump_clock: trio.testing.MockClock
) -> None:
    # Virtual time: three streams at once, each an event every 1.5 s for 12 s, under a 2 s
    # idle timeout. One check covers every stream's deadline; each event moves its own.
    core, _ = await both(nursery, bad, UPSTREAM_IDLE_TIMEOUT="2s")
    assert core.handoff is not None
    pieces = [event(i) for i in range(8)] + [DONE]
    head = response(200, CHUNKED)
    bad.script = Script([(0, head)] + [(1.5, chunk(p)) for p in pieces] + [(0, b"0\r\n\r\n")])
    bodies: list[bytes] = []

    async def one() -> None:
        bodies.append(await body_from(core, STREAM))

    async with trio.open_nursery() as clients:
        for _ in range(3):
            clients.start_soon(one)
    assert core.handoff.handed == 3
    assert bodies == [b"".join(pieces)] * 3
    assert trio.current_time() >= 13.5


async def test_a_client_gone_cancels_the_upstream(
    nursery: trio.Nursery, mock: MockUpstream
) -> None:
    gw = await start_gateway(nursery, upstream_env(mock))
    assert gw.handoff is not None
    mock.config = type(mock.config)(api_key=UPSTREAM_KEY, token_rate=50, tokens=1000)
    resp = await request(gw.port, "POST", "/v1/chat/completions", STREAM, max_chunks=2)
    assert resp.status == 200
    await wait_until(lambda: mock.stream_disconnects >= 1, within_s=1)
    assert gw.handoff.handed == 1
    await wait_until(lambda: gw.pool.open_connections == 0)
    assert len(gw.handoff.core) == 0


async def test_a_client_gone_while_the_upstream_is_silent_is_seen_by_the_core(
    nursery: trio.Nursery, bad: BadUpstream, mock_clock: trio.testing.MockClock
) -> None:
    # Virtual time that moves only after 50 ms with every task blocked: the disconnect
    # watch's first look at an exchange is WATCH_DELAY_S in, so a stream ended before that
    # was ended by the core's own watch on the client's socket.
    mock_clock.autojump_threshold = 0.05
    core, _ = await both(nursery, bad)
    assert core.handoff is not None
    bad.script = Script([(0, response(200, CHUNKED))], end=HANG)
    stream = await trio.open_tcp_stream("127.0.0.1", core.port)
    await Client(stream).send("POST", "/v1/chat/completions", STREAM)
    await wait_until(lambda: len(core.handoff.core) == 1)  # the head held, nothing to write
    hung_up = trio.current_time()
    await stream.aclose()
    await wait_until(lambda: len(core.handoff.core) == 0 and core.pool.open_connections == 0)
    assert trio.current_time() - hung_up < WATCH_DELAY_S
    assert core.handoff.handed == 1


async def test_a_client_that_stops_reading_is_given_up(
    nursery: trio.Nursery,
    mock: MockUpstream,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Virtual time: the wait is the write stall timeout. The client reads the head, then
    # nothing, while the upstream sends as fast as it can.
    gw = await start_gateway(nursery, upstream_env(mock, SERVER_WRITE_STALL_TIMEOUT="3s"))
    assert gw.handoff is not None
    mock.config = type(mock.config)(api_key=UPSTREAM_KEY, tokens=200_000)
    caplog.set_level(logging.INFO, "edgegw.http1")
    req = orjson.dumps({**orjson.loads(STREAM), "max_tokens": 200_000})
    sock = trio.socket.socket()
    sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF, 4096)
    await sock.connect(("127.0.0.1", gw.port))
    stream = trio.SocketStream(sock)
    await stream.send_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%b" % (len(req), req)
    )
    assert (await stream.receive_some(64)).startswith(b"HTTP/1.1 200")
    await wait_until(lambda: mock.stream_disconnects >= 1, within_s=60)
    assert gw.handoff.handed == 1
    assert any("a write stalled" in r.getMessage() for r in caplog.records)
    await wait_until(lambda: gw.pool.open_connections == 0)
    await stream.aclose()
