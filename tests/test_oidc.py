"""OIDC bearer tokens end to end: the real gateway (AUTH_ENABLED=true) in front of the mock
upstream, and a real issuer on loopback (tests/oidc_issuer.py) serving discovery and JWKS,
its tokens signed with PyJWT.

Key-cache timing (lifetimes, the unknown-kid cooldown, retries) runs on trio's MockClock
without autojump: virtual time moves only when a test jumps it, so no deadline fires while
loopback I/O is in flight and nothing waits in wall time. Token times (`exp`, `nbf`) are
wall-clock; the one test about a cached token's `exp` waits about a second for it."""

from __future__ import annotations

import gc
import logging
import time
import uuid
from collections.abc import Iterator

import orjson
import pytest
import trio
import trio.testing

from edgegw.auth.discovery import max_age_of
from edgegw.auth.keys import (
    DEFAULT_KEYS_TTL_S,
    KEYS_MAX_TTL_S,
    KEYS_MIN_TTL_S,
    MISS_COOLDOWN_S,
    RETRY_MIN_S,
    cache_lifetime,
)
from edgegw.auth.verifier import LEEWAY_S, MAX_TOKEN_BYTES
from edgegw.mock import MockUpstream

from .conftest import UPSTREAM_KEY, Gateway, start_gateway, upstream_env
from .oidc_issuer import CLIENT_ID, Issuer, IssuerKey, forge, hs256_with
from .rawhttp import RawResponse, request

CHAT = orjson.dumps({"model": "openai/mock-small", "messages": [{"role": "user", "content": "hi"}]})
TELEMETRY = {"TELEMETRY_ENABLED": "true", "TELEMETRY_METRICS_PUSH_ENABLED": "true"}


@pytest.fixture(autouse=True)
def _collect_leaks() -> Iterator[None]:
    yield
    gc.collect()  # a leaked socket's ResourceWarning fails the test that leaked it


@pytest.fixture
async def issuer(nursery: trio.Nursery) -> Issuer:
    issuer = Issuer()
    await nursery.start(issuer.serve)
    issuer.add_key("RS256")
    return issuer


@pytest.fixture
async def gw(nursery: trio.Nursery, mock: MockUpstream, issuer: Issuer) -> Gateway:
    return await start_gateway(nursery, upstream_env(mock, **issuer.env(**TELEMETRY)))


