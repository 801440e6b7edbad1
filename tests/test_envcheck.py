"""Every setting honoured or named, wherever it was set (edgegw.envcheck): config-file keys
are checked as the environment's variables are, naming the file; a misspelt name gets the
nearest known one; inference-gateway's names from before its `*_ENABLE` -> `*_ENABLED`
rename are read under the new name with a warning; and a protection setting that cannot be
honoured stops the start (never fail open)."""

from __future__ import annotations

import ast
import gc
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import trio

from edgegw import envcheck
from edgegw.envcheck import unhonoured
from edgegw.http1.limits import LIMIT_TABLE
from edgegw.mock import MockUpstream
from edgegw.providers import PROVIDERS
from edgegw.settings import Settings, SettingsError

from .conftest import start_gateway, upstream_env
from .oidc_issuer import CLIENT_ID, Issuer
from .rawhttp import request

PACKAGE = Path(envcheck.__file__).parent
CHAT = orjson.dumps({"model": "openai/mock-small", "messages": [{"role": "user", "content": "hi"}]})


@pytest.fixture(autouse=True)
def _collect_leaks() -> Iterator[None]:
    yield
    gc.collect()


def _environ(**extra: str) -> dict[str, str]:
    """The test run's environment without edgegw's own variables, plus `extra`."""
    ours = envcheck.PREFIXES + tuple(envcheck.KNOWN) + tuple(envcheck.NOT_IMPLEMENTED)
    return {k: v for k, v in os.environ.items() if not k.startswith(ours)} | extra


async def _stderr_until(proc: trio.Process, wanted: list[str]) -> str:
    """What `proc` wrote to stderr until every string of `wanted` is in it."""
    assert proc.stderr is not None
    seen = b""
    with trio.fail_after(30):  # a bound on a hang, not an assertion on time
        while not all(w.encode() in seen for w in wanted):
            chunk = await proc.stderr.receive_some(4096)
            assert chunk, seen.decode()
            seen += chunk
    return seen.decode()


async def test_edgegw_serve_names_every_unhonoured_setting_with_its_source(
    tmp_path: Path,
) -> None:
    config = tmp_path / "edgegw.yaml"
    config.write_text(
        "SERVER_PORT: 0\n"
        "TELEMETRY_METRICS_PORT: 0\n"
        "WIDGET_COUNT: 3\n"  # unknown
        "servr_port: 8081\n"  # a typo (keys are read upper-cased)
        "SERVER_READ_TIMEOUT: 30s\n"  # inference-gateway's, not honoured
        "OTEL_SERVICE_NAME: gw\n"  # read from the environment only
        "LOG_LEVEL: WARNING\n"
    )
    env = _environ(
        UPSTREAM_CONECT_TIMEOUT="5s",
        SERVER_HEADER_TIMOUT="5s",
        TELEMETRY_ENABLE="true",
        EDGEGW_WORKERS="1",
    )
    wanted = [
        f"WIDGET_COUNT in {config} is set but edgegw has no such setting (a typo?)",
        f"SERVR_PORT in {config} is set but edgegw has no such setting (did you mean SERVER_PORT?)",
        f"SERVER_READ_TIMEOUT in {config} is set but not honoured: edgegw reads "
        "SERVER_HEADER_TIMEOUT",
        f"OTEL_SERVICE_NAME in {config} is set but not honoured: edgegw reads it from the "
        "environment only",
        "UPSTREAM_CONECT_TIMEOUT is set but edgegw has no such setting "
        "(did you mean UPSTREAM_CONNECT_TIMEOUT?)",
        "SERVER_HEADER_TIMOUT is set but edgegw has no such setting "
        "(did you mean SERVER_HEADER_TIMEOUT?)",
        "TELEMETRY_ENABLE is deprecated (inference-gateway renamed it TELEMETRY_ENABLED): "
        "read as TELEMETRY_ENABLED",
    ]
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "edgegw", "serve", "--config", str(config)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        stderr = await _stderr_until(proc, wanted)
    finally:
        proc.terminate()
        await proc.wait()
        assert proc.stderr is not None
        await proc.stderr.aclose()
    for name in ("PATH", "HOME", "SERVER_PORT", "TELEMETRY_METRICS_PORT", "EDGEGW_WORKERS"):
        assert f"{name} is set" not in stderr and f"{name} in" not in stderr


