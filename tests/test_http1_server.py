"""edgegw's HTTP/1.1 connection layer (edgegw.http1) on real loopback sockets, every test on
both listeners, plain HTTP and HTTPS (a trustme CA; the client is trio.SSLStream): stalled
bodies, slowloris heads, streams that never end for HTTP/1.0 and `Connection: close`,
request smuggling, h2c and the HTTP/2 preface, descriptors, write stalls, the head cap,
error envelopes, keep-alive and pipelining, the connection cap, and the Hypercorn switch.
Timeouts run on a MockClock that jumps when every task waits, so they take no wall time;
descriptors and Trio tasks are back to their baseline after each test and after the
module."""

from __future__ import annotations

import gc
import os
import socket
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from email.utils import formatdate

import orjson
import pytest
import trio
import trio.testing
import trustme

from edgegw._core import imf_fixdate
from edgegw.http1.limits import DEFAULT_LIMITS, ConnectionLimits
from edgegw.http1.server import open_listener, serve_http1
from edgegw.http1.tls import server_context
from edgegw.mock import MockConfig, MockUpstream
from edgegw.server import serve
from edgegw.settings import Settings

from .conftest import UPSTREAM_KEY, Gateway, upstream_env
from .conftest import start_gateway as start_plain
from .tls import cert_env, trusting

