"""HTTPS on the client side: SERVER_TLS_CERT_PATH / SERVER_TLS_KEY_PATH with a trustme CA,
chat and streams over HTTP/1.1 (edgegw.http1) and, with SERVER_HTTP2_ENABLED, HTTP/2 (ALPN,
Hypercorn), a client disconnect over HTTP/2 reaching the upstream as on HTTP/1.1, HTTP/2 not
offered by default, TLS 1.2 as the floor, and bad configurations refused. The plain port's
limits over TLS: tests/test_front_door.py."""

from __future__ import annotations

import socket
import ssl
import warnings
from collections.abc import Iterator
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import httpx2
import orjson
import pytest
import trio
import trustme
from openai import OpenAI

from edgegw.http1.tls import TlsWire, server_context
from edgegw.mock import MockConfig, MockUpstream
from edgegw.settings import Settings, SettingsError

from .conftest import UPSTREAM_KEY, Gateway, start_gateway, upstream_env
from .tls import cert_env, trusting

CHAT = {"model": "openai/mock", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def cert_files(ca: trustme.CA, tmp_path: Path) -> dict[str, str]:
    return cert_env(ca, tmp_path, "127.0.0.1", "localhost")


@pytest.fixture
def client_ctx(ca: trustme.CA) -> ssl.SSLContext:
    return trusting(ca)


async def https_gateway(
    nursery: trio.Nursery, mock: MockUpstream, files: dict[str, str], *, http2: bool = False
) -> Gateway:
    if http2:
        files = {**files, "SERVER_HTTP2_ENABLED": "true"}
    gw = await start_gateway(nursery, upstream_env(mock, **files))
    assert gw.base.startswith("https://")
    return gw


@pytest.mark.parametrize("http2", [False, True])
async def test_chat_and_stream_over_https(
    nursery: trio.Nursery,
    mock: MockUpstream,
    cert_files: dict[str, str],
    client_ctx: ssl.SSLContext,
    http2: bool,
) -> None:
    gw = await https_gateway(nursery, mock, cert_files, http2=http2)
    async with httpx2.AsyncClient(verify=client_ctx, http2=http2, timeout=20) as client:
        resp = await client.post(f"{gw.base}/v1/chat/completions", json=CHAT)
        assert resp.status_code == 200
        assert resp.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
        assert resp.json()["choices"][0]["message"]["content"]
        async with client.stream(
            "POST", f"{gw.base}/v1/chat/completions", json={**CHAT, "stream": True}
        ) as stream:
            assert stream.status_code == 200
            body = b"".join([piece async for piece in stream.aiter_bytes()])
        assert body.endswith(b"data: [DONE]\n\n")


async def test_the_openai_sdk_over_https(
    nursery: trio.Nursery,
    mock: MockUpstream,
    cert_files: dict[str, str],
    client_ctx: ssl.SSLContext,
) -> None:
    gw = await https_gateway(nursery, mock, cert_files)
    client = OpenAI(
        base_url=f"{gw.base}/v1",
        api_key="x",
        max_retries=0,
        http_client=httpx2.Client(verify=client_ctx),
    )
    try:
        answer = await trio.to_thread.run_sync(
            lambda: client.chat.completions.create(model="openai/mock", messages=CHAT["messages"])
        )
    finally:
        client.close()
    assert answer.choices[0].message.content


async def test_a_stream_reset_over_http2_cancels_the_upstream(
    nursery: trio.Nursery, cert_files: dict[str, str], client_ctx: ssl.SSLContext
) -> None:
    """RST_STREAM on one stream (the connection stays up): the upstream generation is
    cancelled as when an HTTP/1.1 client hangs up. Driven with the h2 library directly,
    so the test controls exactly which frames go out."""
    slow = MockUpstream(MockConfig(api_key=UPSTREAM_KEY, token_rate=10, tokens=100))
    await nursery.start(slow.serve, "127.0.0.1", 0)
    gw = await https_gateway(nursery, slow, cert_files, http2=True)
    client_ctx.set_alpn_protocols(["h2"])
    stream = await trio.open_ssl_over_tcp_stream(
        "127.0.0.1", gw.port, ssl_context=client_ctx, https_compatible=True
    )
    await stream.do_handshake()
    assert stream.selected_alpn_protocol() == "h2"
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    body = orjson.dumps({**CHAT, "stream": True})
    conn.send_headers(
        1,
        [(":method", "POST"), (":path", "/v1/chat/completions"), (":scheme", "https"),
         (":authority", f"127.0.0.1:{gw.port}"), ("content-type", "application/json"),
         ("content-length", str(len(body)))],
    )  # fmt: skip
    conn.send_data(1, body, end_stream=True)
    await stream.send_all(conn.data_to_send())
    got_data = False
    with trio.fail_after(10):
        while not got_data:
            for event in conn.receive_data(await stream.receive_some(65536)):
                got_data |= isinstance(event, h2.events.DataReceived)
            await stream.send_all(conn.data_to_send())
    conn.reset_stream(1)
    await stream.send_all(conn.data_to_send())
    try:
        with trio.fail_after(5):
            while slow.stream_disconnects == 0:  # noqa: ASYNC110 (another server's count)
                await trio.sleep(0.05)
    finally:
        await stream.aclose()


async def test_http2_is_not_offered_by_default(
    nursery: trio.Nursery,
    mock: MockUpstream,
    cert_files: dict[str, str],
    client_ctx: ssl.SSLContext,
) -> None:
    """ALPN: a client offering h2 and http/1.1 gets http/1.1, and an HTTP/2 client is
    answered over HTTP/1.1."""
    gw = await https_gateway(nursery, mock, cert_files)
    client_ctx.set_alpn_protocols(["h2", "http/1.1"])
    stream = await trio.open_ssl_over_tcp_stream(
        "127.0.0.1", gw.port, ssl_context=client_ctx, https_compatible=True
    )
    try:
        await stream.do_handshake()
        assert stream.selected_alpn_protocol() == "http/1.1"
    finally:
        await stream.aclose()
    async with httpx2.AsyncClient(verify=client_ctx, http2=True, timeout=20) as client:
        resp = await client.post(f"{gw.base}/v1/chat/completions", json=CHAT)
    assert resp.status_code == 200 and resp.http_version == "HTTP/1.1"


def test_http2_without_tls_is_named_in_a_warning() -> None:
    warned = Settings.load(environ={"SERVER_HTTP2_ENABLED": "true"}).start_warnings
    assert any("SERVER_HTTP2_ENABLED is ignored" in w for w in warned)


async def test_tls_below_1_2_is_refused(
    nursery: trio.Nursery, mock: MockUpstream, cert_files: dict[str, str], ca: trustme.CA
) -> None:
    gw = await https_gateway(nursery, mock, cert_files)
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ca.configure_trust(old)
    with warnings.catch_warnings():  # TLS 1.1 is deprecated: that is the point
        warnings.simplefilter("ignore", DeprecationWarning)
        old.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        old.maximum_version = ssl.TLSVersion.TLSv1_1
    old.set_ciphers("ALL:@SECLEVEL=0")
    with pytest.raises((ssl.SSLError, OSError, trio.BrokenResourceError)):
        stream = await trio.open_ssl_over_tcp_stream("127.0.0.1", gw.port, ssl_context=old)
        try:
            await stream.do_handshake()
        finally:
            await stream.aclose()


def bad_configs(files: dict[str, str], tmp_path: Path) -> Iterator[tuple[dict[str, str], str]]:
    yield {"SERVER_TLS_CERT_PATH": files["SERVER_TLS_CERT_PATH"]}, "SERVER_TLS_KEY_PATH"
    yield {"SERVER_TLS_KEY_PATH": files["SERVER_TLS_KEY_PATH"]}, "SERVER_TLS_CERT_PATH"
    yield {**files, "SERVER_TLS_CERT_PATH": str(tmp_path / "missing.pem")}, "SERVER_TLS_CERT_PATH"
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    yield {**files, "SERVER_TLS_CERT_PATH": str(garbage)}, "SERVER_TLS_CERT_PATH"
    # A key that does not belong to the certificate.
    other = trustme.CA().issue_cert("localhost")
    wrong = tmp_path / "wrong-key.pem"
    wrong.write_bytes(other.private_key_pem.bytes())
    yield {**files, "SERVER_TLS_KEY_PATH": str(wrong)}, "SERVER_TLS_KEY_PATH"
    yield {"CLIENT_TLS_MIN_VERSION": "SSL3"}, "CLIENT_TLS_MIN_VERSION"


def test_bad_tls_configuration_stops_the_start(cert_files: dict[str, str], tmp_path: Path) -> None:
    for env, variable in bad_configs(cert_files, tmp_path):
        with pytest.raises(SettingsError) as info:
            Settings.load(environ=env)
        assert variable in str(info.value), env


def test_client_tls_minimum_is_applied() -> None:
    assert Settings.load(environ={}).client_tls_min_version == "TLS12"
    assert (
        Settings.load(environ={"CLIENT_TLS_MIN_VERSION": "tls13"}).client_tls_min_version == "TLS13"
    )


async def test_a_write_behind_one_blocked_mid_send_leaves_after_it(
    cert_files: dict[str, str], client_ctx: ssl.SSLContext
) -> None:
    # The connection layer's TLS: records leave in the order they were made, though the
    # first write blocks on a full socket while the second is made.
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    context = server_context(
        cert_files["SERVER_TLS_CERT_PATH"], cert_files["SERVER_TLS_KEY_PATH"], ["http/1.1"]
    )
    wire = TlsWire(ours, 10.0, context)
    client = trio.SSLStream(
        trio.SocketStream(trio.socket.from_stdlib_socket(theirs)),
        client_ctx,
        server_hostname="127.0.0.1",
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.do_handshake)
        assert await wire.handshake()
    first, second = b"a" * (8 << 20), b"b" * 1000  # more than the socket pair holds
    done: list[bool] = []

    async def write(data: bytes) -> None:
        done.append(await wire.write(data))

    got = bytearray()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(write, first)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(write, second)
        await trio.testing.wait_all_tasks_blocked()
        assert done == []  # the first is blocked, the second waits behind it
        while len(got) < len(first) + len(second):
            got += await client.receive_some(1 << 20)
    assert done == [True, True]
    assert got == first + second
    await wire.close()
    await client.aclose()
