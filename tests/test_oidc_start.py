"""OIDC at start: every unusable configuration stops the gateway before it listens, with a
message naming the variable (never fail open). Settings errors come from Settings.load;
an issuer that cannot be read makes serve() raise before started(), and `edgegw serve` exit
non-zero."""

from __future__ import annotations

import gc
import os
import socket
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from edgegw.auth.verifier import OidcStartError
from edgegw.mock import MockUpstream
from edgegw.settings import EXIT_CONFIG, Settings, SettingsError

from .conftest import start_gateway, upstream_env
from .oidc_issuer import CLIENT_ID, Issuer


@pytest.fixture(autouse=True)
def _collect_leaks() -> Iterator[None]:
    yield
    gc.collect()


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"AUTH_ENABLED": "true"}, "AUTH_OIDC_ISSUER"),
        ({"AUTH_ENABLED": "true", "AUTH_OIDC_CLIENT_ID": CLIENT_ID}, "AUTH_OIDC_ISSUER"),
        ({"AUTH_ENABLED": "true", "AUTH_OIDC_ISSUER": "https://idp.test/r"}, "AUTH_OIDC_CLIENT_ID"),
        ({"AUTH_ENABLED": "maybe"}, "AUTH_ENABLED"),
        ({"AUTH_OIDC_ISSUER": "https://idp.test/r\x07"}, "AUTH_OIDC_ISSUER"),
        ({"AUTH_OIDC_CLIENT_SECRET": "s\x00"}, "AUTH_OIDC_CLIENT_SECRET"),
    ]
    + [
        ({"AUTH_ENABLED": "true", "AUTH_OIDC_CLIENT_ID": CLIENT_ID, "AUTH_OIDC_ISSUER": url}, var)
        for url, var in (
            ("idp.test/realms/r", "AUTH_OIDC_ISSUER"),
            ("ftp://idp.test/r", "AUTH_OIDC_ISSUER"),
            ("http://idp.test/realms/r", "AUTH_OIDC_ISSUER"),  # plain http off loopback
            ("http://10.0.0.1/realms/r", "AUTH_OIDC_ISSUER"),
            ("https://idp.test/r?tenant=a", "AUTH_OIDC_ISSUER"),
            ("https://idp.test/r#frag", "AUTH_OIDC_ISSUER"),
            ("https://[::1/r", "AUTH_OIDC_ISSUER"),
        )
    ],
)
def test_bad_settings_stop_the_start(env: dict[str, str], variable: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.load(environ=env)
    assert str(info.value).startswith(variable + ":")


@pytest.mark.parametrize(
    "issuer",
    [
        "https://idp.test/realms/r",
        "https://idp.test/realms/r/",  # kept as written: `iss` must match it exactly
        "http://127.0.0.1:8081/realms/r",
        "http://localhost:8081",
        "http://[::1]:8081/r",
    ],
)
def test_good_settings(issuer: str) -> None:
    env = {
        "AUTH_ENABLED": "true",
        "AUTH_OIDC_ISSUER": issuer,
        "AUTH_OIDC_CLIENT_ID": CLIENT_ID,
        "AUTH_OIDC_CLIENT_SECRET": "very-secret-value",
    }
    s = Settings.load(environ=env)
    assert (s.auth_enabled, s.auth_oidc_issuer, s.auth_oidc_client_id) == (True, issuer, CLIENT_ID)
    assert s.auth_oidc_client_secret == "very-secret-value"
    assert "very-secret-value" not in repr(s)


def test_auth_is_off_by_default() -> None:
    s = Settings.load(environ={"AUTH_OIDC_ISSUER": "https://idp.test/r"})
    assert s.auth_enabled is False


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"discovery": {"issuer": "{url}/"}}, "not exactly the configured issuer"),
        ({"discovery": {"issuer": None}}, "not exactly the configured issuer"),
        ({"discovery": {"jwks_uri": None}}, "no 'jwks_uri'"),
        ({"discovery": {"jwks_uri": "http://idp.test/certs"}}, "must be https"),
        (
            {"discovery": {"id_token_signing_alg_values_supported": ["HS256", "none"]}},
            "none of the algorithms",
        ),
        ({"jwks_status": 500}, "answered HTTP 500"),
        ({"keys": []}, "no usable signing key"),
    ],
)
async def test_an_unusable_issuer_stops_the_start(
    nursery: trio.Nursery, mock: MockUpstream, change: dict[str, Any], reason: str
) -> None:
    issuer = Issuer()
    await nursery.start(issuer.serve)
    issuer.add_key("RS256")
    for name, value in change.items():
        if name == "discovery":
            value = {
                k: v.format(url=issuer.url) if isinstance(v, str) else v for k, v in value.items()
            }
        if name == "keys":
            issuer.keys[:] = value
        else:
            setattr(issuer, name, value)
    with pytest.RaisesGroup(
        pytest.RaisesExc(OidcStartError, match=f"^AUTH_OIDC_ISSUER: .*{reason}"),
        flatten_subgroups=True,
    ):
        await start_gateway(nursery, upstream_env(mock, **issuer.env()))


