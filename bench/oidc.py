"""Microbenchmark: what verifying a bearer token costs the gateway (edgegw.auth.verifier).

    python -m bench.oidc [--count 2000] [--repeat 5]

For each algorithm, µs per `OidcVerifier.verify()`:
  cold    a token never seen (a fresh `jti` each): size check, SHA-256, header, key
          lookup, PyJWT's decode (signature and claims), the strict `exp`, the cache insert;
  cached  the same token again: size check, SHA-256, LRU hit, `exp` and key-held checks;
  pyjwt   `jwt.decode` alone on the same token, for reference.
Medians over `--repeat` runs of `--count` verifies, on one core, keys built in process
(no IdP, no network: the verifier's keys are installed directly).
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import time
import uuid
from typing import Any

import jwt
import trio
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from edgegw.auth.discovery import ACCEPTED_ALGORITHMS, Discovery
from edgegw.auth.keys import read_key_set
from edgegw.auth.verifier import LEEWAY_S, REQUIRED_CLAIMS, OidcVerifier
from edgegw.upstream import UpstreamPool

ISSUER = "https://idp.bench.invalid/realms/bench"
CLIENT_ID = "bench-client"


def _keys() -> dict[str, tuple[Any, dict[str, Any]]]:
    """alg -> (private key, public JWK)."""
    r = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    p256 = ec.generate_private_key(ec.SECP256R1())
    ed = ed25519.Ed25519PrivateKey.generate()
    rsa_jwk = RSAAlgorithm.to_jwk(r.public_key(), as_dict=True)
    return {
        "RS256": (r, {**rsa_jwk, "kid": "rs", "alg": "RS256"}),
        "PS256": (r, {**rsa_jwk, "kid": "ps", "alg": "PS256"}),
        "ES256": (p256, {**ECAlgorithm.to_jwk(p256.public_key(), as_dict=True), "kid": "es"}),
        "EdDSA": (ed, {**OKPAlgorithm.to_jwk(ed.public_key(), as_dict=True), "kid": "ed"}),
    }


def _token(private: Any, alg: str, kid: str) -> bytes:
    now = int(time.time())
    claims = {
        "iss": ISSUER,
        "aud": CLIENT_ID,
        "sub": "bench-user",
        "iat": now,
        "exp": now + 3600,
        "jti": uuid.uuid4().hex,
        "email": "bench@example.invalid",
        "groups": ["inference", "bench"],
    }
    return jwt.encode(claims, private, algorithm=alg, headers={"kid": kid}).encode()


def _median_us(runs: list[float], count: int) -> float:
    return statistics.median(runs) / count * 1e6


async def _measure(count: int, repeat: int) -> list[tuple[str, int, float, float, float]]:
    keys = _keys()
    verifier = OidcVerifier(ISSUER, CLIENT_ID, UpstreamPool())
    verifier.use(Discovery(ISSUER, "https://idp.bench.invalid/certs", ACCEPTED_ALGORITHMS))
    jwks = {"keys": [jwk for _, jwk in keys.values()]}
    verifier.keys.install(read_key_set(jwks, verifier.algorithms, "bench"), 3600)
    rows = []
    for alg, (private, jwk) in keys.items():
        cold_runs, hit_runs, raw_runs = [], [], []
        for _ in range(repeat):
            tokens = [_token(private, alg, jwk["kid"]) for _ in range(count)]
            t0 = time.perf_counter()
            for token in tokens:
                await verifier.verify(token)
            cold_runs.append(time.perf_counter() - t0)
            same = tokens[0]
            t0 = time.perf_counter()
            for _ in range(count):
                await verifier.verify(same)
            hit_runs.append(time.perf_counter() - t0)
            decode = functools.partial(
                jwt.decode,
                same,
                jwt.PyJWK(jwk, alg),
                algorithms=[alg],
                audience=CLIENT_ID,
                issuer=ISSUER,
                leeway=LEEWAY_S,
                options={"require": REQUIRED_CLAIMS},
            )
            t0 = time.perf_counter()
            for _ in range(count):
                decode()
            raw_runs.append(time.perf_counter() - t0)
        rows.append(
            (
                alg,
                len(tokens[0]),
                _median_us(cold_runs, count),
                _median_us(hit_runs, count),
                _median_us(raw_runs, count),
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.oidc", description=__doc__)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    rows = trio.run(_measure, args.count, args.repeat)
    print(
        f"{platform.python_implementation()} {platform.python_version()}, PyJWT {jwt.__version__},"
        f" {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; µs per verify, "
        f"median of {args.repeat} x {args.count}"
    )
    print(f"{'alg':7} {'bytes':>5} {'cold':>8} {'cached':>8} {'pyjwt':>8}")
    for alg, size, cold, hit, raw in rows:
        print(f"{alg:7} {size:5d} {cold:8.1f} {hit:8.1f} {raw:8.1f}")


if __name__ == "__main__":
    main()
