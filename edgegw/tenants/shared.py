"""The tenants' limits and budgets shared by several gateways through Redis
(TENANTS_REDIS_URL): one Lua script checks and charges a request atomically, another settles
it, so N gateways keep one limit (N requests in all, not N per gateway).

Keys (under `edgegw:`, each named in KEYS): a token bucket per limit (`r:<scope>` requests,
`t:<scope>` tokens: a hash of level and time, gone once full and idle), the requests in
flight (`c:<scope>`: a sorted set of leases scored by their expiry, so a gateway that dies
holds its slots CONCURRENCY_LEASE_S at most), and the usage per period (`u:<scope>:<period>`:
a hash of tokens and nano-USD, expiring a period after its own). Time is Redis' (TIME), so
the gateways' clocks need not agree.
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from dataclasses import dataclass

import orjson
import trio

from edgegw.keyfile import PERIODS, Budget, Caller, Limits
from edgegw.tenants.budgets import FLUSH_S, LiveKeys, period_end, period_key
from edgegw.tenants.redis_link import RedisLink, RedisReplyError, RedisUnavailable, Script

log = logging.getLogger("edgegw.tenants")

PREFIX = "edgegw:"
# A request's concurrency slot expires after this, should its gateway never release it.
CONCURRENCY_LEASE_S = 900
# The admin API's keys: tenant/name -> {"line", "created"}.
KEYS_HASH = PREFIX + "keys"
# Settlements sent in one write at most.
SETTLE_BATCH = 64
# How long a period's usage stays readable after the period.
USAGE_KEPT_S = 35 * 86400
# Settlements waiting for Redis (sent off the request path); past it they are dropped.
MAX_PENDING_SETTLES = 10_000

# KEYS[i] with ARGV kind/limit pairs after the three fixed ARGV: kind r (requests bucket),
# t (tokens bucket), c (in flight), bt / bu (a budget's usage hash: tokens / nano-USD).
ADMIT = Script(
    """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local estimate = tonumber(ARGV[1])
local lease = ARGV[2]
local lease_s = tonumber(ARGV[3])
local levels = {}
local refused, at, wait = '', 0, 0
for i = 1, #KEYS do
  local kind, limit = ARGV[2 + 2 * i], tonumber(ARGV[3 + 2 * i])
  if kind == 'r' or kind == 't' then
    local v = redis.call('HMGET', KEYS[i], 'l', 'a')
    local level = tonumber(v[1]) or limit
    local was = tonumber(v[2]) or now
    if now > was then level = math.min(limit, level + (now - was) * limit / 60) end
    level = math.min(level, limit)
    levels[i] = level
    local need = (kind == 'r') and 1 or math.min(estimate, limit)
    if level < need then
      local w = (need - level) * 60 / limit
      if w > wait then wait = w end
      if refused == '' then refused, at = kind, i end
    end
  elseif kind == 'c' then
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
    local active = redis.call('ZCARD', KEYS[i])
    levels[i] = active
    if active >= limit then
      if wait < 1 then wait = 1 end
      if refused == '' then refused, at = kind, i end
    end
  else
    local spent = tonumber(redis.call('HGET', KEYS[i], kind == 'bt' and 'tokens' or 'nano')) or 0
    levels[i] = spent
    if spent >= limit then return {'b', tostring(i), '0'} end
  end
end
if refused ~= '' then
  local out = {refused, tostring(at), tostring(wait)}
  for i = 1, #KEYS do out[#out + 1] = tostring(levels[i]) end
  return out
