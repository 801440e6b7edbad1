"""Settings: sources and precedence, and bad values failing at start naming the variable."""

from __future__ import annotations

import subprocess
import sys

import pytest

from edgegw.settings import Settings, SettingsError, parse_duration


def test_defaults_are_safe() -> None:
    s = Settings.load(environ={})
    assert (s.host, s.port) == ("127.0.0.1", 8080)
    assert s.max_body_bytes == 10 * 1024 * 1024
    assert s.default_max_tokens == 1024
    assert s.api_keys == ()
    # No provider is configured without a key, and keyless ones need an explicit URL.
    assert dict(s.providers) == {}


def test_providers_from_environment() -> None:
    s = Settings.load(
        environ={
            "OPENAI_API_KEY": "sk-1",
            "NVIDIA_API_KEY": "nv",
            "NVIDIA_API_URL": "http://127.0.0.1:9/v1/",
            "OLLAMA_API_URL": "http://127.0.0.1:11434/v1",
        }
    )
    assert set(s.providers) == {"openai", "nvidia", "ollama"}
    assert s.providers["openai"].url == "https://api.openai.com/v1"
    assert s.providers["nvidia"].url == "http://127.0.0.1:9/v1"
    assert s.providers["ollama"].key is None
    assert "sk-1" not in repr(s)