CLOSE = b"Connection: close"
CHAT = orjson.dumps({"model": "openai/m", "messages": [{"role": "user", "content": "hi"}]})
STREAM = orjson.dumps(
    {"model": "openai/m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
)


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def task_names() -> list[str]:
    """Every Trio task of this run."""
    todo, seen = [trio.lowlevel.current_root_task()], []
    while todo:
        task = todo.pop()
        seen.append(task.name)
        for nursery in task.child_nurseries:
            todo.extend(nursery.child_tasks)
    return sorted(seen)


@pytest.fixture(scope="module", autouse=True)
def _module_fds() -> Iterator[None]:
    gc.collect()
    before = fd_count()
    yield
    gc.collect()
    assert fd_count() == before


@pytest.fixture(autouse=True)
def _test_fds() -> Iterator[None]:
    gc.collect()
    before = fd_count()
    yield
    gc.collect()  # a leaked socket's ResourceWarning fails the test that leaked it
    assert fd_count() == before


# -- the listener under test ----------------------------------------------------------------


@dataclass
class Listener:
    """What the module's tests run against: plain HTTP, or HTTPS with `env`'s certificate
    and a client context trusting it."""

    scheme: str = "http"
    env: dict[str, str] = field(default_factory=dict)
    client: ssl.SSLContext | None = None

    def server_context(self) -> ssl.SSLContext | None:
        if not self.env:
            return None
        return server_context(
            self.env["SERVER_TLS_CERT_PATH"], self.env["SERVER_TLS_KEY_PATH"], ["http/1.1"]
        )


LISTENER = Listener()


@pytest.fixture(scope="module", params=["http", "https"])
def _listener(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    global LISTENER
    if request.param == "http":
        LISTENER = Listener()
    else:
        ca = trustme.CA()
        env = cert_env(ca, tmp_path_factory.mktemp("tls"))
        LISTENER = Listener("https", env, trusting(ca))
    yield
    LISTENER = Listener()


@pytest.fixture(autouse=True)
def _on_listener(_listener: None) -> None:
    """Every test runs on both listeners."""


async def start_gateway(nursery: trio.Nursery, env: Mapping[str, str]) -> Gateway:
    gw = await start_plain(nursery, {**env, **LISTENER.env})
    assert gw.base.startswith(f"{LISTENER.scheme}://")
    return gw


@pytest.fixture
async def gateway(nursery: trio.Nursery, mock: MockUpstream) -> Gateway:
    return await start_gateway(nursery, upstream_env(mock))


async def connect(
    port: int, sock: trio.socket.SocketType | None = None, local: str | None = None
) -> trio.abc.Stream:
    """A client connection to `port` (or on the connected `sock`; from the loopback address
    `local`), over TLS for HTTPS."""
    if sock is not None:
        stream = trio.SocketStream(sock)
    else:
        stream = await trio.open_tcp_stream("127.0.0.1", port, local_address=local)
    if LISTENER.client is None:
        return stream
    tls = trio.SSLStream(
        stream, LISTENER.client, server_hostname="127.0.0.1", https_compatible=True
    )
    await tls.do_handshake()
    return tls


@pytest.fixture
def clock() -> trio.testing.MockClock:
    """Jumps to the next deadline as soon as every task waits (loopback I/O included)."""
    return trio.testing.MockClock(autojump_threshold=0)


# -- a raw client ---------------------------------------------------------------------


@dataclass
class Resp:
    version: bytes
    status: int
    headers: dict[bytes, bytes]
    body: bytes

    def error(self) -> dict:
        assert self.headers[b"content-type"] == b"application/json"
        err = orjson.loads(self.body)["error"]
        assert set(err) == {"message", "type", "param", "code"}
        return err


class Incomplete(Exception):
    """More bytes are needed for the last response."""


def parse_responses(raw: bytes, *, eof: bool = True) -> list[Resp]:
    """Every response in `raw`, framed by Content-Length, chunks, or the end of the
    connection (`eof`); 1xx answers are skipped. Incomplete if the last is cut short."""
    out: list[Resp] = []
    while raw:
        head, sep, rest = raw.partition(b"\r\n\r\n")
        if not sep:
            raise Incomplete
        lines = head.split(b"\r\n")
        version, status = lines[0].split(b" ")[:2]
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.lower()] = value.strip()
        if int(status) < 200:
            raw = rest
            continue
        if b"content-length" in headers:
            n = int(headers[b"content-length"])
            if len(rest) < n:
                raise Incomplete
            body, raw = rest[:n], rest[n:]
        elif headers.get(b"transfer-encoding") == b"chunked":
            body = b""
            while True:
                size_line, sep, rest = rest.partition(b"\r\n")
                if not sep:
                    raise Incomplete
                size = int(size_line, 16)
                if len(rest) < size + 2:
                    raise Incomplete
                if size == 0:
                    assert rest[:2] == b"\r\n", rest[:50]
                    raw = rest[2:]
                    break
                body += rest[:size]
                assert rest[size : size + 2] == b"\r\n"
                rest = rest[size + 2 :]
        elif eof:
            body, raw = rest, b""
        else:
            raise Incomplete
        out.append(Resp(version, int(status), headers, body))
    return out


async def read_to_eof(stream: trio.abc.Stream, limit_s: float = 10) -> bytes:
    """All the server sends until it closes (a reset counts as the end)."""
    data = b""
    with trio.fail_after(limit_s):
        while True:
            try:
                chunk = await stream.receive_some(65536)
            except trio.BrokenResourceError:
                return data
            if not chunk:
                return data
            data += chunk


async def read_responses(stream: trio.abc.Stream, count: int, limit_s: float = 10) -> list[Resp]:
    """Read until `count` whole responses arrived, on a connection that stays open."""
    data = b""
    with trio.fail_after(limit_s):
        while True:
            chunk = await stream.receive_some(65536)
            assert chunk, f"closed after {data[:300]!r}"
            data += chunk
            try:
                found = parse_responses(data, eof=False)
            except Incomplete:
                continue
            assert len(found) <= count
            if len(found) == count:
                return found


def post(path: str, body: bytes, *extra: bytes, version: bytes = b"HTTP/1.1") -> bytes:
    lines = [
        b"POST %s %s" % (path.encode(), version),
        b"Host: gw",
        b"Content-Type: application/json",
        b"Content-Length: %d" % len(body),
        *extra,
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def get(path: str, *extra: bytes, version: bytes = b"HTTP/1.1") -> bytes:
    return b"\r\n".join([b"GET %s %s" % (path.encode(), version), b"Host: gw", *extra]) + (
        b"\r\n\r\n"
    )


async def one_shot(port: int, data: bytes) -> tuple[list[Resp], bytes]:
    async with await connect(port) as stream:
        await stream.send_all(data)
        raw = await read_to_eof(stream)
    return parse_responses(raw), raw


# -- 1. stalled bodies ------------------------------------------------------------------


async def open_stalled(port: int, count: int, local: str | None = None) -> list[trio.abc.Stream]:
    """`count` requests whose head promises 1,000 body bytes of which 10 ever come."""
    streams = []
    for _ in range(count):
        stream = await connect(port, local=local)
        head = post("/v1/chat/completions", b"")
        await stream.send_all(
            head.replace(b"Content-Length: 0", b"Content-Length: 1000") + b"{" * 10
        )
        streams.append(stream)
    return streams


async def test_stalled_bodies_hold_no_slot_and_get_408(
    clock: trio.testing.MockClock, nursery: trio.Nursery, mock: MockUpstream
) -> None:
    """Fifty bodies stall with fifty in-flight slots: a whole request is still served, since
    a body takes its slot only once it has arrived; the stalled ones get 408 at the body
    deadline and never reach the upstream."""
    gw = await start_gateway(
        nursery,
        upstream_env(mock, EDGEGW_MAX_IN_FLIGHT="50", SERVER_BODY_IDLE_TIMEOUT="5s"),
    )
    (warm,), _ = await one_shot(gw.port, post("/v1/chat/completions", CHAT, CLOSE))
    assert warm.status == 200
    await trio.sleep(1)  # its connection has closed
    tasks, seen = task_names(), len(mock.requests)
    started = trio.current_time()
    stalled = await open_stalled(gw.port, 50)
    await trio.sleep(1)  # all 50 are being read
    (ok,), _ = await one_shot(gw.port, post("/v1/chat/completions", CHAT, CLOSE))
    assert ok.status == 200
    for stream in stalled:
        (resp,) = parse_responses(await read_to_eof(stream))
        assert resp.status == 408 and resp.headers[b"connection"] == b"close"
        assert resp.error()["code"] == "request_timeout"
        await stream.aclose()
    assert 5 <= trio.current_time() - started < 6
    assert len(mock.requests) == seen + 1  # the stalled ones never reached the upstream
    await trio.sleep(5)  # lingering closes are over
    assert task_names() == tasks


async def test_one_address_cannot_take_every_body_in_progress(
    clock: trio.testing.MockClock, nursery: trio.Nursery, mock: MockUpstream
) -> None:
    """Past its share of bodies in progress an address gets 503 at once; another address
    is served; the global bound answers the same way."""
    gw = await start_gateway(
        nursery,
        upstream_env(mock, EDGEGW_MAX_BODIES_PER_CLIENT="20", EDGEGW_MAX_BODIES="30"),
    )
    stalled = await open_stalled(gw.port, 20, local="127.0.0.1")
    await trio.sleep(1)
    async with await connect(gw.port, local="127.0.0.1") as stream:
        started = trio.current_time()
        await stream.send_all(post("/v1/chat/completions", CHAT, CLOSE))
        (refused,) = parse_responses(await read_to_eof(stream))
    assert trio.current_time() - started < 1  # not at the body deadline
    assert refused.status == 503 and refused.error()["code"] == "overloaded"
    assert refused.headers[b"retry-after"] == b"1"
    async with await connect(gw.port, local="127.0.0.2") as stream:
        await stream.send_all(post("/v1/chat/completions", CHAT, CLOSE))
        (ok,) = parse_responses(await read_to_eof(stream))
    assert ok.status == 200
    stalled += await open_stalled(gw.port, 10, local="127.0.0.3")  # 30: the process's bound
    await trio.sleep(1)
    async with await connect(gw.port, local="127.0.0.4") as stream:
        await stream.send_all(post("/v1/chat/completions", CHAT, CLOSE))
        (full,) = parse_responses(await read_to_eof(stream))
    assert full.status == 503 and full.error()["code"] == "overloaded"
    for stream in stalled:
        await stream.aclose()
    # Bodies that end give their places back.
    await trio.sleep(1)
    (after,), _ = await one_shot(gw.port, post("/v1/chat/completions", CHAT, CLOSE))
    assert after.status == 200


async def test_a_body_that_came_whole_meets_the_bound_on_bytes_in_progress(
    clock: trio.testing.MockClock, nursery: trio.Nursery, mock: MockUpstream
) -> None:
    """A body that arrives with its head is taken at once, never in progress, but the bytes
    other bodies hold in progress still bound it: 503 while they hold nearly all of
    EDGEGW_MAX_BODIES_BYTES, served once they are gone."""
    gw = await start_gateway(nursery, upstream_env(mock, EDGEGW_MAX_BODIES_BYTES=str(1 << 20)))
    sent = (1 << 20) - len(CHAT) // 2
    stalled = await connect(gw.port)
    head = post("/v1/chat/completions", b"")
    await stalled.send_all(head.replace(b"Content-Length: 0", b"Content-Length: %d" % (2 * sent)))
    await stalled.send_all(b" " * sent)
    await trio.sleep(1)  # all of it read and counted
    (full,), _ = await one_shot(gw.port, post("/v1/chat/completions", CHAT, CLOSE))
    assert full.status == 503 and full.error()["code"] == "overloaded"
    assert b"body bytes in progress" in full.body
    await stalled.aclose()
    await trio.sleep(1)
    (ok,), _ = await one_shot(gw.port, post("/v1/chat/completions", CHAT, CLOSE))
    assert ok.status == 200


async def test_a_request_is_answered_while_fifty_bodies_stall(
    clock: trio.testing.MockClock, gateway: Gateway
) -> None:
    stalled = await open_stalled(gateway.port, 50)
    await trio.sleep(1)
    (ok,), _ = await one_shot(gateway.port, post("/v1/chat/completions", CHAT, CLOSE))
    assert ok.status == 200
    for stream in stalled:
        await stream.aclose()


async def test_a_trickled_body_ends_at_the_total_body_deadline(
    clock: trio.testing.MockClock, nursery: trio.Nursery, mock: MockUpstream
) -> None:
    gw = await start_gateway(
        nursery,
        upstream_env(mock, SERVER_BODY_IDLE_TIMEOUT="5s", SERVER_BODY_TIMEOUT="20s"),
    )
    async with await connect(gw.port) as stream:
        started = trio.current_time()
        await stream.send_all(post("/v1/chat/completions", CHAT)[: -len(CHAT)])
        raw = await trickled(stream, [bytes([b]) for b in CHAT], every_s=4)  # never idle 5 s
    (resp,) = parse_responses(raw)
    assert resp.status == 408 and resp.error()["code"] == "request_timeout"
    assert 20 <= trio.current_time() - started < 21


async def trickled(stream: trio.abc.Stream, pieces: list[bytes], every_s: float) -> bytes:
    """Send `pieces` one every `every_s` while reading; what the server sent until it
    closed."""

    async def trickle() -> None:
        try:
            for piece in pieces:
                await trio.sleep(every_s)
                await stream.send_all(piece)
        except trio.BrokenResourceError:
            pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trickle)
        raw = await read_to_eof(stream, 60)
        nursery.cancel_scope.cancel()
    return raw


async def test_a_body_deadline_is_logged_with_its_408(
    clock: trio.testing.MockClock,
    nursery: trio.Nursery,
    mock: MockUpstream,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", "edgegw.access")
    gw = await start_gateway(nursery, upstream_env(mock, SERVER_BODY_IDLE_TIMEOUT="5s"))
    (stream,) = await open_stalled(gw.port, 1)
    async with stream:
        (resp,) = parse_responses(await read_to_eof(stream))
    assert resp.status == 408
    (line,) = [r.getMessage() for r in caplog.records if r.name == "edgegw.access"]
    assert line.startswith("POST /v1/chat/completions 408 ")


@pytest.mark.parametrize(
    "head",
    [
        b"GET /health HTTP/1.1\nHost: gw\n",  # bare LF, the head not yet over
        b"GET /health HTTP/1.1\r\nHost: gw\rX: y",  # bare CR
        b"GET /health HTTP/1.1\r\nHost: gw\n\n",
    ],
)
async def test_a_head_with_a_bare_cr_or_lf_gets_400_at_once(
    head: bytes, clock: trio.testing.MockClock, gateway: Gateway
) -> None:
    """Such a head never ends in CRLF CRLF: it is refused when it shows, not at the head
    deadline."""
    async with await connect(gateway.port) as stream:
        started = trio.current_time()
        await stream.send_all(head)
        (resp,) = parse_responses(await read_to_eof(stream))
    assert trio.current_time() - started < 1
    assert resp.status == 400 and resp.error()["code"] == "invalid_request"


# -- slowloris heads ------------------------------------------------------------------------


async def test_a_slowloris_head_gets_408(
    clock: trio.testing.MockClock, nursery: trio.Nursery, mock: MockUpstream
) -> None:
    gw = await start_gateway(nursery, upstream_env(mock, SERVER_HEADER_TIMEOUT="3s"))
    async with await connect(gw.port) as stream:
        started = trio.current_time()
        await stream.send_all(b"GET /health HTTP/1.1\r\nHost: gw\r\n")
        (resp,) = parse_responses(await trickled(stream, [b"X-a: b\r\n"] * 10, every_s=1))
        assert 3 <= trio.current_time() - started < 4
    assert resp.status == 408 and resp.headers[b"connection"] == b"close"
    assert resp.error()["code"] == "request_timeout"
    # A connection that sends nothing at all is closed without an answer.
    async with await connect(gw.port) as silent:
        assert await read_to_eof(silent) == b""


async def test_a_kept_alive_connection_waits_for_a_request_keepalive_timeout_s(
    clock: trio.testing.MockClock, nursery: trio.Nursery, mock: MockUpstream
) -> None:
    gw = await start_gateway(nursery, upstream_env(mock, SERVER_KEEPALIVE_TIMEOUT="5s"))
    async with await connect(gw.port) as early, await connect(gw.port) as late:
        for stream in (early, late):
            await stream.send_all(get("/health"))
            await read_responses(stream, 1)
        started = trio.current_time()
        await trio.sleep(3)
        await late.send_all(get("/health"))  # a request begins its wait anew
        (resp,) = await read_responses(late, 1)
        assert resp.status == 200
        assert await read_to_eof(early) == b""  # closed without an answer
        assert 5 <= trio.current_time() - started < 5.5
        assert await read_to_eof(late) == b""
        assert 8 <= trio.current_time() - started < 8.5


# -- 2. streams end for HTTP/1.0 and Connection: close -----------------------------------


async def test_an_http10_stream_ends_with_eof(gateway: Gateway, mock: MockUpstream) -> None:
    mock.config = MockConfig(api_key=UPSTREAM_KEY, token_rate=20, tokens=6)  # 0.3 s
    resps, raw = await one_shot(
        gateway.port, post("/v1/chat/completions", STREAM, version=b"HTTP/1.0")
    )
    (resp,) = resps
    assert resp.status == 200 and b"transfer-encoding" not in resp.headers
    assert resp.body.rstrip().endswith(b"data: [DONE]")


async def test_a_connection_close_stream_ends_with_eof(
    gateway: Gateway, mock: MockUpstream
) -> None:
    mock.config = MockConfig(api_key=UPSTREAM_KEY, token_rate=20, tokens=6)
    async with await connect(gateway.port) as stream:
        await stream.send_all(post("/v1/chat/completions", STREAM, CLOSE))
        raw = await read_to_eof(stream)
    assert raw.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")  # EOF right after the last chunk
    (resp,) = parse_responses(raw)
    assert resp.status == 200 and resp.headers[b"connection"] == b"close"


async def test_keep_alive_after_a_long_stream_and_pipelining(
    gateway: Gateway, mock: MockUpstream
) -> None:
    mock.config = MockConfig(api_key=UPSTREAM_KEY, token_rate=20, tokens=6)
    async with await connect(gateway.port) as stream:
        await stream.send_all(post("/v1/chat/completions", STREAM))
        (first,) = await read_responses(stream, 1)
        assert first.body.rstrip().endswith(b"data: [DONE]")
        mock.config = MockConfig(api_key=UPSTREAM_KEY)
        await stream.send_all(get("/health") + post("/v1/chat/completions", CHAT) + get("/health"))
        resps = await read_responses(stream, 3)
        assert [r.status for r in resps] == [200, 200, 200]
        assert b"chat.completion" in resps[1].body
        await stream.send_all(get("/health", CLOSE))
        (last,) = parse_responses(await read_to_eof(stream))
        assert last.status == 200


async def test_100_continue_chunked_bodies_and_head(gateway: Gateway) -> None:
    async with await connect(gateway.port) as stream:
        head = post("/v1/chat/completions", CHAT, b"Expect: 100-continue")[: -len(CHAT)]
        await stream.send_all(head)
        with trio.fail_after(5):
            assert await stream.receive_some(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        await stream.send_all(CHAT)
        (resp,) = await read_responses(stream, 1)
        assert resp.status == 200
        chunked = (
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        await stream.send_all(chunked + b"5\r\n" + CHAT[:5] + b"\r\n")
        await trio.sleep(0.05)
        rest = CHAT[5:]
        await stream.send_all(b"%x;ext=1\r\n%s\r\n0\r\n\r\n" % (len(rest), rest))
        (resp,) = await read_responses(stream, 1)
        assert resp.status == 200 and b"chat.completion" in resp.body
        await stream.send_all(b"HEAD /health HTTP/1.1\r\nHost: gw\r\n\r\n" + get("/health"))
        data = b""
        with trio.fail_after(5):
            while data.count(b"HTTP/1.1 ") < 2 or not data.endswith(b'"OK"}'):
                data += await stream.receive_some(65536)
        first, second = data.split(b"HTTP/1.1 ")[1:]
        assert first.startswith(b"405 ") and first.endswith(b"\r\n\r\n")  # no body for HEAD
        assert second.startswith(b"200 ")


@pytest.mark.parametrize("where", ["with the head", "after it"])
async def test_malformed_chunks_are_a_400_and_the_end(gateway: Gateway, where: str) -> None:
    """A chunk size that is no hex number is the client's fault (400 invalid_request, the
    reason named) whether it came in the head's read or later; the connection then closes."""
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    async with await connect(gateway.port) as stream:
        if where == "after it":
            await stream.send_all(head)
            await trio.sleep(0.05)
            await stream.send_all(b"zz\r\n{}\r\n0\r\n\r\n")
        else:
            await stream.send_all(head + b"zz\r\n{}\r\n0\r\n\r\n")
        (resp,) = await read_responses(stream, 1)
        assert resp.status == 400
        error = orjson.loads(resp.body)["error"]
        assert error["code"] == "invalid_request"
        assert error["message"].startswith("malformed request body framing")
        with trio.fail_after(5):
            assert await stream.receive_some(1) == b""


# -- 3. smuggling, h2c, the HTTP/2 preface ----------------------------------------------------

SMUGGLED = get("/v1/models")  # what a desynchronised parser would take for a second request
# name -> (the extra header lines, the screen's refusal code); every one is a 400.
SMUGGLING = {
    "cl_and_te": (b"Content-Length: 4\r\nTransfer-Encoding: chunked", "conflicting_framing"),
    "te_and_cl": (b"Transfer-Encoding: chunked\r\nContent-Length: 4", "conflicting_framing"),
    "te_obs_fold": (b"Transfer-Encoding:\r\n chunked", "obs_fold"),
    "te_and_short_cl": (
        b"Transfer-Encoding: chunked\r\nContent-Length: 1",
        "conflicting_framing",
    ),
    "two_cl": (b"Content-Length: 4\r\nContent-Length: 40", "bad_content_length"),
    "cl_list": (b"Content-Length: 4, 40", "bad_content_length"),
    "te_space_before_colon": (b"Transfer-Encoding : chunked", "bad_header_name"),
    "te_twice": (
        b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity",
        "bad_transfer_encoding",
    ),
    "te_not_chunked": (b"Transfer-Encoding: gzip, chunked", "bad_transfer_encoding"),
    "te_http10": (b"Transfer-Encoding: chunked", "bad_transfer_encoding"),
}


@pytest.mark.parametrize("name", SMUGGLING)
async def test_smuggling_variants_get_400_and_close(
    name: str, gateway: Gateway, mock: MockUpstream
) -> None:
    version = b"HTTP/1.0" if name == "te_http10" else b"HTTP/1.1"
    head = (
        b"POST /v1/chat/completions %s\r\nHost: gw\r\nContent-Type: application/json\r\n%s\r\n\r\n"
        % (version, SMUGGLING[name][0])
    )
    body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(CHAT), CHAT) + SMUGGLED
    seen = len(mock.requests)
    resps, _ = await one_shot(gateway.port, head + body)
    (resp,) = resps  # one answer, then the end: the smuggled request is never read
    assert resp.status == 400
    assert resp.headers[b"connection"] == b"close"
    assert resp.error()["code"] == SMUGGLING[name][1]
    assert len(mock.requests) == seen


async def test_h2c_upgrade_is_not_honoured(gateway: Gateway) -> None:
    upgrade = get(
        "/health",
        b"Connection: Upgrade, HTTP2-Settings",
        b"Upgrade: h2c",
        b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA",
    )
    async with await connect(gateway.port) as stream:
        await stream.send_all(upgrade)
        (resp,) = await read_responses(stream, 1)
        assert (resp.version, resp.status) == (b"HTTP/1.1", 200)  # no 101
        assert b"upgrade" not in resp.headers
        await stream.send_all(get("/health"))  # still HTTP/1.1 on the same connection
        assert [r.status for r in await read_responses(stream, 1)] == [200]


async def test_the_http2_preface_is_refused(gateway: Gateway) -> None:
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
    resps, _ = await one_shot(gateway.port, preface)
    (resp,) = resps
    assert resp.status == 400 and resp.headers[b"connection"] == b"close"
    assert resp.error()["code"] == "bad_request_line"


# -- 4. descriptors -----------------------------------------------------------------------


async def test_a_connection_the_client_closed_gives_its_fd_back_at_once(
    gateway: Gateway,
) -> None:
    await one_shot(gateway.port, get("/health", CLOSE))
    await trio.sleep(0.1)
    before, tasks = fd_count(), task_names()
    streams = []
    for _ in range(20):
        stream = await connect(gateway.port)
        await stream.send_all(get("/health"))
        assert [r.status for r in await read_responses(stream, 1)] == [200]
        streams.append(stream)
    assert fd_count() >= before + 40  # both ends of 20 kept-alive connections
    for stream in streams:
        await stream.aclose()
    with trio.fail_after(2):  # the keep-alive timeout is 75 s
        while fd_count() > before:  # noqa: ASYNC110 (the kernel's count)
            await trio.sleep(0.01)
    assert task_names() == tasks  # and their tasks are gone


# -- 7. write stalls -----------------------------------------------------------------------


async def test_a_client_that_stops_reading_is_closed_and_the_upstream_cancelled(
    clock: trio.testing.MockClock,
    nursery: trio.Nursery,
    mock: MockUpstream,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", "edgegw.http1")
    gw = await start_gateway(nursery, upstream_env(mock, SERVER_WRITE_STALL_TIMEOUT="2s"))
    mock.config = MockConfig(api_key=UPSTREAM_KEY, tokens=200_000)
    body = orjson.loads(STREAM)
    body["max_tokens"] = 200_000
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await sock.connect(("127.0.0.1", gw.port))
    async with await connect(gw.port, sock) as stream:
        await stream.send_all(post("/v1/chat/completions", orjson.dumps(body)))
        with trio.fail_after(60):
            while mock.stream_disconnects < 1:  # noqa: ASYNC110 (a fake peer's counter)
                await trio.sleep(0.5)
        raw = await read_to_eof(stream, 60)  # what was in flight, then the end
    assert raw.startswith(b"HTTP/1.1 200 ")
    assert not raw.endswith(b"0\r\n\r\n")
    assert "a write stalled for 2.0s" in caplog.text
    await trio.sleep(1)
    assert gw.pool.open_connections == 0


# -- 7. the head cap, enforced exactly --------------------------------------------------------


def head_of_size(size: int) -> bytes:
    base = get("/health", CLOSE, b"X-Pad: ")
    return base.replace(b"X-Pad: ", b"X-Pad: " + b"a" * (size - len(base)))


@pytest.mark.parametrize("cap", [None, 4096])
async def test_a_head_over_the_cap_gets_431_and_one_at_it_200(
    cap: int | None, nursery: trio.Nursery, mock: MockUpstream
) -> None:
    env = upstream_env(mock) if cap is None else upstream_env(mock, SERVER_MAX_HEADER_SIZE=str(cap))
    limit = cap or DEFAULT_LIMITS.max_head_bytes
    gw = await start_gateway(nursery, env)
    assert len(head_of_size(limit)) == limit
    (ok,), _ = await one_shot(gw.port, head_of_size(limit))
    assert ok.status == 200
    (over,), _ = await one_shot(gw.port, head_of_size(limit + 1))
    assert over.status == 431 and over.headers[b"connection"] == b"close"
    assert over.error()["code"] == "request_header_fields_too_large"


# -- every error of the layer is the envelope, with Connection: close -----------------------


async def failing_app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    raise RuntimeError("a bug")


async def test_layer_errors_are_envelopes(
    clock: trio.testing.MockClock, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    limits = ConnectionLimits(header_timeout_s=1, max_head_bytes=2048)
    port = await nursery.start(serve_on, failing_app, limits)
    cases = {
        400: b"GET / HTTP/1.1\r\nHost: gw\r\nX: a\x00\r\n\r\n",
        408: b"GET / HTTP/1.1\r\n",
        431: b"GET / HTTP/1.1\r\n" + b"X: " + b"a" * 3000 + b"\r\n\r\n",
        501: b"POST / HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: br\r\n\r\n",
        500: get("/"),
    }
    for status, data in cases.items():
        (resp,), _ = await one_shot(port, data)
        assert resp.status == status and resp.headers[b"connection"] == b"close"
        err = resp.error()
        assert err["type"] == ("server_error" if status >= 500 else "invalid_request_error")
        assert "a bug" not in resp.body.decode()
    assert "ASGI application error" in caplog.text


async def serve_on(app, limits: ConnectionLimits, *, task_status) -> None:  # type: ignore[no-untyped-def]
    listener = open_listener("127.0.0.1:0")
    port = listener.getsockname()[1]
    async with trio.open_nursery() as nursery:
        tls = LISTENER.server_context()
        binds = await nursery.start(
            lambda task_status: serve_http1(app, listener, limits, tls=tls, task_status=task_status)
        )
        assert binds == [f"{LISTENER.scheme}://127.0.0.1:{port}"]
        task_status.started(port)


# -- the connection cap, fd://, and Hypercorn still there ----------------------------------------


async def test_near_the_cap_idle_connections_are_closed_first(
    nursery: trio.Nursery, mock: MockUpstream
) -> None:
    gw = await start_gateway(nursery, upstream_env(mock, SERVER_MAX_CONNECTIONS="10"))
    idle = []
    for _ in range(10):
        stream = await connect(gw.port)
        await stream.send_all(get("/health"))
        await read_responses(stream, 1)
        idle.append(stream)
    (fresh,), _ = await one_shot(gw.port, get("/health", CLOSE))
    assert fresh.status == 200
    with trio.fail_after(2):  # the longest-idle ones went first
        assert await read_to_eof(idle[0]) == b""
    for stream in idle:
        await stream.aclose()


async def test_an_inherited_listening_socket(nursery: trio.Nursery, mock: MockUpstream) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    settings = Settings.load(environ=upstream_env(mock, **LISTENER.env))
    binds = await nursery.start(
        lambda task_status: serve(settings, bind=f"fd://{sock.detach()}", task_status=task_status)
    )
    assert binds == [f"{LISTENER.scheme}://127.0.0.1:{port}"]
    (resp,), _ = await one_shot(port, get("/health", CLOSE))
    assert resp.status == 200


async def test_hypercorn_is_still_available(nursery: trio.Nursery, mock: MockUpstream) -> None:
    gw = await start_gateway(nursery, upstream_env(mock, EDGEGW_SERVER="hypercorn"))
    (resp,), _ = await one_shot(gw.port, post("/v1/chat/completions", CHAT, CLOSE))
    assert resp.status == 200 and b"hypercorn" in resp.headers.get(b"server", b"")


@pytest.mark.parametrize("now", [0, 951_782_400, 1_796_000_000, 4_102_444_799])
def test_the_date_header_is_rfc_9110s_imf_fixdate(now: int) -> None:
    # email.utils' formatdate as the reference (the core formats it by hand).
    assert imf_fixdate(now) == formatdate(now, usegmt=True).encode()
