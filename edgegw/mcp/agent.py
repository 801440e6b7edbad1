"""A chat request with MCP tools: the tools added beside the client's own, and the loop that
runs the model's MCP tool calls, for a remote provider and a local model alike
(edgegw.mcp.models).

Per request (the state is this request's alone, never shared between requests):
  1. the catalogue's offer is read once (edgegw.mcp.tools.Offered: written once per
     catalogue); the Rust core appends its tools to the client's `tools` as it writes the
     upstream body (direct mode: each as `mcp_<name>`; selector mode: `mcp_tools_get` and
     `mcp_tools_execute`), so a request that calls no tool is never parsed again here. A
     client tool named `mcp_...` is refused (400), never a silent shadow;
  2. the model is called; an answer without MCP tool calls is the final answer, relayed as
     the model sent it (after tool rounds, with `usage` the sum over rounds). An answer that
     also calls client tools ends the loop too: it is returned with its MCP calls removed,
     so that every call the client sees is its own;
  3. otherwise the turn's MCP calls run concurrently (at most MAX_PARALLEL_TOOL_CALLS, each
     bounded by MCP_REQUEST_TIMEOUT; a failure or timeout is an error result the model
     reads, never an HTTP error), the assistant message and one `tool` message per call are
     appended, and the model is called again, for at most MAX_ROUNDS calls.
Streaming requests run the same loop through edgegw.mcp.stream.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from edgegw._core import ParsedRequest
from edgegw.answer import Outcome
from edgegw.asgi import Call
from edgegw.errors import Headers, fail
from edgegw.exchange import Exchanges, Inspect
from edgegw.mcp.models import Model, Unserved
from edgegw.mcp.state import MAX_ROUNDS, Agent, ToolCheck, refuse_prefixed, rounds_exhausted
from edgegw.mcp.stream import run_stream
from edgegw.mcp.tools import Offered
from edgegw.tap import tap

if TYPE_CHECKING:  # the SDK is imported only when MCP_ENABLED (edgegw.gateway)
    from edgegw.mcp.client import McpClient


def offer(mcp: McpClient | None, call: Call, req: ParsedRequest) -> Offered | None:
    """The MCP tools a chat request gets: None when MCP is off, no tool is connected, or
    the client sent `X-MCP-Bypass` (as inference-gateway's clients may)."""
    if mcp is None or req.endpoint != "chat" or call.header(b"x-mcp-bypass"):
        return None
    offered = mcp.offered
    if not offered.names:
        return None
    refuse_prefixed(req.tool_names)
    return offered


async def run(
    exchanges: Exchanges,
    mcp: McpClient,
    offered: Offered,
    model: Model,
    call: Call,
    first: bytes,
    stream: bool,
    response_headers: Headers,
    *,
    inspect: Inspect | None = None,
    tool_check: ToolCheck | None = None,
) -> Outcome | Unserved:
    """A chat request with MCP tools (module doc). `first` is the first round's body, the
    tools added. A local model no worker can take in the first round answers `Unserved`,
    for the route to decide (nothing reached the client); in a later round, the local
    refusal. `inspect` sees the final non-streaming answer before the client
    (the guardrails' post_call); `tool_check` every MCP call (tool_args, tool_output)."""
    agent = Agent(mcp, offered, first, trace=call.trace, check=tool_check)
    try:
        if stream:
            return await run_stream(agent, model, exchanges, call, response_headers)
        return await _whole(agent, model, exchanges, call, response_headers, inspect)
    except Unserved as e:
        if agent.rounds <= 1:
            return e
        raise e.refusal from None


async def _whole(
    agent: Agent,
    model: Model,
    exchanges: Exchanges,
    call: Call,
    response_headers: Headers,
    inspect: Inspect | None,
) -> Outcome:
    outcome = Outcome()
    for _ in range(MAX_ROUNDS):
        got = await model.answer(call, agent.body())
        if got is None:
            outcome.client_gone = True
            return outcome
        headers, payload = got
        if payload.find(b'"tool_calls"') == -1 and agent.rounds == 1:
            # No tool call at all: the answer as the model sent it, read as `forward` does.
            if payload.find(b'"usage"') != -1:
                tap(payload, outcome, "message")
            await _respond(call, headers, payload, response_headers, inspect)
            return outcome
        doc = _answer_doc(payload)
        agent.count(doc.get("usage"))
        choices = doc.get("choices") or [{}]
        choice = choices[0] if isinstance(choices[0], dict) else {}
        message = choice.get("message") or {}
        if not isinstance(message, dict):
            raise fail("bad_upstream_response", "the upstream's answer has no message")
        mine, theirs = agent.split(message)
        outcome.tool_calls += [tc["function"]["name"] for tc in (*mine, *theirs)]
        if mine and not theirs:
            with exchanges.open(call, agent.tools_time_s(len(mine))) as ex:
                results = await agent.run_tools(mine)
            if not ex.raise_unless_answerable():
                outcome.client_gone = True
                return outcome
            agent.answer(message, mine, results)
            continue
        if mine:  # the client's calls end the loop; it sees only its own
            message["tool_calls"] = theirs
        if agent.usage and agent.rounds > 1:
            doc["usage"] = agent.usage
        outcome.usage = agent.usage or None
        await _respond(call, headers, orjson.dumps(doc), response_headers, inspect)
        return outcome
    raise rounds_exhausted()


def _answer_doc(payload: bytes) -> dict[str, Any]:
    try:
        doc = orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise fail("bad_upstream_response", "the upstream's answer is not JSON") from None
    if not isinstance(doc, dict):
        raise fail("bad_upstream_response", "the upstream's answer is not a JSON object")
    return doc


async def _respond(
    call: Call,
    headers: list[tuple[bytes, bytes]],
    payload: bytes,
    extra: Headers,
    inspect: Inspect | None,
) -> None:
    if inspect is not None:
        payload, added = await inspect(payload)
        extra = (*extra, *added)
    await call.respond(200, [*headers, (b"content-length", b"%d" % len(payload)), *extra], payload)