def bearer(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


async def chat(gw: Gateway, headers: list[tuple[str, str]] | None = None) -> RawResponse:
    return await request(gw.port, "POST", "/v1/chat/completions", CHAT, headers)


def assert_refused(resp: RawResponse, code: str, case: str = "") -> None:
    assert resp.status == 401, (case, resp.status, resp.body)
    assert orjson.loads(resp.body) == {
        "error": {
            "message": orjson.loads(resp.body)["error"]["message"],
            "type": "authentication_error",
            "param": None,
            "code": code,
        }
    }, case
    challenge = resp.headers[b"www-authenticate"]
    if code == "missing_token":
        assert challenge == b"Bearer", case
    else:
        assert challenge.startswith(b'Bearer error="invalid_token", error_description="'), case


def random_kid_token(issuer: Issuer) -> str:
    return issuer.token(issuer.keys[0], kid=uuid.uuid4().hex)


# -- admitted -------------------------------------------------------------------------------


@pytest.mark.parametrize("alg", ["RS256", "PS256", "ES256", "EdDSA"])
async def test_a_valid_token_opens_every_route(
    nursery: trio.Nursery, mock: MockUpstream, alg: str
) -> None:
    issuer = Issuer()
    await nursery.start(issuer.serve)
    key = issuer.add_key(alg)
    gw = await start_gateway(nursery, upstream_env(mock, **issuer.env(**TELEMETRY)))
    auth = bearer(issuer.token(key))
    assert (await chat(gw, auth)).status == 200
    # The client's token never goes upstream; the provider's key does.
    assert mock.requests[-1].headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert (await request(gw.port, "GET", "/v1/models", headers=auth)).status == 200
    assert (await request(gw.port, "GET", "/proxy/openai/models", headers=auth)).status == 200
    push = await request(gw.port, "POST", "/v1/metrics", b'{"resourceMetrics": []}', auth)
    assert push.status == 200
    for path, method in (("/v1/models", "GET"), ("/proxy/openai/models", "GET")):
        assert_refused(await request(gw.port, method, path), "missing_token", path)
    assert_refused(
        await request(gw.port, "POST", "/v1/metrics", b'{"resourceMetrics": []}'), "missing_token"
    )


async def test_health_stays_open(gw: Gateway) -> None:
    resp = await request(gw.port, "GET", "/health")
    assert resp.status == 200 and resp.body == b'{"message":"OK"}'


async def test_accepted_claims_and_forms(gw: Gateway, issuer: Issuer) -> None:
    key = issuer.keys[0]
    now = int(time.time())
    accepted = {
        "aud among several": issuer.token(key, aud=["another-client", CLIENT_ID]),
        "nbf within the leeway": issuer.token(key, nbf=now + int(LEEWAY_S) - 20),
        "iat within the leeway": issuer.token(key, iat=now + int(LEEWAY_S) - 20),
        "no iat": issuer.token(key, iat=None),
        "no kid, one key": issuer.token(key, kid=None),
    }
    for case, token in accepted.items():
        assert (await chat(gw, bearer(token))).status == 200, case
    # The scheme is case-insensitive (RFC 9110 §11.1).
    assert (await chat(gw, [("authorization", f"bearer {issuer.token(key)}")])).status == 200


# -- refused --------------------------------------------------------------------------------


async def test_refused_tokens(gw: Gateway, issuer: Issuer) -> None:
    key = issuer.keys[0]
    stranger = IssuerKey("not-published", "RS256", issuer.add_key("RS256").private)
    issuer.keys.pop()  # made, not published
    claims = issuer.claims()
    now = int(time.time())
    good = issuer.token(key)
    head, payload, signature = good.split(".")
    other_payload = issuer.token(key, sub="admin").split(".")[1]
    cases: list[tuple[str, list[tuple[str, str]], str]] = [
        ("no Authorization", [], "missing_token"),
        ("another scheme", [("authorization", f"Basic {good}")], "missing_token"),
        ("a bare scheme", [("authorization", "Bearer")], "missing_token"),
        ("an x-api-key only", [("x-api-key", good)], "missing_token"),
        ("not a JWT", bearer("not-a-jwt"), "invalid_token"),
        ("garbage segments", bearer("a.b.c"), "invalid_token"),
        ("a header that is not an object", bearer("WzFd.e30.c2ln"), "invalid_token"),  # [1]
        ("expired, just", bearer(issuer.token(key, exp=now - 2)), "token_expired"),
        ("expired long ago", bearer(issuer.token(key, exp=now - 3600)), "token_expired"),
        ("nbf ahead", bearer(issuer.token(key, nbf=now + 600)), "token_not_yet_valid"),
        ("iat ahead", bearer(issuer.token(key, iat=now + 600)), "token_not_yet_valid"),
        ("no exp", bearer(issuer.token(key, exp=None)), "invalid_token"),
        ("exp not a number", bearer(issuer.token(key, exp="soon")), "invalid_token"),
        (
            "wrong issuer",
            bearer(issuer.token(key, iss="http://127.0.0.1:1/other")),
            "invalid_token",
        ),
        (
            "issuer with a '/' more",
            bearer(issuer.token(key, iss=issuer.url + "/")),
            "invalid_token",
        ),
        ("issuer prefix", bearer(issuer.token(key, iss=issuer.url[:-1])), "invalid_token"),
        ("no issuer", bearer(issuer.token(key, iss=None)), "invalid_token"),
        ("wrong audience", bearer(issuer.token(key, aud="another-client")), "invalid_token"),
        ("audience prefix", bearer(issuer.token(key, aud=CLIENT_ID[:-1])), "invalid_token"),
        ("no audience", bearer(issuer.token(key, aud=None)), "invalid_token"),
        ("alg none", bearer(forge({"alg": "none", "kid": key.kid}, claims)), "invalid_token"),
        (
            "alg none with a signature",
            bearer(forge({"alg": "none", "kid": key.kid}, claims, b"x")),
            "invalid_token",
        ),
        (
            "HS256 keyed with the public key (PEM)",
            bearer(hs256_with(key.public_pem, {"alg": "HS256", "kid": key.kid}, claims)),
            "invalid_token",
        ),
        (
            "HS256 keyed with the public key, no kid",
            bearer(hs256_with(key.public_pem, {"alg": "HS256"}, claims)),
            "invalid_token",
        ),
        (
            "RS256 signature presented as PS256",
            bearer(
                f"{forge({'alg': 'PS256', 'kid': key.kid}, claims).split('.')[0]}.{payload}.{signature}"
            ),
            "invalid_token",
        ),
        ("an unknown kid", bearer(issuer.token(stranger)), "invalid_token"),
        ("a known kid, another key", bearer(issuer.token(stranger, kid=key.kid)), "invalid_token"),
        ("a changed payload", bearer(f"{head}.{other_payload}.{signature}"), "invalid_token"),
        ("a changed signature", bearer(f"{head}.{payload}.{signature[:-4]}AAAA"), "invalid_token"),
        (
            "a critical header",
            bearer(issuer.token(key, headers={"crit": ["exp"]})),
            "invalid_token",
        ),
        (
            "oversized",
            bearer(issuer.token(key, padding="x" * MAX_TOKEN_BYTES)),
            "invalid_token",
        ),
    ]
    for case, headers, code in cases:
        resp = await chat(gw, headers)
        assert_refused(resp, code, case)
        token = headers[0][1].partition(" ")[2] if headers else ""
        assert not token or token.encode() not in resp.body, case
    # One JWKS fetch at start, one for the unknown kid: the rest never reached the IdP.
    assert issuer.jwks_requests == 2


async def test_a_token_without_kid_needs_a_single_fitting_key(
    nursery: trio.Nursery, mock: MockUpstream, issuer: Issuer
) -> None:
    second = issuer.add_key("RS256")
    gw = await start_gateway(nursery, upstream_env(mock, **issuer.env()))
    assert_refused(await chat(gw, bearer(issuer.token(second, kid=None))), "invalid_token")
    assert (await chat(gw, bearer(issuer.token(second)))).status == 200


async def test_api_keys_and_tokens_are_both_accepted(
    nursery: trio.Nursery, mock: MockUpstream, issuer: Issuer
) -> None:
    gw = await start_gateway(
        nursery, upstream_env(mock, **issuer.env(EDGEGW_API_KEYS="client-key-1"))
    )
    key = issuer.keys[0]
    assert (await chat(gw, bearer("client-key-1"))).status == 200
    assert (await chat(gw, [("x-api-key", "client-key-1")])).status == 200
    assert (await chat(gw, bearer(issuer.token(key)))).status == 200
    assert_refused(await chat(gw), "missing_token")
    resp = await chat(gw, bearer("client-key-2"))
    assert resp.status == 401 and orjson.loads(resp.body)["error"]["code"] == "invalid_api_key"
    resp = await chat(gw, [("x-api-key", "client-key-2")])
    assert resp.status == 401 and orjson.loads(resp.body)["error"]["code"] == "invalid_api_key"
    expired = issuer.token(key, exp=int(time.time()) - 10)
    assert_refused(await chat(gw, bearer(expired)), "token_expired")


# -- keys: rotation, outage, flood ----------------------------------------------------------


async def test_a_rotated_key_is_fetched_once(gw: Gateway, issuer: Issuer) -> None:
    old = issuer.keys[0]
    assert (await chat(gw, bearer(issuer.token(old)))).status == 200
    assert issuer.jwks_requests == 1 and issuer.discovery_requests == 1
    new = issuer.add_key("ES256")
    assert (await chat(gw, bearer(issuer.token(new)))).status == 200
    assert issuer.jwks_requests == 2
    for _ in range(3):
        assert (await chat(gw, bearer(issuer.token(new, sub="user-2")))).status == 200
    assert (await chat(gw, bearer(issuer.token(old, sub="user-3")))).status == 200
    assert issuer.jwks_requests == 2 and issuer.discovery_requests == 1


async def test_keys_held_while_the_idp_is_down(gw: Gateway, issuer: Issuer) -> None:
    key = issuer.keys[0]
    assert (await chat(gw, bearer(issuer.token(key)))).status == 200
    issuer.stop()
    # A token never seen before: verified with the held key.
    assert (await chat(gw, bearer(issuer.token(key, sub="user-2")))).status == 200
    # An unknown kid: the refetch is refused by the closed port at once; 401, not 500.
    assert_refused(await chat(gw, bearer(random_kid_token(issuer))), "invalid_token")
    assert (await chat(gw, bearer(issuer.token(key, sub="user-3")))).status == 200


async def test_random_kids_cost_one_jwks_fetch_per_cooldown(
    mock_clock: trio.testing.MockClock, nursery: trio.Nursery, gw: Gateway, issuer: Issuer
) -> None:
    async def flood(n: int) -> None:
        results: list[RawResponse] = []

        async def one() -> None:
            results.append(await chat(gw, bearer(random_kid_token(issuer))))

        async with trio.open_nursery() as inner:
            for _ in range(n):
                inner.start_soon(one)
        for resp in results:
            assert_refused(resp, "invalid_token")

    assert issuer.jwks_requests == 1
    await flood(40)  # concurrent misses share one fetch
    assert issuer.jwks_requests == 2
    await flood(20)  # within the cooldown: none
    assert issuer.jwks_requests == 2
    mock_clock.jump(MISS_COOLDOWN_S - 1)
    await flood(20)
    assert issuer.jwks_requests == 2
    mock_clock.jump(2)
    await flood(40)
    assert issuer.jwks_requests == 3
    assert (await chat(gw, bearer(issuer.token(issuer.keys[0])))).status == 200


@pytest.mark.parametrize(
    ("cache_control", "lifetime_s"),
    [("max-age=600", 600.0), ("public, max-age=1", KEYS_MIN_TTL_S), (None, DEFAULT_KEYS_TTL_S)],
)
async def test_keys_live_as_long_as_cache_control_says(
    mock_clock: trio.testing.MockClock,
    nursery: trio.Nursery,
    mock: MockUpstream,
    issuer: Issuer,
    cache_control: str | None,
    lifetime_s: float,
) -> None:
    issuer.cache_control = cache_control
    gw = await start_gateway(nursery, upstream_env(mock, **issuer.env()))
    old = issuer.keys[0]
    cached = issuer.token(old)
    assert (await chat(gw, bearer(cached))).status == 200
    mock_clock.jump(lifetime_s - 1)
    await trio.testing.wait_all_tasks_blocked()
    assert issuer.jwks_requests == 1
    # Rotation without any unknown kid: the old key leaves the set at the refresh ...
    new = issuer.add_key("RS256")
    issuer.keys.remove(old)
    mock_clock.jump(2)
    await issuer.wait_jwks_requests(2)
    await trio.testing.wait_all_tasks_blocked()
    # ... and so does every token it verified, cached or not (its kid is now unknown: one
    # refetch, the first of the cooldown, confirms it).
    assert (await chat(gw, bearer(issuer.token(new)))).status == 200
    assert issuer.jwks_requests == 2
    assert_refused(await chat(gw, bearer(cached)), "invalid_token")
    assert issuer.jwks_requests == 3


async def test_a_failed_refresh_keeps_the_keys_and_retries(
    mock_clock: trio.testing.MockClock,
    nursery: trio.Nursery,
    mock: MockUpstream,
    issuer: Issuer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    issuer.cache_control = "max-age=300"
    gw = await start_gateway(nursery, upstream_env(mock, **issuer.env()))
    key = issuer.keys[0]
    issuer.jwks_status = 503
    mock_clock.jump(301)
    await issuer.wait_jwks_requests(2)
    await trio.testing.wait_all_tasks_blocked()
    assert "signing keys not refreshed" in caplog.text
    assert (await chat(gw, bearer(issuer.token(key, sub="user-2")))).status == 200
    issuer.jwks_status = 200
    new = issuer.add_key("ES256")
    mock_clock.jump(RETRY_MIN_S + 1)
    await issuer.wait_jwks_requests(3)
    await trio.testing.wait_all_tasks_blocked()
    assert (await chat(gw, bearer(issuer.token(new)))).status == 200
    assert issuer.jwks_requests == 3  # the retry brought the new key; no miss fetch


async def test_a_cached_token_expires_with_its_exp(gw: Gateway, issuer: Issuer) -> None:
    exp = int(time.time()) + 2  # at least a second to spare for the two requests below
    token = issuer.token(issuer.keys[0], exp=exp)
    assert (await chat(gw, bearer(token))).status == 200
    assert (await chat(gw, bearer(token))).status == 200  # from the cache
    await trio.sleep(max(0.0, exp - time.time()) + 0.05)  # `exp` is wall-clock time
    assert_refused(await chat(gw, bearer(token)), "token_expired")


# -- what the logs never hold ---------------------------------------------------------------


async def test_no_token_or_key_reaches_the_logs(
    nursery: trio.Nursery, mock: MockUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    issuer = Issuer()
    await nursery.start(issuer.serve)
    rsa, ec = issuer.add_key("RS256"), issuer.add_key("ES256")
    gw = await start_gateway(nursery, upstream_env(mock, **issuer.env()))
    now = int(time.time())
    tokens = [
        issuer.token(rsa),
        issuer.token(ec),
        issuer.token(rsa, exp=now - 100),
        issuer.token(rsa, aud="x"),
        random_kid_token(issuer),
        hs256_with(rsa.public_pem, {"alg": "HS256", "kid": rsa.kid}, issuer.claims()),
    ]
    for token in tokens:
        await chat(gw, bearer(token))
    issuer.jwks_status = 500
    await chat(gw, bearer(issuer.token(rsa, kid="another-unknown")))
    assert "OIDC issuer" in caplog.text  # the start was logged, so the log was captured
    for token in tokens:
        for part in (token, *token.split(".")):
            assert part not in caplog.text
    for key in (rsa, ec):
        jwk = key.public_jwk
        for member in ("n", "x", "y"):
            if member in jwk:
                assert jwk[member] not in caplog.text
        assert key.public_pem.decode().splitlines()[1] not in caplog.text


# -- pure pieces ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "max_age"),
    [
        (None, None),
        (b"", None),
        (b"public", None),
        (b"max-age=600", 600.0),
        (b"public, max-age=86400, must-revalidate", 86400.0),
        (b'Max-Age="60"', 60.0),
        (b"max-age=abc", None),
        (b"no-store", 0.0),
        (b"max-age=600, no-cache", 0.0),
    ],
)
def test_max_age_of(header: bytes | None, max_age: float | None) -> None:
    assert max_age_of(header) == max_age


@pytest.mark.parametrize(
    ("max_age", "lifetime_s"),
    [
        (None, DEFAULT_KEYS_TTL_S),
        (0.0, KEYS_MIN_TTL_S),
        (600.0, 600.0),
        (10.0**9, KEYS_MAX_TTL_S),
    ],
)
def test_cache_lifetime_is_bounded(max_age: float | None, lifetime_s: float) -> None:
    assert cache_lifetime(max_age) == lifetime_s
