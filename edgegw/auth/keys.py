"""The issuer's signing keys: read from a JWKS (`read_key_set`), cached (`SigningKeys`).

The cache is what stands between a client and the IdP, so its rules are bounds:

- **Lifetime.** A key set is fresh for the JWKS answer's Cache-Control max-age, clamped to
  [KEYS_MIN_TTL_S, KEYS_MAX_TTL_S] (DEFAULT_KEYS_TTL_S when it gives none), then refreshed
  by the task `run()` (started by `serve()`), never on a request's path.
- **Unknown kid.** A token naming a kid the set lacks (a rotation) makes the refresher fetch
  at once, but at most once per MISS_COOLDOWN_S whatever the number of such requests:
  requests that miss while a fetch runs wait for that one fetch; requests that miss during
  the cooldown are answered at once. So random kids cost the IdP at most one JWKS request
  per cooldown, and the gateway at most a dictionary lookup each.
- **Stale if error.** A failed refresh keeps the keys held (an IdP outage does not lock
  clients out) and is retried after RETRY_MIN_S, doubling up to RETRY_MAX_S.
- **Identity.** A key whose JWK did not change across a refresh stays the same object, so
  tokens verified with it stay cached (edgegw.auth.verifier); a key that left the set is
  gone at once, with every token cached under it.

Only signature keys of an accepted algorithm are kept (RSA of at least MIN_RSA_BITS; EC
P-256/384/521; OKP Ed25519/Ed448); private members a JWK should never carry are dropped,
and symmetric (`oct`) keys are never used.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import trio
from jwt import PyJWK

from edgegw.auth.discovery import FETCH_TIMEOUT_S, IdpError

log = logging.getLogger("edgegw.auth")

DEFAULT_KEYS_TTL_S = 3600.0  # when the JWKS answer says nothing about freshness
KEYS_MIN_TTL_S = 300.0  # a max-age of 0 or 10 s must not turn into a fetch every few requests
KEYS_MAX_TTL_S = 86400.0  # a removed (revoked) key is dropped within a day at the latest
MISS_COOLDOWN_S = 30.0  # at most one JWKS fetch per this, for tokens naming an unknown kid
RETRY_MIN_S = 10.0  # after a failed refresh; doubles per failure in a row
RETRY_MAX_S = 300.0
MAX_KEYS = 64  # keys read from one JWKS; real sets hold 1-4 (old, current, next)
MIN_RSA_BITS = 2048  # RFC 7518 §3.3
# JWK members of private or symmetric keys (RFC 7518 §6.2.2, §6.3.2, §6.4).
PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})

_RSA = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
_EC = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}
_OKP = frozenset({"Ed25519", "Ed448"})


@dataclass(frozen=True, slots=True, eq=False)
class SigningKey:
    """One public key of the issuer, ready for each algorithm it may verify. Compared by
    identity: the cache tells a key still held from one that left the set."""

    kid: str | None
    by_alg: Mapping[str, PyJWK]
    jwk: bytes  # the public JWK, canonical JSON: tells an unchanged key across refreshes


KeySet = tuple[SigningKey, ...]
FetchKeys = Callable[[], Awaitable[tuple[KeySet, float | None]]]


def read_key_set(doc: Any, algorithms: frozenset[str], where: str) -> KeySet:
    """The usable signature keys of a JWKS document; IdpError when there is none."""
    if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
        raise IdpError(f"{where}: not a JWK set (no 'keys' list)")
    keys = [k for k in (signing_key(jwk, algorithms) for jwk in doc["keys"][:MAX_KEYS]) if k]
    if skipped := min(len(doc["keys"]), MAX_KEYS) - len(keys):
        log.debug("%s: %d key(s) left out (not for signatures, or unusable)", where, skipped)
    if not keys:
        raise IdpError(
            f"{where}: holds no usable signing key (asymmetric, for "
            f"{', '.join(sorted(algorithms))})"
        )
    return tuple(keys)


def signing_key(jwk: Any, algorithms: frozenset[str]) -> SigningKey | None:
    """The key a JWK describes, or None when edgegw cannot or must not verify with it."""
    if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig":
        return None
    ops = jwk.get("key_ops")
    kid = jwk.get("kid")
    if (ops is not None and (not isinstance(ops, list) or "verify" not in ops)) or not (
        kid is None or isinstance(kid, str)
    ):
        return None
    usable = _algorithms_of(jwk) & algorithms
    declared = jwk.get("alg")
    if declared is not None:
        usable &= {declared} if isinstance(declared, str) else set()
    public = {name: value for name, value in jwk.items() if name not in PRIVATE_MEMBERS}
    by_alg: dict[str, PyJWK] = {}
    for alg in sorted(usable):
        try:
            by_alg[alg] = PyJWK(public, alg)
        except Exception:  # remote data: any failure means "unusable"; its text holds the key
            return None
        if public["kty"] == "RSA" and getattr(by_alg[alg].key, "key_size", 0) < MIN_RSA_BITS:
            return None
    if not by_alg:
        return None
    return SigningKey(kid, by_alg, orjson.dumps(public, option=orjson.OPT_SORT_KEYS))


def _algorithms_of(jwk: dict[str, Any]) -> frozenset[str]:
    kty, crv = jwk.get("kty"), jwk.get("crv")
    if kty == "RSA":
        return _RSA
    if kty == "EC" and isinstance(crv, str) and crv in _EC:
        return frozenset({_EC[crv]})
    if kty == "OKP" and crv in _OKP:
        return frozenset({"EdDSA"})
    return frozenset()


def cache_lifetime(max_age: float | None) -> float:
    """How long a fetched key set is used before the next refresh."""
    if max_age is None:
        return DEFAULT_KEYS_TTL_S
    return min(max(max_age, KEYS_MIN_TTL_S), KEYS_MAX_TTL_S)


class SigningKeys:
    """The cached key set and the one task that refreshes it (`run`). Timing reads trio's
    clock, so tests move it with a MockClock."""

    def __init__(self, fetch: FetchKeys, *, cooldown_s: float = MISS_COOLDOWN_S) -> None:
        self._fetch = fetch
        self.cooldown_s = cooldown_s
        self._keys: KeySet = ()
        self._held: frozenset[SigningKey] = frozenset()
        self._by_kid: dict[str, SigningKey] = {}
        self._sole_by_alg: dict[str, SigningKey] = {}  # alg -> the one key that verifies it
        self._refresh_at = math.inf
        self._failures = 0  # failed refreshes in a row
        self._last_miss_fetch = -math.inf
        self._fetching = False
        self._wanted = trio.Event()  # a lookup wants a fetch now
        self._round_done = trio.Event()  # the fetch under way (or the next one) has ended

    def __len__(self) -> int:
        return len(self._keys)

    def install(self, keys: KeySet, max_age: float | None) -> None:
        """Hold `keys` (fresh now, for cache_lifetime(max_age))."""
        previous = {k.jwk: k for k in self._keys}
        keys = tuple(previous.get(k.jwk, k) for k in keys)
        by_kid: dict[str, SigningKey] = {}
        fitting: dict[str, list[SigningKey]] = {}
        for key in keys:
            if key.kid is not None:
                by_kid.setdefault(key.kid, key)  # a kid names one key: the first
            for alg in key.by_alg:
                fitting.setdefault(alg, []).append(key)
        self._keys, self._held, self._by_kid = keys, frozenset(keys), by_kid
        self._sole_by_alg = {alg: ks[0] for alg, ks in fitting.items() if len(ks) == 1}
        self._refresh_at = trio.current_time() + cache_lifetime(max_age)

    def holds(self, key: SigningKey) -> bool:
        return key in self._held

    def named(self, kid: str) -> SigningKey | None:
        return self._by_kid.get(kid)

    def sole_for(self, alg: str) -> SigningKey | None:
        """The key for a token without a kid: the one key that verifies `alg`, if only one
        does (the way a single-key issuer is used); None otherwise."""
        return self._sole_by_alg.get(alg)

    async def find(self, kid: str) -> SigningKey | None:
        """The key `kid` names, refetching the set first if it is unknown (once per cooldown,
        shared by every request that misses meanwhile)."""
        key = self._by_kid.get(kid)
        if key is not None:
            return key
        if not self._fetching:
            now = trio.current_time()
            if now - self._last_miss_fetch < self.cooldown_s:
                return None
            self._last_miss_fetch = now
            self._fetching = True
            self._wanted.set()
        round_done = self._round_done
        with trio.move_on_after(FETCH_TIMEOUT_S + 1.0):  # the fetch has its own bound
            await round_done.wait()
        return self._by_kid.get(kid)

    async def run(self) -> None:
        """Refresh when the held set's lifetime ends, or at once when `find` asks; never
        returns (cancel it)."""
        while True:
            with trio.move_on_at(self._refresh_at):
                await self._wanted.wait()
            await self._refresh()

    async def _refresh(self) -> None:
        self._fetching = True
        round_done = self._round_done
        try:
            keys, max_age = await self._fetch()
        except IdpError as e:
            self._failures += 1
            retry_s = min(RETRY_MIN_S * 2 ** (self._failures - 1), RETRY_MAX_S)
            self._refresh_at = max(self._refresh_at, trio.current_time() + retry_s)
            log.warning(
                "signing keys not refreshed (%s); still using the %d held; next try in %gs",
                e,
                len(self._keys),
                self._refresh_at - trio.current_time(),
            )
        else:
            self._failures = 0
            kids_before = set(self._by_kid)
            self.install(keys, max_age)
            if set(self._by_kid) != kids_before:
                log.info("signing keys refreshed: %d held", len(self._keys))
        finally:
            self._fetching = False
            self._wanted = trio.Event()
            self._round_done = trio.Event()
            round_done.set()
