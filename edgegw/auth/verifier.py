"""OIDC bearer tokens: `OidcVerifier.run` (discovery and keys, started by `serve()`) and
`OidcVerifier.verify` (one token, for the app's authentication step).

The JOSE library is PyJWT (`pyjwt[crypto]`, its crypto from `cryptography`, which the
tests already used through trustme). Chosen over joserfc as the most deployed Python JWT
library, maintained with quick security releases (2.10.1 fixed a partial `iss` match that
2.10.0 had brought in), doing the registered-claim checks itself (`require`, exact `iss`,
`aud` membership, leeway), binding a `PyJWK` to one algorithm, and typed. joserfc was a
little faster per verify (bench/README.md); both are dominated by pure-Python parsing, and
the cache below makes the difference moot. PyJWT's own JWKS client is blocking (urllib) and is not
used: the keys come through edgegw.auth.discovery and edgegw.auth.keys.

A token is checked in this order, each refusal a 401 with `WWW-Authenticate: Bearer`:
  1. size: at most MAX_TOKEN_BYTES, before any parsing;
  2. the verified-token cache (below): a hit ends here;
  3. compact form (three base64url segments) and the header: `alg` in the accepted set
     (asymmetric only, edgegw.auth.discovery.ACCEPTED_ALGORITHMS, narrowed by the
     discovery document), no `crit`;
  4. the key: by `kid` (an unknown one refetches the JWKS, at most once per cooldown,
     edgegw.auth.keys), or without a kid the one key fitting `alg`; the key's own JWK `alg`
     and type must fit the token's `alg` (so no key confusion: a public key is never an
     HMAC secret);
  5. PyJWT: the signature, `exp`/`iss`/`aud` required, `iss` exact, `aud` containing
     AUTH_OIDC_CLIENT_ID, `nbf`/`iat` with LEEWAY_S; `exp` then once more with no leeway.

Codes (stable): `missing_token`, `invalid_token`, `token_expired`, `token_not_yet_valid`.
The message says which check failed, in edgegw's words: PyJWT's own messages (which can
quote the key) never reach a client or the log, and neither does the token.

A full verify costs about as much as everything else edgegw adds to a proxied request (most
of it PyJWT's base64url screening; the figures per algorithm: bench/README.md, "Figures behind the code").
Hence the verified-token cache: an LRU of TOKEN_CACHE_SIZE entries keyed by the SHA-256 of
the token, each valid until the token's `exp` (never past it) and only while the key that
verified it is still in the issuer's set; a hit costs a hash and a lookup. Refused tokens are not
cached (a garbage token costs at most a header parse; one that parses costs a cold verify).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import re
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import jwt
import orjson
import trio

from edgegw.auth.discovery import (
    ACCEPTED_ALGORITHMS,
    Discovery,
    IdpError,
    discover,
    fetch_jwks,
)
from edgegw.auth.keys import KeySet, SigningKey, SigningKeys, read_key_set
from edgegw.errors import GatewayError, fail
from edgegw.settings import Settings, SettingsError
from edgegw.upstream import UpstreamPool

log = logging.getLogger("edgegw.auth")

# Largest token read: ID tokens are ~1 KiB, access tokens with many groups a few KiB;
# nginx's default large_client_header_buffers is 8 KiB for one header line.
MAX_TOKEN_BYTES = 8 * 1024
# Clock skew allowed for `nbf` and `iat` (go-oidc allows 5 min for `nbf`); `exp` gets none.
LEEWAY_S = 60.0
# Verified tokens remembered: ~1 KiB each with their claims, so ~4 MiB at most.
TOKEN_CACHE_SIZE = 4096
REQUIRED_CLAIMS = ["exp", "iss", "aud"]

_COMPACT = re.compile(rb"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


class OidcStartError(SettingsError):
    """The issuer cannot be used at start: the gateway does not serve (never fails open)."""


@dataclass(frozen=True, slots=True)
class _Verified:
    exp: float
    key: SigningKey
    claims: dict[str, Any]


def looks_like_jwt(value: bytes | None) -> bool:
    """A JWS in compact form has three segments; a client API key (almost always) not."""
    return value is not None and value.count(b".") == 2


def missing_token() -> GatewayError:
    # RFC 6750 §3.1: no error attribute when the request carried no credentials.
    return fail(
        "missing_token",
        "A bearer token is required: send 'Authorization: Bearer <token>'.",
        headers=((b"www-authenticate", b"Bearer"),),
    )


def refused(code: str, message: str) -> GatewayError:
    """401 for a token that was sent but is not accepted; `message` is edgegw's own text."""
    header = b'Bearer error="invalid_token", error_description="%s"' % message.encode()
    return fail(code, message, headers=((b"www-authenticate", header),))