def test_precedence_flags_over_environment_over_file(tmp_path) -> None:
    cfg = tmp_path / "edgegw.yaml"
    cfg.write_text("SERVER_PORT: 7000\nSERVER_HOST: 0.0.0.0\nopenai_api_key: from-file\n")
    s = Settings.load(environ={}, config_file=cfg)
    assert (s.host, s.port, s.providers["openai"].key) == ("0.0.0.0", 7000, "from-file")
    s = Settings.load(environ={"SERVER_PORT": "7001"}, config_file=cfg)
    assert s.port == 7001
    s = Settings.load(environ={"SERVER_PORT": "7001"}, config_file=cfg, overrides={"port": 7002})
    assert s.port == 7002


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"SERVER_PORT": "http"}, "SERVER_PORT"),
        ({"SERVER_PORT": "70000"}, "SERVER_PORT"),
        ({"SERVER_MAX_REQUEST_BODY_SIZE": "-1"}, "SERVER_MAX_REQUEST_BODY_SIZE"),
        ({"UPSTREAM_IDLE_TIMEOUT": "soon"}, "UPSTREAM_IDLE_TIMEOUT"),
        ({"UPSTREAM_CONNECT_TIMEOUT": "0s"}, "UPSTREAM_CONNECT_TIMEOUT"),
        ({"OPENAI_API_URL": "ftp://x", "OPENAI_API_KEY": "k"}, "OPENAI_API_URL"),
        ({"OPENAI_API_KEY": "bad\nkey"}, "OPENAI_API_KEY"),
        ({"CLOUDFLARE_API_KEY": "k"}, "CLOUDFLARE_API_URL"),
        ({"EDGEGW_API_KEYS": "has space"}, "EDGEGW_API_KEYS"),
        ({"LOG_LEVEL": "LOUD"}, "LOG_LEVEL"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.load(environ=env)
    assert str(info.value).startswith(variable)
    for value in env.values():
        if "key" in variable.lower() and value != "k":
            assert value not in str(info.value)  # secrets are never echoed


def test_durations() -> None:
    assert parse_duration("X", "30s") == 30
    assert parse_duration("X", "500ms") == 0.5
    assert parse_duration("X", "2m") == 120
    assert parse_duration("X", "1.5") == 1.5


def test_api_keys_file(tmp_path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# clients\nalpha\n\nbeta\n")
    s = Settings.load(environ={"EDGEGW_API_KEYS_FILE": str(keys), "EDGEGW_API_KEYS": "gamma"})
    assert set(s.api_keys) == {b"alpha", b"beta", b"gamma"}


def test_cli_fails_at_start_naming_the_variable() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "edgegw", "serve"],
        env={"SERVER_PORT": "eighty", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "SERVER_PORT" in proc.stderr


def test_guardrails_enabled_is_honoured_not_refused() -> None:
    """GUARDRAILS_ENABLED once stopped the start (not implemented); now it is read."""
    assert Settings.load(environ={"GUARDRAILS_ENABLED": "true"}).guardrails.enabled
    assert not Settings.load(environ={"GUARDRAILS_ENABLED": "false"}).guardrails.enabled


def test_unhonoured_variables_are_named_at_start() -> None:
    env = {
        "PATH": "",
        "SERVER_PORT": "0",
        "MCP_SERVERS": "http://127.0.0.1:1/mcp",
        "ENVIRONMENT": "production",
        "EDGEGW_WORKRES": "2",  # a typo
        "EDGEGW_WORKERS": "1",
    }
    with subprocess.Popen(
        [sys.executable, "-m", "edgegw", "serve"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        stderr = ""
        assert proc.stderr is not None
        try:
            while "EDGEGW_WORKRES" not in stderr or "MCP_SERVERS" not in stderr:
                line = proc.stderr.readline()
                assert line, stderr
                stderr += line
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    assert "ENVIRONMENT is set but not honoured" in stderr
    typo = "EDGEGW_WORKRES is set but edgegw has no such setting (did you mean EDGEGW_WORKERS?)"
    assert typo in stderr
    assert "EDGEGW_WORKERS is set" not in stderr


def test_a_network_facing_gateway_without_client_auth_is_warned_about() -> None:
    from edgegw.envcheck import exposure

    for host in ("0.0.0.0", "::", "10.1.2.3", "gateway.internal"):
        s = Settings.load(environ={"SERVER_HOST": host})
        warning = exposure(s.host, bool(s.api_keys or s.auth_enabled))
        assert warning is not None and host in warning
    for env in (
        {"SERVER_HOST": "127.0.0.1"},
        {"SERVER_HOST": "::1"},
        {"SERVER_HOST": "localhost"},
        {"SERVER_HOST": "0.0.0.0", "EDGEGW_API_KEYS": "k"},
    ):
        s = Settings.load(environ=env)
        assert exposure(s.host, bool(s.api_keys or s.auth_enabled)) is None


@pytest.mark.parametrize(
    ("endpoint", "url"),
    [
        ("http://collector:4318", "http://collector:4318/v1/traces"),
        ("http://collector:4318/", "http://collector:4318/v1/traces"),
        ("https://otel.example/custom/path", "https://otel.example/custom/path"),
        ("http://collector:4318/v1/traces", "http://collector:4318/v1/traces"),
    ],
)
def test_tracing_endpoint_gets_v1_traces_when_pathless(endpoint: str, url: str) -> None:
    s = Settings.load(
        environ={
            "TELEMETRY_ENABLED": "true",
            "TELEMETRY_TRACING_ENABLED": "true",
            "TELEMETRY_TRACING_OTLP_ENDPOINT": endpoint,
        }
    )
    assert s.tracing_enabled and s.tracing_endpoint == url


def test_tracing_needs_telemetry_and_says_so() -> None:
    from edgegw.envcheck import unhonoured

    env = {"TELEMETRY_TRACING_ENABLED": "true"}
    assert not Settings.load(environ=env).tracing_enabled
    assert any("TELEMETRY_ENABLED is not true" in m for m in unhonoured(env))
    assert not any(
        "TELEMETRY_TRACING" in m for m in unhonoured({**env, "TELEMETRY_ENABLED": "true"})
    )
    assert any("OTEL_PROPAGATORS" in m for m in unhonoured({"OTEL_PROPAGATORS": "b3"}))


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"LOG_FORMAT": "xml"}, "LOG_FORMAT"),
        ({"TELEMETRY_TRACING_OTLP_ENDPOINT": "ftp://x"}, "TELEMETRY_TRACING_OTLP_ENDPOINT"),
        ({"OTEL_TRACES_SAMPLER": "jaeger_remote"}, "OTEL_TRACES_SAMPLER"),
        ({"OTEL_TRACES_SAMPLER_ARG": "1.5"}, "OTEL_TRACES_SAMPLER_ARG"),
    ],
)
def test_bad_observability_values_name_the_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(SettingsError, match=variable):
        Settings.load(environ=env)
