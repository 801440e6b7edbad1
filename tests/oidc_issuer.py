"""A real OIDC issuer for the tests, on loopback: the discovery document and the JWKS served
by edgegw.plainhttp.Server, RSA / EC / Ed25519 keys, tokens signed with PyJWT (the library
the gateway verifies with), and hand-made tokens for what PyJWT refuses to sign (`none`, HS256
keyed with a public key).

    issuer = Issuer()
    await nursery.start(issuer.serve)
    key = issuer.add_key("RS256")             # published in the JWKS at once
    token = issuer.token(key, aud="other")    # valid claims, with overrides
    issuer.stop()                             # the IdP goes away (connections refused)

Scripting: `jwks_status` (answer the JWKS with this status), `cache_control` (the JWKS
answer's header), `discovery` (fields merged into, or with None removed from, the discovery
document). `jwks_requests` / `discovery_requests` count what was asked;
`await wait_jwks_requests(n)` waits until n JWKS requests were answered.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
import time
from dataclasses import dataclass
from functools import cache
from typing import Any

import jwt
import trio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from edgegw.plainhttp import Request, Responder, Server

CLIENT_ID = "edgegw-tests"
REALM_PATH = "/realms/test"

_kids = itertools.count(1)


@cache
def _private_key(kind: str, index: int) -> Any:
    """Keys are made once per session (a 2048-bit RSA key takes ~0.1 s)."""
    if kind == "RSA":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if kind == "P-256":
        return ec.generate_private_key(ec.SECP256R1())
    if kind == "P-384":
        return ec.generate_private_key(ec.SECP384R1())
    if kind == "Ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    raise ValueError(kind)


_KIND = {"ES256": "P-256", "ES384": "P-384", "EdDSA": "Ed25519"}


@dataclass
class IssuerKey:
    kid: str
    alg: str
    private: Any

    @property
    def public_jwk(self) -> dict[str, Any]:
        public = self.private.public_key()
        if self.alg.startswith(("RS", "PS")):
            jwk = RSAAlgorithm.to_jwk(public, as_dict=True)
        elif self.alg.startswith("ES"):
            jwk = ECAlgorithm.to_jwk(public, as_dict=True)
        else:
            jwk = OKPAlgorithm.to_jwk(public, as_dict=True)
        return {**jwk, "kid": self.kid, "use": "sig", "alg": self.alg}

    @property
    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forge(header: dict[str, Any], claims: dict[str, Any], signature: bytes = b"") -> str:
    """A compact JWS with any header and signature, for what no library would sign."""
    return ".".join(
        (b64(json.dumps(header).encode()), b64(json.dumps(claims).encode()), b64(signature))
    )


def hs256_with(secret: bytes, header: dict[str, Any], claims: dict[str, Any]) -> str:
    """HS256 keyed with `secret` (the key-confusion attack: secret = the issuer's public key)."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(mac)}"


class Issuer:
    def __init__(self) -> None:
        self._server = Server("issuer", self._handle)
        self.keys: list[IssuerKey] = []  # published in the JWKS
        self.jwks_status = 200
        self.cache_control: str | None = None
        self.discovery: dict[str, Any] = {}
        self.jwks_requests = 0
        self.discovery_requests = 0
        self._answered = trio.Event()
        self._scope = trio.CancelScope()

    @property
    def url(self) -> str:
        """The issuer identifier (and the base of its documents)."""
        return f"http://127.0.0.1:{self._server.port}{REALM_PATH}"

    def env(self, **extra: str) -> dict[str, str]:
        """The gateway's settings for this issuer."""
        return {
            "AUTH_ENABLED": "true",
            "AUTH_OIDC_ISSUER": self.url,
            "AUTH_OIDC_CLIENT_ID": CLIENT_ID,
            **extra,
        }

    def add_key(self, alg: str = "RS256", *, index: int | None = None) -> IssuerKey:
        kind = "RSA" if alg.startswith(("RS", "PS")) else _KIND[alg]
        kid = f"key-{next(_kids)}"
        key = IssuerKey(kid, alg, _private_key(kind, len(self.keys) if index is None else index))
        self.keys.append(key)
        return key

    def claims(self, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims = {
            "iss": self.url,
            "aud": CLIENT_ID,
            "sub": "user-1",
            "iat": now,
            "exp": now + 300,
            "email": "user@example.test",
        }
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not None}

    def token(
        self,
        key: IssuerKey,
        *,
        headers: dict[str, Any] | None = None,
        kid: str | None = "",
        **overrides: Any,
    ) -> str:
        """A token signed by `key`; `kid=None` leaves the kid out, a string replaces it."""
        header = {"kid": key.kid if kid == "" else kid, **(headers or {})}
        if header["kid"] is None:
            del header["kid"]
        return jwt.encode(self.claims(**overrides), key.private, algorithm=key.alg, headers=header)

    # -- serving ----------------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        with self._scope:
            await self._server.serve_tcp("127.0.0.1", 0, task_status=task_status)

    def stop(self) -> None:
        self._scope.cancel()

    async def wait_jwks_requests(self, count: int) -> None:
        while self.jwks_requests < count:
            await self._answered.wait()

    async def _handle(self, request: Request, responder: Responder) -> None:
        json_type = (b"content-type", b"application/json")
        if request.path == REALM_PATH + "/.well-known/openid-configuration":
            self.discovery_requests += 1
            doc: dict[str, Any] = {
                "issuer": self.url,
                "jwks_uri": self.url + "/protocol/openid-connect/certs",
                "id_token_signing_alg_values_supported": ["RS256", "PS256", "ES256", "EdDSA"],
                "response_types_supported": ["code"],
            }
            doc.update(self.discovery)
            doc = {k: v for k, v in doc.items() if v is not None}
            await responder.send(200, [json_type], json.dumps(doc).encode())
        elif request.path == REALM_PATH + "/protocol/openid-connect/certs":
            self.jwks_requests += 1
            headers = [json_type]
            if self.cache_control is not None:
                headers.append((b"cache-control", self.cache_control.encode()))
            body = json.dumps({"keys": [k.public_jwk for k in self.keys]}).encode()
            if self.jwks_status != 200:
                body = b'{"error":"unavailable"}'
            await responder.send(self.jwks_status, headers, body)
            self._answered.set()
            self._answered = trio.Event()
        else:
            await responder.send(404, [json_type], b'{"error":"not found"}')
