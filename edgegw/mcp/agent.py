"""A chat request with MCP tools: the tools added beside the client's own, and the loop that
runs the model's MCP tool calls.

Per request (the state is this request's alone, never shared between requests):
  1. the catalogue is read once; its tools are ADDED to the client's `tools` (direct mode:
     each as `mcp_<name>`; selector mode: `mcp_tools_get` and `mcp_tools_execute`). A client
     tool named `mcp_...` is refused (400), never a silent shadow;
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

from typing import TYPE_CHECKING

import orjson

from edgegw.asgi import Call
from edgegw.bodies import scrub
from edgegw.errors import Headers, fail
from edgegw.exchange import Outcome
from edgegw.mcp.state import MAX_ROUNDS, Agent, rounds_exhausted
from edgegw.mcp.stream import run_stream
from edgegw.relay import Exchanges, UpstreamRequest, upstream_error

if TYPE_CHECKING:  # the SDK is imported only when MCP_ENABLED (edgegw.gateway)
    from edgegw.mcp.client import McpClient


def applies(mcp: McpClient, call: Call, stream: bool) -> bool:
    """Whether a chat request gets MCP tools: some are connected and the client did not
    send `X-MCP-Bypass` (as inference-gateway's clients may)."""
    return bool(mcp.tools) and not call.header(b"x-mcp-bypass")


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
    if stream:
        return await run_stream(agent, exchanges, call, up, response_headers)
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
    got = await ex.read_answer(call, up)
    if got is None:
        return None
    resp, payload, charge = got
    ex.budget.give(charge)
    if not 200 <= resp.status < 300:
        raise upstream_error(resp.status, resp.headers, scrub(payload, up.secret))
    return resp.header(b"content-type") or b"application/json", payload
