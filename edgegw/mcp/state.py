"""One chat request's MCP agent state (`Agent`): the conversation as it grows, the tools
offered, the usage of every round, and the running of a turn's MCP calls. Shared by the
non-streaming loop (edgegw.mcp.agent) and the streaming one (edgegw.mcp.stream)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
import trio

from edgegw.errors import GatewayError, fail
from edgegw.mcp.settings import TOOL_PREFIX
from edgegw.mcp.tools import TOOLS_GET, Offered, ToolResult

if TYPE_CHECKING:  # the SDK is imported only when MCP_ENABLED (edgegw.gateway)
    from edgegw._core import TraceRecord
    from edgegw.mcp.client import McpClient

log = logging.getLogger("edgegw.mcp")

# Model calls of one request (inference-gateway's MaxAgentIterations): a model that keeps
# calling tools gets an error, not an endless bill.
MAX_ROUNDS = 10
# MCP tool calls of one turn running at once.
MAX_PARALLEL_TOOL_CALLS = 8


# The guardrails' tool phases, bound to one request: (phase, tool name, text) -> (the text
# to use, or None when blocked; the decision's message). Phases: tool_args, tool_output.
ToolCheck = Callable[[str, str, str], Awaitable[tuple[str | None, str]]]


def rounds_exhausted() -> GatewayError:
    return fail(
        "mcp_rounds_exhausted",
        f"The model was still calling MCP tools after {MAX_ROUNDS} rounds.",
    )


def refuse_prefixed(tool_names: Sequence[str]) -> None:
    """A client tool named `mcp_...` is refused, not silently shadowed: the prefix names
    the gateway's tools."""
    if any(name.startswith(TOOL_PREFIX) for name in tool_names):
        raise fail(
            "invalid_request",
            f"tool names starting with '{TOOL_PREFIX}' are the gateway's MCP tools",
            param="tools",
        )


@dataclass
class Agent:
    """One request's agent state: the conversation as it grows and the tools offered.
    `first` is the first model call's body (the client's request with the tools added);
    it is parsed only when the model calls an MCP tool."""

    mcp: McpClient
    offer: Offered
    first: bytes
    doc: dict[str, Any] | None = None
    rounds: int = 0
    usage: dict[str, int] = field(default_factory=dict)
    # The request's spans (one `execute_tool <name>` per tool run), when tracing is on.
    trace: TraceRecord | None = None
    check: ToolCheck | None = None

    @property
    def names(self) -> frozenset[str]:
        return self.offer.names

    def body(self) -> bytes:
        self.rounds += 1
        return self.first if self.doc is None else orjson.dumps(self.doc)

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

    def tools_time_s(self, n: int) -> float:
        """The longest `run_tools` of `n` calls can take (each bounded, in waves of
        MAX_PARALLEL_TOOL_CALLS), with a second to spare: the bound of its exchange scope,
        which a disconnect or a drain cancels sooner."""
        waves = -(-n // MAX_PARALLEL_TOOL_CALLS)
        return waves * self.mcp.settings.request_timeout_s + 1

    async def run_tools(self, calls: Sequence[Mapping[str, Any]]) -> list[ToolResult]:
        results: list[ToolResult] = [ToolResult("", True)] * len(calls)
        limiter = trio.CapacityLimiter(MAX_PARALLEL_TOOL_CALLS)

        async def one(i: int, tc: Mapping[str, Any]) -> None:
            async with limiter:
                started = trio.current_time()
                if self.trace is None:
                    results[i] = result = await self._run_tool(tc)
                else:
                    name = str((tc.get("function") or {}).get("name"))
                    with self.trace.tool(name, str(tc.get("id"))) as span:
                        results[i] = result = await self._run_tool(tc)
                        if result.is_error:
                            self.trace.fail(span, "tool_error")
                # One line per execution: the tool, its outcome and duration (the arguments
                # and the result only at DEBUG: they may hold anything).
                log.info(
                    "mcp tool %.100s: %s in %.1f ms",
                    (tc.get("function") or {}).get("name"),
                    "error" if result.is_error else "ok",
                    (trio.current_time() - started) * 1000,
                )
                log.debug("mcp tool %.100s result: %.500s", tc.get("id"), result.content)

        async with trio.open_nursery() as nursery:
            for i, tc in enumerate(calls):
                nursery.start_soon(one, i, tc)
        return results

    def answer(
        self, message: Mapping[str, Any], calls: Sequence[Any], results: list[ToolResult]
    ) -> None:
        """Append the assistant's turn and one `tool` message per call."""
        if self.doc is None:
            self.doc = orjson.loads(self.first)
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
        if not self.offer.selector:
            return await self._call(str(name), args)
        if name == TOOLS_GET:
            return self._tools_get(args)
        target = args.get("name")
        arguments = args.get("arguments") or {}
        if not isinstance(target, str) or not isinstance(arguments, dict):
            return ToolResult("Error: mcp_tools_execute takes a name and an arguments object", True)
        if not target.startswith(TOOL_PREFIX):
            target = TOOL_PREFIX + target
        if target not in self.offer.catalogue:
            return ToolResult(f"Error: no MCP tool is named {target}", True)
        return await self._call(target, arguments)

    async def _call(self, name: str, args: Mapping[str, Any]) -> ToolResult:
        """One MCP call, through the guardrails' tool_args and tool_output when they are on:
        a block is an error result the model reads (as the reference), never an HTTP error."""
        if self.check is None:
            return await self.mcp.call(name, args)
        text = orjson.dumps(args).decode()
        checked, message = await self.check("tool_args", name, text)
        if checked is None:
            return ToolResult(f"Error: the guardrails blocked this tool call: {message}", True)
        if checked != text:
            args = orjson.loads(checked)
        result = await self.mcp.call(name, args)
        output, message = await self.check("tool_output", name, result.content)
        if output is None:
            return ToolResult(f"Error: the guardrails blocked this tool's output: {message}", True)
        return ToolResult(output, result.is_error)

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
                for t in self.offer.catalogue.values()
                if t.exposed_name in wanted
            ]
        else:
            query = str(args.get("query") or "").lower()
            found = [
                {"name": t.exposed_name, "description": t.description}
                for t in self.offer.catalogue.values()
                if query in t.exposed_name.lower() or query in t.description.lower()
            ]
        return ToolResult(orjson.dumps({"tools": found}).decode(), False)
