"""A chat request with MCP tools: the tools added beside the client's own, and the loop that
runs the model's MCP tool calls.

Per request (the state is this request's alone, never shared between requests):
  1. the catalogue is read once; its tools are ADDED to the client's `tools` (direct mode:
     each as `mcp_<name>`; selector mode: `mcp_tools_get` and `mcp_tools_execute`). A client
     tool of the same name as an MCP tool hides it: that name stays the client's;
  2. the model is called; an answer without MCP tool calls is the final answer, relayed as
     the upstream sent it. An answer that also calls client tools ends the loop too: it is
     returned with its MCP calls removed, so that every call the client sees is its own;
  3. otherwise the turn's MCP calls run concurrently (at most MAX_PARALLEL_TOOL_CALLS, each
     bounded by MCP_REQUEST_TIMEOUT; a failure or timeout is an error result the model
     reads, never an HTTP error), the assistant message and one `tool` message per call are
     appended, and the model is called again, for at most MAX_ROUNDS calls.
Streaming requests run the same loop through edgegw.mcp.stream.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
import trio

from edgegw.asgi import Call
from edgegw.bodies import read_whole, scrub
from edgegw.errors import GatewayError, Headers, fail
from edgegw.exchange import Outcome
from edgegw.mcp.settings import TOOL_PREFIX
from edgegw.mcp.tools import McpTool, ToolResult
from edgegw.relay import Exchanges, UpstreamRequest, upstream_error

if TYPE_CHECKING:  # the SDK is imported only when MCP_ENABLED (edgegw.gateway)
    from edgegw.mcp.client import McpClient

# Model calls of one request (inference-gateway's MaxAgentIterations): a model that keeps
# calling tools gets an error, not an endless bill.
MAX_ROUNDS = 10
# MCP tool calls of one turn running at once.
MAX_PARALLEL_TOOL_CALLS = 8
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


def rounds_exhausted() -> GatewayError:
    return GatewayError(
        502,
        "mcp_rounds_exhausted",
        f"The model was still calling MCP tools after {MAX_ROUNDS} rounds.",
        type="server_error",
    )


def applies(mcp: McpClient, call: Call, stream: bool) -> bool:
    """Whether a chat request gets MCP tools: some are connected and the client did not
    send `X-MCP-Bypass` (as inference-gateway's clients may)."""
    return not stream and bool(mcp.tools) and not call.header(b"x-mcp-bypass")


@dataclass
class Agent:
    """One request's agent state: the conversation as it grows and the tools offered."""

    mcp: McpClient
    doc: dict[str, Any]
    offered: Mapping[str, McpTool]
    selector: bool
    names: frozenset[str] = field(default=frozenset())
    usage: dict[str, int] = field(default_factory=dict)

    @classmethod
    def start(cls, mcp: McpClient, body: bytes) -> Agent:
        doc = orjson.loads(body)
        client_tools = doc.get("tools") or []
        taken = {t.get("function", {}).get("name") for t in client_tools if isinstance(t, dict)}
        catalogue = {n: t for n, t in mcp.tools.items() if n not in taken}
        selector = mcp.settings.tool_mode == "selector"
        if selector:
            added = [t for t in SELECTOR_TOOLS if t["function"]["name"] not in taken]
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
        doc["tools"] = [*client_tools, *added]
        names = frozenset(t["function"]["name"] for t in added)
        return cls(mcp, doc, catalogue, selector, names)

    def body(self) -> bytes:
        return orjson.dumps(self.doc)

    def count(self, usage: object) -> None:
        if isinstance(usage, dict):
            for key, value in usage.items():
                if isinstance(value, int) and not isinstance(value, bool):
                    self.usage[key] = self.usage.get(key, 0) + value

    def split(self, message: Mapping[str, Any]) -> tuple[list[Any], list[Any]]:
        """The message's tool calls: (MCP calls, the client's calls)."""
        mine: list[Any] = []
        theirs: list[Any] = []
        for tc in message.get("tool_calls") or ():
            name = tc.get("function", {}).get("name") if isinstance(tc, dict) else None
            (mine if name in self.names else theirs).append(tc)
        return mine, theirs

    async def run_tools(self, calls: Sequence[Mapping[str, Any]]) -> list[ToolResult]:
        results: list[ToolResult] = [ToolResult("", True)] * len(calls)
        limiter = trio.CapacityLimiter(MAX_PARALLEL_TOOL_CALLS)

        async def one(i: int, tc: Mapping[str, Any]) -> None:
            async with limiter:
                results[i] = await self._run_tool(tc)

        async with trio.open_nursery() as nursery:
            for i, tc in enumerate(calls):
                nursery.start_soon(one, i, tc)
        return results

    def answer(
        self, message: Mapping[str, Any], calls: Sequence[Any], results: list[ToolResult]
    ) -> None:
        """Append the assistant's turn and one `tool` message per call."""
        messages = self.doc.setdefault("messages", [])
        turn = dict(message)
        turn["tool_calls"] = list(calls)
        messages.append(turn)
        for tc, result in zip(calls, results, strict=True):
            messages.append(
                {"role": "tool", "tool_call_id": tc.get("id"), "content": result.content}
            )

    async def _run_tool(self, tc: Mapping[str, Any]) -> ToolResult:
        function = tc.get("function") or {}
        name = function.get("name")
        try:
            args = orjson.loads(function.get("arguments") or "{}")
        except orjson.JSONDecodeError:
            args = None
        if not isinstance(args, dict):
            return ToolResult("Error: the arguments are not a JSON object", True)
        if not self.selector:
            return await self.mcp.call(str(name), args)
        if name == TOOLS_GET:
            return self._tools_get(args)
        target = args.get("name")
        arguments = args.get("arguments") or {}
        if not isinstance(target, str) or not isinstance(arguments, dict):
            return ToolResult("Error: mcp_tools_execute takes a name and an arguments object", True)
        if not target.startswith(TOOL_PREFIX):
            target = TOOL_PREFIX + target
        if target not in self.offered:
            return ToolResult(f"Error: no MCP tool is named {target}", True)
        return await self.mcp.call(target, arguments)

    def _tools_get(self, args: Mapping[str, Any]) -> ToolResult:
        names = args.get("names")
        if isinstance(names, list) and names:
            wanted = {
                n if n.startswith(TOOL_PREFIX) else TOOL_PREFIX + n
                for n in names
                if isinstance(n, str)
            }
            found = [
                {
                    "name": t.exposed_name,
                    "description": t.description,
                    "input_schema": t.input_schema,
                }
                for t in self.offered.values()
                if t.exposed_name in wanted
            ]
        else:
            query = str(args.get("query") or "").lower()
            found = [
                {"name": t.exposed_name, "description": t.description}
                for t in self.offered.values()
                if query in t.exposed_name.lower() or query in t.description.lower()
            ]
        return ToolResult(orjson.dumps({"tools": found}).decode(), False)


async def run(
    exchanges: Exchanges,
    mcp: McpClient,
    call: Call,
    up: UpstreamRequest,
    stream: bool,
    response_headers: Headers,
) -> Outcome:
    """A chat request with MCP tools (module doc)."""
    agent = Agent.start(mcp, up.body)
    outcome = Outcome()
    for _ in range(MAX_ROUNDS):
        up.body = agent.body()
        fetched = await _fetch(exchanges, call, up)
        if fetched is None:
            outcome.client_gone = True
            return outcome
        content_type, payload = fetched
        try:
            doc = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise fail("bad_upstream_response", "the upstream's answer is not JSON") from None
        if not isinstance(doc, dict):
            raise fail("bad_upstream_response", "the upstream's answer is not a JSON object")
        agent.count(doc.get("usage"))
        choices = doc.get("choices") or [{}]
        message = choices[0].get("message") or {}
        mine, theirs = agent.split(message)
        outcome.tool_calls += [tc["function"]["name"] for tc in (*mine, *theirs)]
        if mine and not theirs:
            with exchanges.open(call, mcp.settings.request_timeout_s + 1) as ex:
                results = await agent.run_tools(mine)
            if not ex.raise_unless_answerable():
                outcome.client_gone = True
                return outcome
            agent.answer(message, mine, results)
            continue
        if mine:  # the client's calls end the loop; it sees only its own
            message["tool_calls"] = theirs
            payload = orjson.dumps(doc)
        outcome.usage = agent.usage or None
        headers = [
            (b"content-type", content_type),
            (b"content-length", b"%d" % len(payload)),
            *response_headers,
        ]
        await call.respond(200, headers, payload)
        return outcome
    raise rounds_exhausted()


async def _fetch(ex: Exchanges, call: Call, up: UpstreamRequest) -> tuple[bytes, bytes] | None:
    """One model call whose answer stays here: (content type, body); None when the client
    went away. An upstream error answer is raised in the envelope, as `forward` does."""
    charge = 0
    try:
        with ex.open(call, ex.first_byte_timeout_s) as exchange:
            resp = await ex.pool.send(up.origin, up.method, up.target, up.headers, up.body)
            try:
                exchange.allow(ex.idle_timeout_s)
                payload, charge = await read_whole(resp, ex.max_response_bytes, ex.budget)
            finally:
                await resp.aclose()
        if not exchange.raise_unless_answerable():
            return None
        if not 200 <= resp.status < 300:
            raise upstream_error(resp.status, resp.headers, scrub(payload, up.secret))
        return resp.header(b"content-type") or b"application/json", payload
    finally:
        ex.budget.give(charge)
