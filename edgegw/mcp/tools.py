"""The MCP records routes and the agent share, free of the SDK (which edgegw.mcp.client
imports, only when MCP_ENABLED)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from edgegw.mcp.settings import TOOL_PREFIX


@dataclass(frozen=True, slots=True)
class McpTool:
    """One tool of one server, as offered to models: `mcp_<name>`."""

    name: str  # as the server names it
    description: str
    server: str  # the server's URL (MCP_SERVERS)
    input_schema: Mapping[str, Any]

    @property
    def exposed_name(self) -> str:
        return TOOL_PREFIX + self.name


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool call gives the model: the content of its `tool` message."""

    content: str
    is_error: bool
