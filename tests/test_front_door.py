"""What HTTPS adds to the front door (the plain port's battery runs over TLS too, in
tests/test_http1_server.py): the handshake under the head deadline, stalled handshakes shed
so that a new client is not kept waiting, and descriptors given back under connection churn
with a low descriptor limit. Loopback only, bounded loops; deadlines on a MockClock."""

from __future__ import annotations

import os
import resource
import socket
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing
import trustme

from edgegw.http1.limits import MAX_HANDSHAKES
from edgegw.mock import MockUpstream

from .conftest import start_gateway, upstream_env
from .tls import cert_env, trusting


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def tls_env(ca: trustme.CA, tmp_path: Path) -> dict[str, str]:
    return cert_env(ca, tmp_path)


@pytest.fixture
def client_ctx(ca: trustme.CA) -> ssl.SSLContext:
    return trusting(ca)


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def health(port: int, ctx: ssl.SSLContext) -> bytes:
    """GET /health over a new TLS connection that closes after it; the whole answer."""
    tcp = await trio.open_tcp_stream("127.0.0.1", port)
    async with trio.SSLStream(tcp, ctx, server_hostname="127.0.0.1", https_compatible=True) as s:
        await s.send_all(b"GET /health HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := await s.receive_some(65536):
            data += chunk
    return data


async def eof_after(stream: trio.SocketStream) -> float:
    """When the server closed `stream` (EOF or reset), on the test's clock."""
    while True:
        try:
            if not await stream.receive_some(4096):
                break
        except trio.BrokenResourceError:
            break
    return trio.current_time()


async def test_a_stalled_handshake_ends_at_the_head_deadline(
    clock: trio.testing.MockClock,
    nursery: trio.Nursery,
    mock: MockUpstream,
    tls_env: dict[str, str],
) -> None:
    """A TLS record header and nothing more: closed without an answer at the head deadline,
    as a plain connection that sent half a head."""
    gw = await start_gateway(nursery, upstream_env(mock, SERVER_HEADER_TIMEOUT="3s", **tls_env))
    async with await trio.open_tcp_stream("127.0.0.1", gw.port) as stream:
        started = trio.current_time()
        await stream.send_all(b"\x16\x03\x01\x02\x00")  # a ClientHello record, its body never sent
        ended = await eof_after(stream)
    assert 3 <= ended - started < 4


async def test_stalled_handshakes_do_not_keep_a_new_client_waiting(
    clock: trio.testing.MockClock,
    nursery: trio.Nursery,
    mock: MockUpstream,
    tls_env: dict[str, str],
    client_ctx: ssl.SSLContext,
) -> None:
    """More connections than MAX_HANDSHAKES that never say hello: the oldest are ended as
    newer ones come, and a real client is served at once, not at the head deadline."""
    gw = await start_gateway(nursery, upstream_env(mock, **tls_env))
    silent = [await trio.open_tcp_stream("127.0.0.1", gw.port) for _ in range(MAX_HANDSHAKES + 16)]
    try:
        await trio.sleep(0.5)
        started = trio.current_time()
        assert b"HTTP/1.1 200 " in await health(gw.port, client_ctx)
        assert trio.current_time() - started < 1  # the head deadline is 10 s
        with trio.fail_after(1):
            await eof_after(silent[0])  # the oldest was ended to make room
    finally:
        for stream in silent:
            await stream.aclose()


# -- churn under a low descriptor limit ------------------------------------------------------

NOFILE = 512  # a connection cap of (512 - 256) / 2 = 128
ROUNDS, AT_ONCE = 30, 20  # 600 connections, 20 at a time


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _low_nofile() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


@asynccontextmanager
async def serve_process(env: dict[str, str]) -> AsyncIterator[tuple[trio.Process, int]]:
    """`edgegw serve` in a process of its own with RLIMIT_NOFILE at NOFILE."""
    port = _free_port()
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "edgegw", "serve"],
        env={**os.environ, **env, "SERVER_HOST": "127.0.0.1", "SERVER_PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=_low_nofile,
    )
    try:
        yield proc, port
    finally:
        proc.kill()
        await proc.wait()


def fds_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def test_tls_churn_with_a_low_descriptor_limit_loses_no_request(
    mock: MockUpstream, tls_env: dict[str, str], client_ctx: ssl.SSLContext
) -> None:
    """600 TLS connections, a third served, a third gone right after the handshake, a
    third gone in the middle of it: every request answered, and the process's descriptors
    back to where they were."""
    async with serve_process(upstream_env(mock, **tls_env)) as (proc, port):
        with trio.fail_after(30):
            while True:
                try:
                    await health(port, client_ctx)
                    break
                except OSError:
                    await trio.sleep(0.1)
        baseline = fds_of(proc.pid)
        answered = []

        async def one(i: int) -> None:
            tcp = await trio.open_tcp_stream("127.0.0.1", port)
            if i % 3 == 2:  # gone mid-handshake: a ClientHello start, then the end
                await tcp.send_all(b"\x16\x03\x01\x02\x00\x01")
                await tcp.aclose()
                return
            tls = trio.SSLStream(
                tcp, client_ctx, server_hostname="127.0.0.1", https_compatible=True
            )
            await tls.do_handshake()
            if i % 3 == 1:  # gone right after the handshake
                await tcp.aclose()
                return
            await tls.send_all(b"GET /health HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := await tls.receive_some(65536):
                data += chunk
            await tls.aclose()
            answered.append(data)

        with trio.fail_after(120):
            for r in range(ROUNDS):
                async with trio.open_nursery() as nursery:
                    for i in range(AT_ONCE):
                        nursery.start_soon(one, r * AT_ONCE + i)
        assert len(answered) == ROUNDS * AT_ONCE // 3
        assert all(a.startswith(b"HTTP/1.1 200 ") for a in answered)
        with trio.fail_after(10):
            while fds_of(proc.pid) > baseline:  # noqa: ASYNC110 (another process's count)
                await trio.sleep(0.05)


@pytest.fixture(autouse=True)
def _enough_descriptors() -> Iterator[None]:
    """The shedding test holds MAX_HANDSHAKES + 16 connections, both ends in this process."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * MAX_HANDSHAKES + 512
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need}")
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4 * need), hard))
    yield