async def test_an_unreachable_issuer_stops_the_start(
    nursery: trio.Nursery, mock: MockUpstream
) -> None:
    env = {
        "AUTH_ENABLED": "true",
        "AUTH_OIDC_ISSUER": f"http://127.0.0.1:{_closed_port()}/realms/r",
        "AUTH_OIDC_CLIENT_ID": CLIENT_ID,
    }
    with pytest.RaisesGroup(
        pytest.RaisesExc(OidcStartError, match="^AUTH_OIDC_ISSUER: .*could not connect"),
        flatten_subgroups=True,
    ):
        await start_gateway(nursery, upstream_env(mock, **env))


async def _edgegw_serve(env: dict[str, str], workers: int = 1) -> trio.CompletedProcess[bytes]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AUTH_", "EDGEGW_"))}
    with trio.fail_after(30):
        return await trio.run_process(
            [sys.executable, "-m", "edgegw", "serve", "--workers", str(workers), "--port", "0"],
            env={**base, **env},
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


async def test_edgegw_serve_exits_when_the_issuer_is_unreachable() -> None:
    done = await _edgegw_serve(
        {
            "AUTH_ENABLED": "true",
            "AUTH_OIDC_ISSUER": f"http://127.0.0.1:{_closed_port()}/realms/r",
            "AUTH_OIDC_CLIENT_ID": CLIENT_ID,
        }
    )
    assert done.returncode == EXIT_CONFIG
    assert b"AUTH_OIDC_ISSUER: cannot use the issuer" in done.stderr
    assert b"Traceback" not in done.stderr  # one line that says why, not a stack


async def test_edgegw_serve_with_workers_stops_when_the_issuer_is_unreachable() -> None:
    """Every worker would refuse the same way: the supervisor stops instead of restarting
    them forever."""
    done = await _edgegw_serve(
        {
            "AUTH_ENABLED": "true",
            "AUTH_OIDC_ISSUER": f"http://127.0.0.1:{_closed_port()}/realms/r",
            "AUTH_OIDC_CLIENT_ID": CLIENT_ID,
        },
        workers=2,
    )
    assert done.returncode == EXIT_CONFIG
    assert b"AUTH_OIDC_ISSUER: cannot use the issuer" in done.stderr
    assert b"starting another" not in done.stdout


async def test_edgegw_serve_exits_without_an_issuer() -> None:
    done = await _edgegw_serve({"AUTH_ENABLED": "true", "AUTH_OIDC_CLIENT_ID": CLIENT_ID})
    assert done.returncode == 2
    assert b"AUTH_OIDC_ISSUER: required when AUTH_ENABLED=true" in done.stderr
