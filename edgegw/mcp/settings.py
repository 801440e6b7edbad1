"""The MCP_* settings, named and defaulted as inference-gateway names them.

Parsed here (not in edgegw.settings, which only embeds the result) so that the MCP client
owns its own table; a bad value raises `McpSettingsError`, which edgegw.settings turns
into its `SettingsError` naming the variable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from edgegw.grammar import parse_bool, parse_duration

TOOL_PREFIX = "mcp_"
TOOL_MODES = ("selector", "direct")


class McpSettingsError(ValueError):
    """An MCP_* value that cannot be used; the message names the variable."""


@dataclass(frozen=True, slots=True)
class McpSettings:
    enabled: bool = False  # MCP_ENABLED
    # GET /v1/mcp/tools answers (else 403) (MCP_EXPOSE).
    expose: bool = False
    # Streamable HTTP endpoints (".../mcp"); a 4xx on initialize falls back to the SSE
    # transport at "<url without /mcp>/sse" (MCP_SERVERS, comma-separated).
    servers: tuple[str, ...] = ()
    # "selector": two meta-tools (mcp_tools_get, mcp_tools_execute) are added to a chat
    # request; "direct": every tool, as mcp_<name> with its schema (MCP_TOOL_MODE).
    tool_mode: str = "selector"
    # Tool names, lower-cased, without the mcp_ prefix; an include list wins over the
    # exclude list (MCP_INCLUDE_TOOLS / MCP_EXCLUDE_TOOLS).
    include_tools: frozenset[str] = frozenset()
    exclude_tools: frozenset[str] = frozenset()
    # The HTTP client's write and pool-wait bound (MCP_CLIENT_TIMEOUT).
    client_timeout_s: float = 5.0
    # TCP connect (MCP_DIAL_TIMEOUT); an https server also gets MCP_TLS_HANDSHAKE_TIMEOUT.
    dial_timeout_s: float = 3.0
    tls_handshake_timeout_s: float = 3.0
    # One MCP request, whole: initialize, tools/list, a tool call; also how long the start
    # waits for the servers' first connection attempts (MCP_REQUEST_TIMEOUT).
    request_timeout_s: float = 5.0
    # Connection attempts with exponential back-off (MCP_INITIAL_BACKOFF * 2^n, capped at
    # MCP_RETRY_INTERVAL), then every MCP_RECONNECT_INTERVAL if MCP_ENABLE_RECONNECT.
    max_retries: int = 3
    retry_interval_s: float = 5.0
    initial_backoff_s: float = 1.0
    enable_reconnect: bool = True
    reconnect_interval_s: float = 30.0
    # tools/list every MCP_POLLING_INTERVAL (bounded by MCP_POLLING_TIMEOUT): refreshes the
    # catalogue; a failure marks the server unavailable and reconnects it.
    polling_enabled: bool = True
    polling_interval_s: float = 30.0
    polling_timeout_s: float = 5.0
    # Log every successful poll (false) or only changes of a server's state (true).
    disable_healthcheck_logs: bool = True

    def allows(self, name: str) -> bool:
        """Whether a server's tool `name` (without the prefix) is offered."""
        key = name.lower()
        if self.include_tools:
            return key in self.include_tools
        return key not in self.exclude_tools

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> McpSettings:
        kw: dict[str, object] = {}
        for var, attr in (
            ("MCP_ENABLED", "enabled"),
            ("MCP_EXPOSE", "expose"),
            ("MCP_ENABLE_RECONNECT", "enable_reconnect"),
            ("MCP_POLLING_ENABLED", "polling_enabled"),
            ("MCP_DISABLE_HEALTHCHECK_LOGS", "disable_healthcheck_logs"),
        ):
            if v := env.get(var, "").strip():
                kw[attr] = _bool(var, v)
        for var, attr in (
            ("MCP_CLIENT_TIMEOUT", "client_timeout_s"),
            ("MCP_DIAL_TIMEOUT", "dial_timeout_s"),
            ("MCP_TLS_HANDSHAKE_TIMEOUT", "tls_handshake_timeout_s"),
            ("MCP_REQUEST_TIMEOUT", "request_timeout_s"),
            ("MCP_RETRY_INTERVAL", "retry_interval_s"),
            ("MCP_INITIAL_BACKOFF", "initial_backoff_s"),
            ("MCP_RECONNECT_INTERVAL", "reconnect_interval_s"),
            ("MCP_POLLING_INTERVAL", "polling_interval_s"),
            ("MCP_POLLING_TIMEOUT", "polling_timeout_s"),
        ):
            if v := env.get(var, "").strip():
                kw[attr] = _duration(var, v)
        if v := env.get("MCP_MAX_RETRIES", "").strip():
            try:
                retries = int(v)
            except ValueError:
                raise McpSettingsError("MCP_MAX_RETRIES: expected an integer") from None
            if not 0 <= retries <= 1000:
                raise McpSettingsError("MCP_MAX_RETRIES: must be in [0, 1000]")
            kw["max_retries"] = retries
        if v := env.get("MCP_TOOL_MODE", "").strip():
            if v.lower() not in TOOL_MODES:
                raise McpSettingsError("MCP_TOOL_MODE: expected selector or direct")
            kw["tool_mode"] = v.lower()
        for var, attr in (
            ("MCP_INCLUDE_TOOLS", "include_tools"),
            ("MCP_EXCLUDE_TOOLS", "exclude_tools"),
        ):
            if v := env.get(var, "").strip():
                kw[attr] = frozenset(_bare(n) for n in v.split(",") if n.strip())
        if v := env.get("MCP_SERVERS", "").strip():
            kw["servers"] = tuple(dict.fromkeys(_server_url(u) for u in v.split(",") if u.strip()))
        settings = cls(**kw)  # type: ignore[arg-type]
        if settings.enabled and not settings.servers:
            raise McpSettingsError("MCP_SERVERS: required when MCP_ENABLED=true")
        return settings


def sse_url(url: str) -> str:
    """The SSE transport's endpoint for a Streamable HTTP one: `<url without /mcp>/sse`."""
    base = url[: -len("/mcp")] if url.endswith("/mcp") else url
    return base + "/sse"


def _bare(name: str) -> str:
    name = name.strip().lower()
    return name[len(TOOL_PREFIX) :] if name.startswith(TOOL_PREFIX) else name


def _server_url(text: str) -> str:
    text = text.strip().rstrip("/")
    if not re.match(r"^https?://[^/\s]+", text) or not text.isprintable() or " " in text:
        raise McpSettingsError("MCP_SERVERS: expected comma-separated http:// or https:// URLs")
    return text


def _duration(name: str, text: str) -> float:
    return parse_duration(name, text, McpSettingsError)


def _bool(name: str, text: str) -> bool:
    return parse_bool(name, text, McpSettingsError)
