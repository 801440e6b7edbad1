"""The MCP_* settings: inference-gateway's names and defaults, bad values named."""

from __future__ import annotations

import pytest

from edgegw.envcheck import unhonoured
from edgegw.mcp.settings import McpSettings, sse_url
from edgegw.settings import Settings, SettingsError


def test_defaults_are_the_references() -> None:
    s = Settings.load(environ={}).mcp
    assert (s.enabled, s.expose, s.servers, s.tool_mode) == (False, False, (), "selector")
    assert (s.client_timeout_s, s.dial_timeout_s, s.tls_handshake_timeout_s) == (5, 3, 3)
    assert (s.request_timeout_s, s.max_retries, s.retry_interval_s, s.initial_backoff_s) == (
        5,
        3,
        5,
        1,
    )
    assert (s.enable_reconnect, s.reconnect_interval_s) == (True, 30)
    assert (s.polling_enabled, s.polling_interval_s, s.polling_timeout_s) == (True, 30, 5)
    assert s.disable_healthcheck_logs is True


def test_values_are_read() -> None:
    s = Settings.load(
        environ={
            "MCP_ENABLED": "true",
            "MCP_SERVERS": "http://a:1/mcp, https://b/mcp/,http://a:1/mcp",
            "MCP_TOOL_MODE": "Direct",
            "MCP_INCLUDE_TOOLS": "mcp_Search,fetch",
            "MCP_REQUEST_TIMEOUT": "250ms",
            "MCP_MAX_RETRIES": "0",
            "MCP_POLLING_ENABLED": "false",
        }
    ).mcp
    assert s.servers == ("http://a:1/mcp", "https://b/mcp")
    assert s.tool_mode == "direct"
    assert s.include_tools == {"search", "fetch"}
    assert s.allows("SEARCH") and not s.allows("other")
    assert (s.request_timeout_s, s.max_retries, s.polling_enabled) == (0.25, 0, False)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"MCP_ENABLED": "true"}, "MCP_SERVERS"),
        ({"MCP_SERVERS": "ftp://x"}, "MCP_SERVERS"),
        ({"MCP_TOOL_MODE": "all"}, "MCP_TOOL_MODE"),
        ({"MCP_POLLING_INTERVAL": "soon"}, "MCP_POLLING_INTERVAL"),
        ({"MCP_MAX_RETRIES": "-1"}, "MCP_MAX_RETRIES"),
        ({"MCP_EXPOSE": "maybe"}, "MCP_EXPOSE"),
    ],
)
def test_bad_values_stop_the_start_naming_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        Settings.load(environ=env)


def test_sse_url() -> None:
    assert sse_url("http://h:1/mcp") == "http://h:1/sse"
    assert sse_url("http://h:1/x") == "http://h:1/x/sse"


def test_mcp_variables_without_mcp_enabled_are_named() -> None:
    env = {"MCP_SERVERS": "http://a/mcp", "MCP_EXPOSE": "true"}
    assert unhonoured(env) == ["MCP_SERVERS is set but not honoured: MCP_ENABLED is not true"]
    assert unhonoured({**env, "MCP_ENABLED": "true"}) == []
    assert unhonoured({"MCP_ENABLED": "true", "MCP_EXPECT_CONTINUE_TIMEOUT": "1s"}) != []
    assert McpSettings().allows("anything")
