"""What edgegw reads from the identity provider, and the checks of what it reads.

Both documents come through edgegw's own async client (`edgegw.upstream.UpstreamPool`: http
on loopback, https anywhere else, certificates verified by the pool's TLS context), so
neither the start nor a key refresh ever blocks the event loop:

- the discovery document, `<issuer>/.well-known/openid-configuration`, read once at start
  (OpenID Connect Discovery 1.0 §4: a trailing "/" of the issuer is dropped before the
  suffix; the document's `issuer` must equal the configured one exactly, §4.3);
- the JWKS at its `jwks_uri`, at start and whenever the key cache wants it
  (edgegw.auth.keys), with the lifetime its Cache-Control gives.

Every problem is an `IdpError` whose message names the URL and what went wrong, never a key
or a token: it goes to the log, and at start to the operator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson
import trio

from edgegw.errors import GatewayError
from edgegw.settings import idp_url_problem
from edgegw.upstream import Origin, UpstreamPool

DISCOVERY_SUFFIX = "/.well-known/openid-configuration"
# Largest discovery document or JWKS read. Real ones are a few KiB (a JWKS carrying x5c
# certificate chains ~10 KiB); the bound keeps a broken IdP from making the gateway hold more.
MAX_DOCUMENT_BYTES = 256 * 1024
# One fetch, connect to last byte. The start waits for it, and so does at most one request
# per cooldown when it brings an unknown `kid`; go-oidc leaves this to its http.Client.
FETCH_TIMEOUT_S = 5.0
# What edgegw verifies: asymmetric JWS algorithms only (RFC 7518 §3.3-3.5, RFC 8037). No
# `none`, no HMAC: a resource server holds no shared secret, and accepting HS* beside public
# keys is the classic key-confusion hole. Intersected with the issuer's
# `id_token_signing_alg_values_supported` when the discovery document lists it.
ACCEPTED_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)

_HEADERS = ((b"accept", b"application/json"), (b"accept-encoding", b"identity"))


class IdpError(Exception):
    """The identity provider, or what it answered, cannot be used. The message is safe to
    log: a URL and a reason, no key material."""


@dataclass(frozen=True, slots=True)
class Discovery:
    issuer: str
    jwks_uri: str
    # ACCEPTED_ALGORITHMS, narrowed to what the issuer says it signs with.
    algorithms: frozenset[str]


def discovery_url(issuer: str) -> str:
    return issuer.rstrip("/") + DISCOVERY_SUFFIX


async def discover(pool: UpstreamPool, issuer: str) -> Discovery:
    doc, _ = await get_json(pool, discovery_url(issuer))
    return read_discovery(doc, issuer)


def read_discovery(doc: Any, issuer: str) -> Discovery:
    """The parts of a discovery document edgegw uses, checked."""
    where = discovery_url(issuer)
    if not isinstance(doc, dict):
        raise IdpError(f"{where}: not a JSON object")
    if doc.get("issuer") != issuer:
        raise IdpError(
            f"{where}: its 'issuer' is not exactly the configured issuer "
            "(a trailing '/' counts; copy the value from the document)"
        )
    jwks_uri = doc.get("jwks_uri")
    if not isinstance(jwks_uri, str):
        raise IdpError(f"{where}: no 'jwks_uri'")
    if problem := idp_url_problem(jwks_uri):
        raise IdpError(f"{where}: 'jwks_uri' {problem}")
    algorithms = ACCEPTED_ALGORITHMS
    listed = doc.get("id_token_signing_alg_values_supported")
    if isinstance(listed, list):
        algorithms = ACCEPTED_ALGORITHMS & {a for a in listed if isinstance(a, str)}
        if not algorithms:
            raise IdpError(
                f"{where}: the issuer signs with none of the algorithms edgegw accepts "
                f"({', '.join(sorted(ACCEPTED_ALGORITHMS))})"
            )
    return Discovery(issuer, jwks_uri, frozenset(algorithms))


async def fetch_jwks(pool: UpstreamPool, jwks_uri: str) -> tuple[Any, float | None]:
    """(the JWKS document, the max-age its Cache-Control gives, if any)."""
    doc, cache_control = await get_json(pool, jwks_uri)
    return doc, max_age_of(cache_control)


def max_age_of(cache_control: bytes | None) -> float | None:
    """Seconds of freshness a Cache-Control value grants (RFC 9111 §5.2.2): `max-age=N`;
    0 for `no-store` / `no-cache` (the key cache then uses its lower bound); None when it
    says nothing about freshness."""
    if not cache_control:
        return None
    found: float | None = None
    for directive in cache_control.split(b","):
        name, _, value = directive.partition(b"=")
        name = name.strip().lower()
        if name in (b"no-store", b"no-cache"):
            return 0.0
        if name == b"max-age":
            value = value.strip().strip(b'"')
            if value.isdigit():
                found = float(value)
    return found


async def get_json(pool: UpstreamPool, url: str) -> tuple[Any, bytes | None]:
    """GET `url` → (its JSON document, its Cache-Control value), within FETCH_TIMEOUT_S and
    MAX_DOCUMENT_BYTES; anything else is an IdpError."""
    try:
        origin = Origin.from_url(url)
    except ValueError:
        raise IdpError(f"{url}: not an http(s) URL") from None
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        with trio.fail_after(FETCH_TIMEOUT_S):
            resp = await pool.send(origin, b"GET", target.encode(), _HEADERS)
            try:
                body = await resp.read(MAX_DOCUMENT_BYTES)
            finally:
                await resp.aclose()
    except trio.TooSlowError:
        raise IdpError(f"{url}: no answer within {FETCH_TIMEOUT_S:g}s") from None
    except GatewayError as e:
        raise IdpError(f"{url}: {e.message}") from None
    if resp.status != 200:
        raise IdpError(f"{url}: answered HTTP {resp.status}")
    encoding = resp.header(b"content-encoding")
    if encoding not in (None, b"identity"):
        raise IdpError(f"{url}: answered with a content-encoding although asked for identity")
    try:
        return orjson.loads(body), resp.header(b"cache-control")
    except orjson.JSONDecodeError:
        raise IdpError(f"{url}: the answer is not JSON") from None