async def test_edgegw_serve_refuses_auth_enable_without_an_issuer() -> None:
    """AUTH_ENABLE=true is AUTH_ENABLED=true: without OIDC settings the start is refused,
    never served open."""
    with trio.fail_after(30):  # a bound on a hang, not an assertion on time
        done = await trio.run_process(
            [sys.executable, "-m", "edgegw", "serve", "--port", "0", "--workers", "1"],
            env=_environ(AUTH_ENABLE="true", AUTH_OIDC_CLIENT_ID=CLIENT_ID),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 2
    assert (
        b"AUTH_OIDC_ISSUER: required when AUTH_ENABLED=true (AUTH_ENABLE is read as AUTH_ENABLED)"
        in done.stderr
    )


async def test_auth_enable_turns_authentication_on(
    nursery: trio.Nursery, mock: MockUpstream
) -> None:
    issuer = Issuer()
    await nursery.start(issuer.serve)
    key = issuer.add_key("RS256")
    env = upstream_env(
        mock, AUTH_ENABLE="true", AUTH_OIDC_ISSUER=issuer.url, AUTH_OIDC_CLIENT_ID=CLIENT_ID
    )
    gw = await start_gateway(nursery, env)
    assert gw.settings.auth_enabled
    assert any(w.startswith("AUTH_ENABLE is deprecated") for w in gw.settings.start_warnings)
    resp = await request(gw.port, "POST", "/v1/chat/completions", CHAT)
    assert resp.status == 401
    assert orjson.loads(resp.body)["error"]["code"] == "missing_token"
    auth = [("authorization", f"Bearer {issuer.token(key)}")]
    assert (await request(gw.port, "POST", "/v1/chat/completions", CHAT, auth)).status == 200


def test_telemetry_enable_is_read_as_telemetry_enabled() -> None:
    s = Settings.load(environ={"TELEMETRY_ENABLE": "true"})
    assert s.telemetry_enabled
    assert s.start_warnings == (
        "TELEMETRY_ENABLE is deprecated (inference-gateway renamed it TELEMETRY_ENABLED): "
        "read as TELEMETRY_ENABLED",
    )
    s = Settings.load(
        environ={
            "MCP_ENABLE": "true",
            "MCP_POLLING_ENABLE": "false",
            "MCP_SERVERS": "http://127.0.0.1:1/mcp",
        }
    )
    assert s.mcp.enabled and not s.mcp.polling_enabled


def test_the_new_name_wins_and_a_disagreement_is_named() -> None:
    s = Settings.load(environ={"TELEMETRY_ENABLE": "false", "TELEMETRY_ENABLED": "true"})
    assert s.telemetry_enabled
    assert s.start_warnings == (
        "TELEMETRY_ENABLE is not honoured: TELEMETRY_ENABLED, its new name, is set too, to "
        "another value, and wins",
    )
    same = Settings.load(environ={"TELEMETRY_ENABLE": "1", "TELEMETRY_ENABLED": "true"})
    assert same.telemetry_enabled
    assert "remove TELEMETRY_ENABLE" in same.start_warnings[0]


def test_the_environment_overrides_an_old_name_in_the_file(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("TELEMETRY_ENABLE: true\n")
    s = Settings.load(environ={"TELEMETRY_ENABLED": "false"}, config_file=config)
    assert not s.telemetry_enabled
    assert s.start_warnings[0].startswith(f"TELEMETRY_ENABLE in {config} is deprecated")


@pytest.mark.parametrize("where", ["environment", "file"])
@pytest.mark.parametrize(
    ("variables", "refusal"),
    [
        # Asked for by its old name, refused by its new one: which one meant it?
        ({"AUTH_ENABLE": "true", "AUTH_ENABLED": "false"}, "AUTH_ENABLE"),
        # Misspelt protection settings: edgegw would run without them.
        ({"AUTH_ENABELD": "true"}, "AUTH_ENABELD"),
        ({"EDGEGW_API_KEY": "client-key"}, "EDGEGW_API_KEY"),
        ({"SERVER_TLS_CERT": "/etc/tls/cert.pem"}, "SERVER_TLS_CERT"),
        ({"ALLOWED_MODEL": "openai/gpt-4o-mini"}, "ALLOWED_MODEL"),
        ({"GUARDRAILS_ENABLE": "true"}, "GUARDRAILS_ENABLE"),
    ],
)
def test_a_protection_setting_that_cannot_be_honoured_stops_the_start(
    variables: dict[str, str], refusal: str, where: str, tmp_path: Path
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("".join(f"{k}: '{v}'\n" for k, v in variables.items()))
    in_file = where == "file"
    with pytest.raises(SettingsError) as info:
        if in_file:
            Settings.load(environ={}, config_file=config)
        else:
            Settings.load(environ=variables)
    subject = f"{refusal} in {config}" if in_file else refusal
    assert str(info.value).startswith(subject)
    assert "client-key" not in str(info.value)


def test_a_misspelt_protection_setting_that_asks_for_nothing_is_only_named() -> None:
    assert unhonoured({"AUTH_ENABELD": "false"}) == [
        "AUTH_ENABELD is set but edgegw has no such setting (did you mean AUTH_ENABLED?)"
    ]
    assert not Settings.load(environ={"AUTH_ENABELD": "false"}).auth_enabled


def test_only_the_environments_edgegw_names_are_judged() -> None:
    env = {
        "PATH": "/usr/bin",
        "HOME": "/home/gw",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "OLLAMA_HOST": "0.0.0.0",
        "OPENAI_API_KY": "k",  # a provider's prefix: edgegw's
        "LOG_LEVLE": "DEBUG",
        "OTEL_LOGS_EXPORTER": "otlp",
    }
    assert unhonoured(env) == [
        "LOG_LEVLE is set but edgegw has no such setting (did you mean LOG_LEVEL?)",
        "OPENAI_API_KY is set but edgegw has no such setting (did you mean OPENAI_API_KEY?)",
        "OTEL_LOGS_EXPORTER is set but not honoured: edgegw reads no such OpenTelemetry variable",
    ]
    # Every key of the config file is edgegw's.
    assert unhonoured({}, {"HOME": "/home/gw", "LOG_LEVEL": "INFO"}, "c.yaml") == [
        "HOME in c.yaml is set but edgegw has no such setting (a typo?)"
    ]


def test_a_typo_of_a_name_edgegw_does_not_honour_says_so() -> None:
    assert unhonoured({"SERVER_WRITE_TIMOUT": "30s"}) == [
        "SERVER_WRITE_TIMOUT is set but edgegw has no such setting (did you mean "
        "SERVER_WRITE_TIMEOUT? That one is not honoured either: edgegw reads "
        "SERVER_WRITE_STALL_TIMEOUT)"
    ]


def test_a_feature_switch_counts_wherever_it_was_set() -> None:
    assert unhonoured({"MCP_SERVERS": "http://127.0.0.1:1/mcp"}, {"MCP_ENABLED": "true"}, "c") == []
    assert unhonoured({"MCP_SERVERS": "http://127.0.0.1:1/mcp"}, {"MCP_ENABLE": "1"}, "c") == [
        "MCP_ENABLE in c is deprecated (inference-gateway renamed it MCP_ENABLED): "
        "read as MCP_ENABLED"
    ]
    assert unhonoured({"AUTH_OIDC_ISSUER": "https://idp.test/r"}) == [
        "AUTH_OIDC_ISSUER is set but not honoured: AUTH_ENABLED is not true"
    ]


def _names_in(path: Path) -> set[str]:
    """The variable-like string constants of a module (`"SERVER_PORT"`, ...)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if re.fullmatch(r"[A-Z][A-Z0-9]*(_[A-Z0-9]+)+", node.value):
                found.add(node.value)
    return found


@pytest.mark.parametrize(
    "module",
    ["settings.py", "mcp/settings.py", "guardrails/settings.py", "routing/config.py"],
)
def test_envchecks_table_has_every_variable_the_settings_read(module: str) -> None:
    """The table the README and the environment's scope follow. (At start a variable the
    settings look up is known even if the table lags; see the next test.)"""
    assert _names_in(PACKAGE / module) - envcheck.KNOWN - set(envcheck.NOT_IMPLEMENTED) == set()


def test_a_variable_the_settings_look_up_is_known() -> None:
    reading = envcheck.read({"UPSTREAM_SOMETHING_NEW": "3"})
    assert reading.findings() == (
        ["UPSTREAM_SOMETHING_NEW is set but edgegw has no such setting (a typo?)"],
        [],
    )
    assert reading.findings(read={"UPSTREAM_SOMETHING_NEW"}) == ([], [])


def test_envchecks_table_names_only_variables_edgegw_reads() -> None:
    """A name in the table that nothing reads would be neither honoured nor named."""
    derived = {row.env for row in LIMIT_TABLE} | {
        f"{pid.upper()}_API_{part}" for pid in PROVIDERS for part in ("URL", "KEY")
    }
    written = set().union(*(_names_in(p) for p in PACKAGE.rglob("*.py") if p.name != "envcheck.py"))
    assert envcheck.KNOWN - derived - envcheck.ENVIRONMENT_ONLY - written == set()