end
local out = {'ok', '0', '0'}
for i = 1, #KEYS do
  local kind, limit = ARGV[2 + 2 * i], tonumber(ARGV[3 + 2 * i])
  if kind == 'r' or kind == 't' then
    local level = levels[i] - ((kind == 'r') and 1 or estimate)
    redis.call('HSET', KEYS[i], 'l', tostring(level), 'a', tostring(now))
    redis.call('EXPIRE', KEYS[i], math.ceil((limit - level) * 60 / limit) + 1)
    out[#out + 1] = tostring(level)
  elseif kind == 'c' then
    redis.call('ZADD', KEYS[i], now + lease_s, lease)
    redis.call('EXPIRE', KEYS[i], lease_s)
    out[#out + 1] = tostring(levels[i] + 1)
  else
    out[#out + 1] = tostring(levels[i])
  end
end
return out
"""
)

# KEYS: token buckets (ARGV: their limits), then `c:` sets, then usage hashes. ARGV[1] the
# tokens to give back (estimate - used, may be negative), ARGV[2] the lease, ARGV[3] used
# tokens, ARGV[4] nano-USD, ARGV[5..7] how many of each kind, then the buckets' limits and
# the usage hashes' expiries.
SETTLE = Script(
    """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local back, lease = tonumber(ARGV[1]), ARGV[2]
local tokens, nano = tonumber(ARGV[3]), tonumber(ARGV[4])
local nb, nc, nu = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
for i = 1, nb do
  local limit = tonumber(ARGV[7 + i])
  local v = redis.call('HMGET', KEYS[i], 'l', 'a')
  local level = tonumber(v[1]) or limit
  local was = tonumber(v[2]) or now
  if now > was then level = level + (now - was) * limit / 60 end
  level = math.min(limit, level + back)
  redis.call('HSET', KEYS[i], 'l', tostring(level), 'a', tostring(now))
  redis.call('EXPIRE', KEYS[i], math.max(1, math.ceil((limit - level) * 60 / limit) + 1))
end
for i = nb + 1, nb + nc do redis.call('ZREM', KEYS[i], lease) end
for i = nb + nc + 1, nb + nc + nu do
  if tokens > 0 then redis.call('HINCRBY', KEYS[i], 'tokens', tokens) end
  if nano > 0 then redis.call('HINCRBY', KEYS[i], 'nano', nano) end
  redis.call('EXPIRE', KEYS[i], tonumber(ARGV[7 + nb + i - nb - nc]))
end
return 1
"""
)


@dataclass(frozen=True, slots=True)
class Admitted:
    """What the admit script charged: the keys to settle and the levels left, by key."""

    lease: str
    buckets: list[tuple[str, int]]  # token buckets and their limits
    in_flight: list[str]
    levels: dict[str, float]


@dataclass(frozen=True, slots=True)
class Refused:
    kind: str  # r, t, c, b
    key: str
    wait_s: float
    levels: dict[str, float]


class SharedLimits:
    """Admission and settlement against Redis (module doc)."""

    def __init__(self, link: RedisLink) -> None:
        self.link = link
        # The admin API's live keys as Redis last held them (`edgegw:keys`), re-read every
        # FLUSH_S, so that a key made or revoked through one gateway holds for all.
        self.admin_keys: LiveKeys = {}
        send, receive = trio.open_memory_channel[tuple[list[str], list[str | int]]](
            MAX_PENDING_SETTLES
        )
        self._send, self._receive = send, receive

    async def admit(
        self, caller: Caller, estimate: int, now: float
    ) -> tuple[Admitted | Refused, list[tuple[str, str, Limits | Budget]]]:
        """Raises RedisUnavailable when Redis cannot answer."""
        rows = _rows(caller, now)
        keys = [PREFIX + key for key, _, _ in rows]
        args: list[str | int] = [estimate, lease := secrets.token_hex(8), CONCURRENCY_LEASE_S]
        for _, kind, what in rows:
            args += [kind, row_limit(kind, what)]
        try:
            reply = await self.link.evalsha(ADMIT, keys, args)
        except RedisReplyError as e:
            raise RedisUnavailable(f"script error: {e}") from None
        assert isinstance(reply, list)
        kind, at, wait = (x.decode() if isinstance(x, bytes) else str(x) for x in reply[:3])
        levels = {k: float(v) for k, v in zip(keys, reply[3:], strict=False)}
        if kind != "ok":
            return Refused(kind, keys[int(at) - 1], float(wait), levels), rows
        buckets = [
            (PREFIX + key, row_limit(k, what)) for key, k, what in rows if k == "t"
        ]  # only tokens are settled
        in_flight = [PREFIX + key for key, k, _ in rows if k == "c"]
        return Admitted(lease, buckets, in_flight, levels), rows

    def settle(
        self,
        admitted: Admitted,
        scopes: tuple[str, str],
        back: int,
        used: int,
        nano: int,
        now: float,
    ) -> None:
        """Queue the settlement (sent by `run`, off the request path)."""
        usage = [f"{PREFIX}u:{scope}:{period_key(p, now)}" for scope in scopes for p in PERIODS]
        # Kept USAGE_KEPT_S past its period, for whoever reads it afterwards.
        expiries = [
            math.ceil(period_end(p, now) - now) + USAGE_KEPT_S for _ in scopes for p in PERIODS
        ]
        keys = [k for k, _ in admitted.buckets] + admitted.in_flight + usage
        args: list[str | int] = [back, admitted.lease, used, nano]
        args += [len(admitted.buckets), len(admitted.in_flight), len(usage)]
        args += [limit for _, limit in admitted.buckets] + expiries
        try:
            self._send.send_nowait((keys, args))
        except trio.WouldBlock:
            log.warning("tenants' settlements queue is full: one dropped (Redis too slow?)")

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Send queued settlements until cancelled, those waiting together in one write (a
        busy gateway pays one round trip for many); re-read the admin keys every FLUSH_S."""
        task_status.started()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._refresh_keys)
                await self._send_settlements()
        finally:
            self.link.close()

    async def _send_settlements(self) -> None:
        async for first in self._receive:
            batch = [first]
            while len(batch) < SETTLE_BATCH:
                try:
                    batch.append(self._receive.receive_nowait())
                except trio.WouldBlock:
                    break
            await self._settle(batch)

    async def _refresh_keys(self) -> None:
        while True:
            try:
                await self.read_keys()
            except (RedisUnavailable, RedisReplyError) as e:
                log.warning("the admin API's keys not re-read from Redis (%s)", e)
            await trio.sleep(FLUSH_S)

    async def read_keys(self) -> None:
        reply = await self.link.call("HGETALL", KEYS_HASH)
        assert isinstance(reply, list)
        live: LiveKeys = {}
        for field, value in zip(reply[::2], reply[1::2], strict=True):
            assert isinstance(field, bytes) and isinstance(value, bytes)
            tenant, _, name = field.decode().partition("/")
            doc = orjson.loads(value)
            live[(tenant, name)] = (doc["line"], doc["created"])
        self.admin_keys = live

    async def save_key(self, tenant: str, name: str, line: str) -> bool:
        """An admin key's line into Redis; False when the tenant has one of that name."""
        doc = orjson.dumps({"line": line, "created": time.time()})
        made = await self.link.call("HSETNX", KEYS_HASH, f"{tenant}/{name}", doc)
        await self.read_keys()
        return made == 1

    async def revoke_key(self, tenant: str, name: str) -> bool:
        gone = await self.link.call("HDEL", KEYS_HASH, f"{tenant}/{name}")
        await self.read_keys()
        return gone == 1

    async def _settle(self, batch: list[tuple[list[str], list[str | int]]]) -> None:
        commands = [("EVALSHA", SETTLE.sha, len(k), *k, *a) for k, a in batch]
        try:
            replies = await self.link.pipeline(commands)
            for (keys, args), reply in zip(batch, replies, strict=True):
                if isinstance(reply, RedisReplyError) and str(reply).startswith("NOSCRIPT"):
                    await self.link.evalsha(SETTLE, keys, args)  # loads it for the next
                elif isinstance(reply, Exception):
                    raise reply
        except (RedisUnavailable, RedisReplyError) as e:
            log.warning("%d request(s)' usage not settled in Redis (%s)", len(batch), e)

    async def usage(self, scope: str, now: float) -> dict[str, tuple[int, int]]:
        """The usage of `scope` in the current periods: period -> (tokens, nano-USD)."""
        out = {}
        for p in PERIODS:
            reply = await self.link.call(
                "HMGET", f"{PREFIX}u:{scope}:{period_key(p, now)}", "tokens", "nano"
            )
            assert isinstance(reply, list)
            out[p] = (int(reply[0] or 0), int(reply[1] or 0))
        return out


def _rows(caller: Caller, now: float) -> list[tuple[str, str, Limits | Budget]]:
    """(key without prefix, kind, what it holds it to): the budgets first, then each
    scope's buckets and in-flight set."""
    tenant, key = caller.tenant, caller.key
    out: list[tuple[str, str, Limits | Budget]] = []
    scoped = ((f"t/{tenant.name}", tenant), (f"k/{tenant.name}/{key.name}", key))
    for scope, who in scoped:
        for b in who.budgets:
            kind = "bt" if b.unit == "tokens" else "bu"
            out.append((f"u:{scope}:{period_key(b.period, now)}", kind, b))
    for scope, who in scoped:
        limits = who.limits
        if limits.rpm is not None:
            out.append((f"r:{scope}", "r", limits))
        if limits.tpm is not None:
            out.append((f"t:{scope}", "t", limits))
        if limits.concurrency is not None:
            out.append((f"c:{scope}", "c", limits))
    return out


def row_limit(kind: str, what: Limits | Budget) -> int:
    """The limit a row of kind `kind` (r, t, c; a budget's) holds."""
    if isinstance(what, Budget):
        return what.limit
    value = {"r": what.rpm, "t": what.tpm, "c": what.concurrency}[kind]
    assert value is not None
    return value