class OidcVerifier:
    """Verifies bearer tokens of one issuer for one audience. Built unstarted; `run()`
    reads the issuer (or fails the start) and then keeps its keys fresh."""

    # The request-path helpers, reachable through the verifier so that the app need not
    # import this module (and PyJWT) when AUTH_ENABLED is off.
    looks_like_jwt = staticmethod(looks_like_jwt)
    missing_token = staticmethod(missing_token)

    def __init__(self, issuer: str, client_id: str, pool: UpstreamPool) -> None:
        self.issuer = issuer
        self.client_id = client_id
        self._pool = pool
        self.algorithms = ACCEPTED_ALGORITHMS
        self.jwks_uri: str | None = None
        self.keys = SigningKeys(self._fetch_keys)
        self._verified: OrderedDict[bytes, _Verified] = OrderedDict()

    @classmethod
    def from_settings(cls, settings: Settings, pool: UpstreamPool) -> OidcVerifier:
        assert settings.auth_oidc_issuer and settings.auth_oidc_client_id  # Settings checks
        return cls(settings.auth_oidc_issuer, settings.auth_oidc_client_id, pool)

    def use(self, found: Discovery) -> None:
        """Take the issuer's discovery document (done by `run`; the bench calls it)."""
        self.algorithms = found.algorithms
        self.jwks_uri = found.jwks_uri

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read the discovery document and the keys, then started(); then refresh the keys
        until cancelled. An issuer that cannot be read raises OidcStartError, naming
        AUTH_OIDC_ISSUER, before started()."""
        try:
            self.use(await discover(self._pool, self.issuer))
            keys, max_age = await self._fetch_keys()
        except IdpError as e:
            message = f"AUTH_OIDC_ISSUER: cannot use the issuer: {e}"
            log.error("%s", message)
            raise OidcStartError(message) from None
        self.keys.install(keys, max_age)
        log.info(
            "OIDC issuer %s: %d signing key(s), algorithms %s, audience %s",
            self.issuer,
            len(keys),
            ",".join(sorted(self.algorithms)),
            self.client_id,
        )
        task_status.started()
        await self.keys.run()

    async def _fetch_keys(self) -> tuple[KeySet, float | None]:
        assert self.jwks_uri is not None
        doc, max_age = await fetch_jwks(self._pool, self.jwks_uri)
        return read_key_set(doc, self.algorithms, self.jwks_uri), max_age

    async def verify(self, token: bytes) -> dict[str, Any]:
        """The claims of a valid token; otherwise raises the 401 to answer."""
        if len(token) > MAX_TOKEN_BYTES:
            raise refused("invalid_token", f"The token is longer than {MAX_TOKEN_BYTES} bytes.")
        digest = hashlib.sha256(token).digest()
        hit = self._verified.get(digest)
        if hit is not None:
            if hit.exp > time.time() and self.keys.holds(hit.key):
                self._verified.move_to_end(digest)
                return hit.claims
            del self._verified[digest]
        header = _read_header(token)
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self.algorithms:
            raise refused("invalid_token", "The token's algorithm is not accepted.")
        if "crit" in header:
            raise refused("invalid_token", "The token has critical header parameters.")
        kid = header.get("kid")
        if kid is None:
            key = self.keys.sole_for(alg)
            if key is None:
                raise refused("invalid_token", "The token names no key (kid).")
        elif not isinstance(kid, str):
            raise refused("invalid_token", "The token is malformed.")
        else:
            key = self.keys.named(kid) or await self.keys.find(kid)
            if key is None:
                raise refused(
                    "invalid_token", "The token is signed with a key the issuer does not publish."
                )
        pyjwk = key.by_alg.get(alg)
        if pyjwk is None:
            raise refused("invalid_token", "The token's algorithm does not fit its key.")
        claims = self._decode(token, pyjwk, alg)
        exp = claims["exp"]
        if isinstance(exp, bool) or not isinstance(exp, int | float):
            raise refused("invalid_token", "The token's 'exp' is not a number.")
        if exp <= time.time():
            raise refused("token_expired", "The token has expired.")
        self._verified[digest] = _Verified(float(exp), key, claims)
        if len(self._verified) > TOKEN_CACHE_SIZE:
            self._verified.popitem(last=False)
        return claims

    def _decode(self, token: bytes, key: jwt.PyJWK, alg: str) -> dict[str, Any]:
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=self.client_id,
                issuer=self.issuer,
                leeway=LEEWAY_S,
                options={"require": REQUIRED_CLAIMS},
            )
            return claims
        except jwt.PyJWTError as e:
            code, message = _refusal(e)
        except Exception as e:  # a library fault on hostile input: refuse, never 500
            log.warning("token check failed unexpectedly (%s); refused", type(e).__name__)
            code, message = "invalid_token", "The token could not be verified."
        log.debug("token refused: %s", code)
        raise refused(code, message)


def _read_header(token: bytes) -> dict[str, Any]:
    if _COMPACT.fullmatch(token) is None:
        raise refused("invalid_token", "The token is malformed.")
    segment = token.partition(b".")[0]
    try:
        header = orjson.loads(base64.urlsafe_b64decode(segment + b"=" * (-len(segment) % 4)))
    except (ValueError, binascii.Error):  # orjson.JSONDecodeError is a ValueError
        raise refused("invalid_token", "The token is malformed.") from None
    if not isinstance(header, dict):
        raise refused("invalid_token", "The token is malformed.")
    return header


def _refusal(e: jwt.PyJWTError) -> tuple[str, str]:
    """(code, message) for what PyJWT refused; the message never quotes PyJWT's."""
    if isinstance(e, jwt.ExpiredSignatureError):
        return "token_expired", "The token has expired."
    if isinstance(e, jwt.ImmatureSignatureError):
        return "token_not_yet_valid", "The token is not valid yet (nbf or iat)."
    if isinstance(e, jwt.MissingRequiredClaimError):
        return "invalid_token", f"The token lacks the '{e.claim}' claim."
    if isinstance(e, jwt.InvalidIssuerError):
        return "invalid_token", "The token's issuer is not the configured one."
    if isinstance(e, jwt.InvalidAudienceError):
        return "invalid_token", "The token's audience does not include this gateway."
    if isinstance(e, jwt.InvalidSignatureError):
        return "invalid_token", "The token's signature is invalid."
    if isinstance(e, jwt.InvalidAlgorithmError):
        return "invalid_token", "The token's algorithm is not accepted."
    return "invalid_token", "The token is malformed."
