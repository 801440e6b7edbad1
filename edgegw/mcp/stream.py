"""A streaming chat request with MCP tools: the loop of edgegw.mcp.agent, every round
streamed from the model (edgegw.mcp.models: remote or local).

What the client sees: one SSE stream, with the first round's head. Every round's events
are relayed as they arrive, tool-call deltas and `finish_reason: tool_calls` of the rounds
whose MCP calls the gateway runs included (as inference-gateway streams them: a client sees
the work happen, and tells the gateway's calls by their `mcp_` prefix); each round's
`[DONE]` is held back, and a usage-only chunk too: the stream ends with one usage chunk (the
sum over rounds, when the model sent one) and one `[DONE]`. A round that also calls client
tools ends the loop: its MCP calls are not run, and the client, which saw every call,
answers its own. An error after the head is one final error event, no `[DONE]` (a local
model's: SIE's final chunk, then `[DONE]`).
"""

from __future__ import annotations

from edgegw.answer import Ending, Outcome
from edgegw.asgi import Call
from edgegw.errors import Headers
from edgegw.exchange import Exchanges
from edgegw.mcp.models import Model
from edgegw.mcp.rounds import ClientStream, Round
from edgegw.mcp.state import MAX_ROUNDS, Agent, rounds_exhausted


async def run_stream(
    agent: Agent, model: Model, exchanges: Exchanges, call: Call, response_headers: Headers
) -> Outcome:
    outcome = Outcome()
    client = ClientStream(call.send, outcome, response_headers)
    for _ in range(MAX_ROUNDS):
        turn = Round()
        if not await model.stream(call, agent.body(), client, turn):
            return outcome
        agent.count(turn.usage)
        message = turn.message()
        mine, theirs = agent.split(message)
        outcome.tool_calls += [tc["function"]["name"] for tc in (*mine, *theirs)]
        if not mine or theirs:
            outcome.done = turn.done
            outcome.usage = agent.usage or None
            await client.close(turn.last(agent.usage if agent.rounds > 1 else None))
            return outcome
        with exchanges.open(call, agent.tools_time_s(len(mine))) as ex:
            results = await agent.run_tools(mine)
        if ex.ending is not Ending.COMPLETED:
            await client.settle(ex)
            return outcome
        agent.answer(message, mine, results)
    err = rounds_exhausted()
    await client.fail(err.code, err.message)
    return outcome
