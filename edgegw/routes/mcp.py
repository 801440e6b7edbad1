"""GET /v1/mcp/tools: the MCP tools the gateway offers models, when MCP_EXPOSE=true (else
403 in the envelope).

One answer parses for clients of both shapes in use: the API reference's
(`{"tools": [{name, description, server, inputSchema}]}`) and inference-gateway's server's
(`{"object": "list", "data": [{..., "input_schema"}]}`): both lists are sent, and each tool
carries its schema under both keys. Names are `mcp_<name>`; the list is empty while MCP is
disabled or no server is connected.
"""

from __future__ import annotations

import orjson

from edgegw.asgi import Call
from edgegw.errors import GatewayError, fail
from edgegw.gateway import Gateway


def not_exposed() -> GatewayError:
    return fail(
        "mcp_tools_not_exposed",
        "The MCP tools endpoint is not exposed (MCP_EXPOSE=true exposes it).",
    )


async def list_tools(gw: Gateway, call: Call) -> None:
    if not gw.settings.mcp.expose:
        raise not_exposed()
    tools = [
        {
            "name": tool.exposed_name,
            "description": tool.description,
            "server": tool.server,
            "input_schema": tool.input_schema,
            "inputSchema": tool.input_schema,
        }
        for tool in (gw.mcp.tools.values() if gw.mcp is not None else ())
    ]
    await call.respond_json(200, orjson.dumps({"object": "list", "data": tools, "tools": tools}))
