"""The tenants' admin API (TENANTS_ADMIN_KEY): keys made, listed, used, revoked and kept
across a restart in the real SQLite store, usage shown, its credential its own."""

from __future__ import annotations

import hashlib
from pathlib import Path

import orjson
import trio

from edgegw.mock import MockUpstream

from .conftest import Gateway, start_gateway, upstream_env
from .rawhttp import RawResponse, request

ADMIN = "admin-credential-0123456789"
CHAT = orjson.dumps(
    {"model": "openai/m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}
)


def env_for(mock: MockUpstream, tmp_path: Path, **extra: str) -> dict[str, str]:
    keys = tmp_path / "keys"
    digest = hashlib.sha256(b"sk-file").hexdigest()
    keys.write_text(f"tenant team models=openai/*\nkey file-key tenant=team sha256={digest}\n")
    return upstream_env(
        mock,
        EDGEGW_API_KEYS_FILE=str(keys),
        TENANTS_STORE_PATH=str(tmp_path / "usage.sqlite3"),
        TENANTS_ADMIN_KEY=ADMIN,
        **extra,
    )


async def admin(
    gw: Gateway, method: str, path: str, doc: object = None, key: str = ADMIN
) -> RawResponse:
    body = b"" if doc is None else orjson.dumps(doc)
    return await request(gw.port, method, path, body, [("authorization", f"Bearer {key}")])


async def chat(gw: Gateway, key: str) -> RawResponse:
    return await request(
        gw.port, "POST", "/v1/chat/completions", CHAT, [("authorization", f"Bearer {key}")]
    )


def error_of(resp: RawResponse) -> tuple[int, str, str | None]:
    err = orjson.loads(resp.body)["error"]
    return resp.status, err["code"], err["param"]


async def test_keys_made_used_listed_revoked_and_kept(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    env = env_for(mock, tmp_path)
    async with trio.open_nursery() as first_life:
        gw = await start_gateway(first_life, env)
        made = await admin(gw, "POST", "/admin/keys", {"tenant": "team", "name": "ci", "rpm": 2})
        assert made.status == 201, made.body
        key = orjson.loads(made.body)["key"]
        assert key.startswith("sk-edgegw-")
        # The key is the tenant's, with its own limit; the tenant's scope holds.
        assert (await chat(gw, key)).status == 200
        assert (await chat(gw, key)).status == 200
        assert error_of(await chat(gw, key)) == (429, "rate_limit_exceeded", None)
        listed = orjson.loads((await admin(gw, "GET", "/admin/keys")).body)["data"]
        assert [(d["tenant"], d["name"], d["source"]) for d in listed] == [
            ("team", "file-key", "file"),
            ("team", "ci", "admin"),
        ]
        assert key not in str(listed) and hashlib.sha256(key.encode()).hexdigest() not in str(
            listed
        )
        usage = orjson.loads((await admin(gw, "GET", "/admin/usage?tenant=team")).body)
        assert usage["usage"]["day"]["tokens"] == 22  # two answers of 1 + 10 tokens
        assert usage["keys"]["ci"]["month"]["tokens"] == 22
        assert usage["keys"]["file-key"]["day"]["tokens"] == 0
        first_life.cancel_scope.cancel()
    # Kept in the store: a new process takes the key (its limit anew: a fresh bucket).
    gw = await start_gateway(nursery, env)
    assert (await chat(gw, key)).status == 200
    revoked = await admin(gw, "DELETE", "/admin/keys?tenant=team&name=ci")
    assert orjson.loads(revoked.body) == {"tenant": "team", "name": "ci", "revoked": True}
    assert error_of(await chat(gw, key)) == (401, "invalid_api_key", None)
    again = await admin(gw, "DELETE", "/admin/keys?tenant=team&name=ci")
    assert error_of(again)[:2] == (404, "not_found")
    # The name is free again.
    assert (await admin(gw, "POST", "/admin/keys", {"tenant": "team", "name": "ci"})).status == 201


async def test_what_the_admin_api_refuses(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    gw = await start_gateway(nursery, env_for(mock, tmp_path))
    for doc, param in (
        ({"tenant": "nobody", "name": "x"}, "tenant"),
        ({"tenant": "team", "name": "file-key"}, "name"),  # the key file's own
        ({"tenant": "team", "name": "bad name"}, "name"),
        ({"tenant": "team", "name": "x", "rpm": "1 2"}, "rpm"),
        ({"tenant": "team", "name": "x", "owner": "me"}, "owner"),
    ):
        assert error_of(await admin(gw, "POST", "/admin/keys", doc)) == (
            400,
            "invalid_request",
            param,
        ), doc
    bad_value = await admin(gw, "POST", "/admin/keys", {"tenant": "team", "name": "x", "rpm": 0})
    assert error_of(bad_value)[:2] == (400, "invalid_request")
    assert "rpm=" in orjson.loads(bad_value.body)["error"]["message"]
    assert (await admin(gw, "POST", "/admin/keys", {"tenant": "team", "name": "x"})).status == 201
    dup = await admin(gw, "POST", "/admin/keys", {"tenant": "team", "name": "x"})
    assert error_of(dup) == (400, "invalid_request", "name")
    # Its own credential: a client key is not one, and the admin key is not a client key.
    assert error_of(await admin(gw, "GET", "/admin/keys", key="sk-file"))[:2] == (
        401,
        "invalid_api_key",
    )
    assert error_of(await chat(gw, ADMIN))[:2] == (401, "invalid_api_key")


async def test_without_an_admin_key_there_is_no_admin_api(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    env = env_for(mock, tmp_path)
    del env["TENANTS_ADMIN_KEY"]
    gw = await start_gateway(nursery, env)
    assert error_of(await admin(gw, "GET", "/admin/keys"))[:2] == (404, "not_found")


async def test_with_the_admin_api_on_no_request_passes_without_a_key(
    nursery: trio.Nursery, mock: MockUpstream, tmp_path: Path
) -> None:
    env = env_for(mock, tmp_path)
    (tmp_path / "keys").write_text("tenant team\n")  # no key of any kind yet
    gw = await start_gateway(nursery, env)
    resp = await request(gw.port, "POST", "/v1/chat/completions", CHAT)
    assert error_of(resp)[:2] == (401, "invalid_api_key")
    made = await admin(gw, "POST", "/admin/keys", {"tenant": "team", "name": "first"})
    assert (await chat(gw, orjson.loads(made.body)["key"])).status == 200
