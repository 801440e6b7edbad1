"""Limits and budgets shared through a real redis-server on loopback (TENANTS_REDIS_URL):
three gateway processes keep one limit between them, a budget spent through one gateway is
spent for the others, and Redis stopped mid-run behaves as TENANTS_REDIS_*_FAIL say."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
import trio

from edgegw.mock import MockUpstream
from edgegw.settings import parse_redis_url
from edgegw.tenants.redis_link import RedisLink

from .conftest import start_gateway, upstream_env
from .processes import gateway_process
from .rawhttp import RawResponse, request
from .redis_server import RedisServer

CHAT = orjson.dumps(
    {"model": "openai/m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}
)


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def code_of(resp: RawResponse) -> str:
    return str(orjson.loads(resp.body)["error"]["code"])


async def chat(port: int, key: str) -> RawResponse:
    return await request(
        port, "POST", "/v1/chat/completions", CHAT, [("authorization", f"Bearer {key}")]
    )


@pytest.fixture
async def redis(tmp_path: Path) -> AsyncIterator[RedisServer]:
    server = RedisServer(tmp_path)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def env_for(
    mock: MockUpstream, tmp_path: Path, redis: RedisServer, text: str, **extra: str
) -> dict[str, str]:
    keys = tmp_path / "keys"
    keys.write_text(text)
    return upstream_env(mock, EDGEGW_API_KEYS_FILE=str(keys), TENANTS_REDIS_URL=redis.url, **extra)


async def test_three_gateway_processes_keep_one_limit(
    mock: MockUpstream, tmp_path: Path, redis: RedisServer
) -> None:
    # 12 a minute for the tenant: one more every 5 s, longer than the test's burst takes.
    text = f"tenant t rpm=12 concurrency=100\nkey k tenant=t sha256={sha('sk-k')}\n"
    env = env_for(mock, tmp_path, redis, text)
    async with (
        gateway_process(env) as (_, a),
        gateway_process(env) as (_, b),
        gateway_process(env) as (_, c),
    ):
        statuses: dict[int, list[int]] = {a: [], b: [], c: []}

        async def client(port: int) -> None:
            for _ in range(10):
                resp = await chat(port, "sk-k")
                statuses[port].append(resp.status)
                if resp.status == 429:
                    assert code_of(resp) == "rate_limit_exceeded"
                    assert int(resp.headers[b"retry-after"]) >= 1

        async with trio.open_nursery() as clients:
            for port in (a, b, c):
                clients.start_soon(client, port)
    every = [s for port in statuses for s in statuses[port]]
    assert sorted(set(every)) == [200, 429]
    # 12 in all, not 12 per gateway (and each gateway served some of them).
    assert every.count(200) == 12
    assert all(200 in s for s in statuses.values())


async def test_a_budget_spent_through_one_gateway_is_spent_for_the_others(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path, redis: RedisServer
) -> None:
    # The mock's answer: 1 prompt token and 10 completion tokens (max_tokens).
    text = f"tenant t budget_tokens=20/day\nkey k tenant=t sha256={sha('sk-k')}\n"
    env = env_for(mock, tmp_path, redis, text)
    one = await start_gateway(nursery, env)
    two = await start_gateway(nursery, env)
    assert (await chat(one.port, "sk-k")).status == 200
    assert (await chat(two.port, "sk-k")).status == 200  # 11 spent: under 20
    link = RedisLink(parse_redis_url(redis.url), 2.0)
    try:
        with trio.fail_after(5):  # settled off the request path
            while True:
                keys = await link.call("KEYS", "edgegw:u:t/t:day:*")
                assert isinstance(keys, list)
                if keys and await link.call("HGET", keys[0], "tokens") == b"22":
                    break
                await trio.sleep(0.02)
    finally:
        link.close()
    refused = await chat(one.port, "sk-k")
    assert (refused.status, code_of(refused)) == (429, "insufficient_quota")
    assert (await chat(two.port, "sk-k")).status == 429


async def test_redis_stopped_mid_run(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path, redis: RedisServer
) -> None:
    text = (
        f"tenant limited rpm=1000\nkey a tenant=limited sha256={sha('sk-a')}\n"
        f"tenant budgeted budget_usd=10/month\nkey b tenant=budgeted sha256={sha('sk-b')}\n"
    )
    gw = await start_gateway(nursery, env_for(mock, tmp_path, redis, text))
    closed = await start_gateway(
        nursery, env_for(mock, tmp_path, redis, text, TENANTS_REDIS_LIMITS_FAIL="closed")
    )
    opened = await start_gateway(
        nursery,
        env_for(
            mock,
            tmp_path,
            redis,
            text,
            TENANTS_REDIS_LIMITS_FAIL="open",
            TENANTS_REDIS_BUDGETS_FAIL="open",
        ),
    )
    shared = await chat(gw.port, "sk-a")
    assert shared.status == 200
    assert shared.headers[b"x-ratelimit-remaining-requests"] == b"999"
    assert (await chat(gw.port, "sk-b")).status == 200
    await redis.stop()
    # Limits: this process's own buckets stand in (a fresh bucket: 999 left after this one).
    alone = await chat(gw.port, "sk-a")
    assert alone.status == 200
    assert alone.headers[b"x-ratelimit-remaining-requests"] == b"999"
    # Budgets fail closed by default; TENANTS_REDIS_LIMITS_FAIL=closed does so for limits.
    for port, key in ((gw.port, "sk-b"), (closed.port, "sk-a")):
        resp = await chat(port, key)
        assert (resp.status, code_of(resp)) == (503, "tenant_store_unavailable"), key
        assert resp.headers[b"retry-after"] == b"1"
    # Open: served without a limit (no rate-limit headers) and with its budget unchecked.
    for key in ("sk-a", "sk-b"):
        resp = await chat(opened.port, key)
        assert resp.status == 200 and b"x-ratelimit-limit-requests" not in resp.headers, key
    await redis.start()  # the same port, empty: the gateways reconnect on their own
    with trio.fail_after(5):
        while (await chat(gw.port, "sk-b")).status != 200:  # noqa: ASYNC110
            await trio.sleep(0.05)
    again = await chat(gw.port, "sk-a")
    assert again.headers[b"x-ratelimit-remaining-requests"] == b"999"  # Redis' count, anew


def test_the_redis_settings() -> None:
    from edgegw.settings import Settings, SettingsError

    with pytest.raises(SettingsError, match="TENANTS_REDIS_URL"):
        Settings.load(environ={"TENANTS_REDIS_URL": "http://127.0.0.1:6379"})
    with pytest.raises(SettingsError, match="TENANTS_REDIS_LIMITS_FAIL"):
        Settings.load(environ={"TENANTS_REDIS_URL": "redis://h", "TENANTS_REDIS_LIMITS_FAIL": "x"})
    warnings = Settings.load(environ={"TENANTS_REDIS_TIMEOUT": "1s"}).start_warnings
    assert any("TENANTS_REDIS_TIMEOUT" in w and "TENANTS_REDIS_URL" in w for w in warnings)


async def test_a_key_made_through_one_gateway_admits_at_the_others(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path, redis: RedisServer
) -> None:
    admin_key = "admin-credential-0123456789"
    env = env_for(mock, tmp_path, redis, "tenant t rpm=100\n", TENANTS_ADMIN_KEY=admin_key)
    one = await start_gateway(nursery, env)
    two = await start_gateway(nursery, env)
    auth = [("authorization", f"Bearer {admin_key}")]
    made = await request(
        one.port, "POST", "/admin/keys", orjson.dumps({"tenant": "t", "name": "ci"}), auth
    )
    assert made.status == 201, made.body
    key = orjson.loads(made.body)["key"]
    assert (await chat(one.port, key)).status == 200  # at once where it was made
    with trio.fail_after(5):  # the others re-read the keys each second
        while (await chat(two.port, key)).status != 200:  # noqa: ASYNC110
            await trio.sleep(0.05)
    listed = orjson.loads((await request(two.port, "GET", "/admin/keys", b"", auth)).body)
    assert [(d["name"], d["source"]) for d in listed["data"]] == [("ci", "admin")]
    gone = await request(two.port, "DELETE", "/admin/keys?tenant=t&name=ci", b"", auth)
    assert gone.status == 200
    with trio.fail_after(5):
        while (await chat(one.port, key)).status != 401:  # noqa: ASYNC110
            await trio.sleep(0.05)
