"""The tenants' admin API, under its own credential (TENANTS_ADMIN_KEY; without it these
routes do not exist, 404):

  POST   /admin/keys                       make a key for a tenant of the key file: its
                                           name and optional models, expires, rpm, tpm,
                                           concurrency, budget_tokens, budget_usd (as on a
                                           key line); the key is in the answer, once
  GET    /admin/keys                       every key by tenant and name, with its source
  DELETE /admin/keys?tenant=T&name=N       revoke an admin key
  GET    /admin/usage?tenant=T             the tenant's and its keys' usage this day, week
                                           and month

Keys made here are stored as their key line (the SHA-256, never the key) in the tenants'
store: the SQLite file (TENANTS_STORE_PATH), which every worker sharing it re-reads each
second, or with TENANTS_REDIS_URL a Redis hash, which every gateway re-reads each second.
Client authentication does not apply to these routes (app.py): the admin key does.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from typing import Any

import orjson

from edgegw.asgi import Call
from edgegw.errors import fail
from edgegw.gateway import Gateway
from edgegw.keyfile import NAME, PERIODS, KeyFileError, admin_keys, parse_key_file
from edgegw.tenants.pricing import usd_text
from edgegw.tenants.redis_link import RedisReplyError, RedisUnavailable

# What a made key may carry besides its tenant and name (the key line's attributes).
ATTRIBUTES = ("models", "expires", "rpm", "tpm", "concurrency", "budget_tokens", "budget_usd")
KEY_PREFIX = "sk-edgegw-"


async def create_key(gw: Gateway, call: Call) -> None:
    _admitted(gw, call)
    body = await call.read_body(gw.settings.max_body_bytes)
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise fail("invalid_request", "The body is not JSON.") from None
    if not isinstance(doc, dict):
        raise fail("invalid_request", "The body is a JSON object.")
    unknown = sorted(set(doc) - {"tenant", "name", *ATTRIBUTES})
    if unknown:
        raise fail("invalid_request", f"Unknown member {unknown[0][:64]!r}.", param=unknown[0][:64])
    tenant, name = doc.get("tenant"), doc.get("name")
    for member, value in (("tenant", tenant), ("name", name)):
        if not isinstance(value, str) or not NAME.fullmatch(value):
            raise fail("invalid_request", "A name is letters, digits and ._@-.", param=member)
    assert isinstance(tenant, str) and isinstance(name, str)
    file = gw.client_keys.current
    if tenant not in file.tenants:
        raise fail("invalid_request", f"No tenant {tenant} in the key file.", param="tenant")
    if any(k.tenant == tenant and k.name == name for k in file.keys.values()):
        raise fail("invalid_request", f"The key file has a key {name} of {tenant}.", param="name")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    words = [f"key {name} tenant={tenant} sha256={hashlib.sha256(key.encode()).hexdigest()}"]
    for attr in ATTRIBUTES:
        if (value := doc.get(attr)) is None:
            continue
        text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
        if not text or any(c.isspace() for c in text) or not text.isprintable():
            raise fail("invalid_request", f"'{attr}' takes a value without spaces.", param=attr)
        words.append(f"{attr}={text}")
    line = " ".join(words)
    try:
        parse_key_file(f"tenant {tenant}\n{line}", var="admin key")
    except KeyFileError as e:
        raise fail("invalid_request", str(e).replace("admin key line 2: ", "")) from None
    if not await _store(gw.tenancy.save_key, tenant, name, line):
        raise fail("invalid_request", f"{tenant} has a key {name} already.", param="name")
    answer = {"tenant": tenant, "name": name, "key": key, "created": int(time.time())}
    await call.respond_json(201, orjson.dumps(answer))


async def list_keys(gw: Gateway, call: Call) -> None:
    _admitted(gw, call)
    data: list[dict[str, Any]] = [
        {"tenant": k.tenant, "name": k.name, "source": "file"}
        for k in gw.client_keys.current.keys.values()
    ]
    for (tenant, name), (_, created) in sorted(gw.tenancy.admin_keys.items()):
        data.append({"tenant": tenant, "name": name, "source": "admin", "created": int(created)})
    await call.respond_json(200, orjson.dumps({"object": "list", "data": data}))


async def revoke_key(gw: Gateway, call: Call) -> None:
    _admitted(gw, call)
    tenant, name = _query(call, "tenant"), _query(call, "name")
    if not await _store(gw.tenancy.revoke_key, tenant, name):
        raise fail("not_found", f"No admin key {name} of {tenant}.")
    await call.respond_json(200, orjson.dumps({"tenant": tenant, "name": name, "revoked": True}))


async def usage(gw: Gateway, call: Call) -> None:
    _admitted(gw, call)
    tenant = _query(call, "tenant")
    file = gw.client_keys.current
    if tenant not in file.tenants:
        raise fail("not_found", f"No tenant {tenant} in the key file.")
    names = {k.name for k in file.keys.values() if k.tenant == tenant}
    names |= {
        k.name for k in admin_keys(gw.tenancy.usage.admin_keys).values() if k.tenant == tenant
    }
    tenancy, now = gw.tenancy, time.time()

    async def periods(scope: str) -> dict[str, dict[str, object]]:
        if tenancy.shared is not None:
            try:
                counted = await tenancy.shared.usage(scope, now)
            except (RedisUnavailable, RedisReplyError):
                raise fail(
                    "tenant_store_unavailable", "Redis, which holds the usage, did not answer."
                ) from None
        else:
            counted = {
                p: (
                    tenancy.usage.spent(scope, "tokens", p, now),
                    tenancy.usage.spent(scope, "usd", p, now),
                )
                for p in PERIODS
            }
        return {p: {"tokens": t, "usd": usd_text(n)} for p, (t, n) in counted.items()}

    answer = {
        "tenant": tenant,
        "usage": await periods(f"t/{tenant}"),
        "keys": {name: await periods(f"k/{tenant}/{name}") for name in sorted(names)},
    }
    await call.respond_json(200, orjson.dumps(answer))


def _admitted(gw: Gateway, call: Call) -> None:
    """The admin key, as `Authorization: Bearer`: 404 when the admin API is off, 401 else."""
    expected = gw.settings.tenants_admin_key
    if expected is None:
        raise fail("not_found", "Requested route is not found")
    value = call.header(b"authorization") or b""
    presented = value[7:].strip() if value[:7].lower() == b"bearer " else b""
    if not hmac.compare_digest(presented, expected):
        raise fail(
            "invalid_api_key",
            "The admin API needs 'Authorization: Bearer <TENANTS_ADMIN_KEY>'.",
            headers=((b"www-authenticate", b"Bearer"),),
        )


def _query(call: Call, name: str) -> str:
    values = call.query_values(name)
    if len(values) != 1 or not NAME.fullmatch(values[0]):
        raise fail("invalid_request", f"'?{name}=' names one tenant or key.", param=name)
    return values[0]


async def _store(fn: Any, tenant: str, name: str, *more: str) -> bool:
    try:
        return bool(await fn(tenant, name, *more))
    except (RedisUnavailable, RedisReplyError):
        raise fail(
            "tenant_store_unavailable", "Redis, which holds the keys, did not answer."
        ) from None
