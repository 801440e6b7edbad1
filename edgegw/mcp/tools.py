"""The MCP records routes and the agent share, free of the SDK (which edgegw.mcp.client
imports, only when MCP_ENABLED)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

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


# Selector mode's meta-tools.
TOOLS_GET = TOOL_PREFIX + "tools_get"
TOOLS_EXECUTE = TOOL_PREFIX + "tools_execute"
SELECTOR_TOOLS: tuple[dict[str, Any], ...] = (
    {
        "type": "function",
        "function": {
            "name": TOOLS_GET,
            "description": "List the MCP tools available (name and description), optionally "
            "filtered by a search query; with `names`, the full input schemas of those tools.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Words to look for."},
                    "names": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": TOOLS_EXECUTE,
            "description": "Run one MCP tool by name with its arguments.",
            "parameters": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "The tool's name."},
                    "arguments": {"type": "object", "description": "The tool's arguments."},
                },
                "required": ["name"],
            },
        },
    },
)


@dataclass(frozen=True, slots=True)
class Offered:
    """What a chat request is offered from one catalogue: the tools it holds, the JSON
    added to a request's `tools` (written once per catalogue, spliced into the body by
    the Rust core), and the names the model may call."""

    catalogue: Mapping[str, McpTool]
    selector: bool
    json: bytes
    names: frozenset[str]

    @classmethod
    def of(cls, catalogue: Mapping[str, McpTool], selector: bool) -> Offered:
        if selector:
            added: Sequence[Mapping[str, Any]] = SELECTOR_TOOLS
        else:
            added = [
                {
                    "type": "function",
                    "function": {
                        "name": t.exposed_name,
                        "description": t.description,
                        "parameters": dict(t.input_schema),
                    },
                }
                for t in catalogue.values()
            ]
        names = frozenset(t["function"]["name"] for t in added)
        return cls(catalogue, selector, b",".join(orjson.dumps(t) for t in added), names)
