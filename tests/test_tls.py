"""The upstream client over TLS: a provider on https, certificate verification, keep-alive."""

from __future__ import annotations

import ssl

import orjson
import trio
import trustme

from edgegw.server import serve
from edgegw.settings import Settings
from edgegw.upstream import UpstreamPool

from .echo_upstream import Answer, EchoUpstream
from .rawhttp import request

CHAT = orjson.dumps({"model": "openai/gpt-4o", "messages": [{"role": "user", "content": "hi"}]})


async def gateway_with(
    nursery: trio.Nursery, port: int, client_ctx: ssl.SSLContext
) -> tuple[int, UpstreamPool]:
    settings = Settings.load(
        environ={
            "SERVER_PORT": "0",
            "OPENAI_API_URL": f"https://localhost:{port}/v1",
            "OPENAI_API_KEY": "sk-tls",
        }
    )
    pool = UpstreamPool(connect_timeout_s=5, idle_per_host=8, ssl_context=client_ctx)
    binds = await nursery.start(
        lambda task_status: serve(settings, pool=pool, task_status=task_status)
    )
    return int(binds[0].rsplit(":", 1)[1]), pool


async def test_https_provider_with_verified_certificate(nursery: trio.Nursery) -> None:
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_ctx)
    echo = EchoUpstream()
    echo.answer = lambda seen: Answer(body=b'{"id":"chatcmpl-tls","choices":[]}')
    tls_port = await nursery.start(echo.serve, server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    port, pool = await gateway_with(nursery, tls_port, client_ctx)
    for _ in range(3):
        resp = await request(port, "POST", "/v1/chat/completions", CHAT)
        assert resp.status == 200 and orjson.loads(resp.body)["id"] == "chatcmpl-tls"
    assert echo.seen[-1].headers["authorization"] == "Bearer sk-tls"
    assert echo.seen[-1].headers["host"] == f"localhost:{tls_port}"
    assert pool.open_connections == 1  # one TLS connection, kept alive and reused


async def test_untrusted_certificate_is_refused(nursery: trio.Nursery) -> None:
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    trustme.CA().issue_cert("localhost").configure_cert(server_ctx)
    echo = EchoUpstream()
    tls_port = await nursery.start(echo.serve, server_ctx)
    client_ctx = ssl.create_default_context()
    trustme.CA().configure_trust(client_ctx)  # a different CA
    port, _ = await gateway_with(nursery, tls_port, client_ctx)
    resp = await request(port, "POST", "/v1/chat/completions", CHAT)
    assert resp.status == 502
    assert orjson.loads(resp.body)["error"]["code"] == "upstream_unreachable"
    assert echo.seen == []
