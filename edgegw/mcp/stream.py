"""A streaming chat request with MCP tools: the loop of edgegw.mcp.agent, every round
streamed from the upstream.

What the client sees: one SSE stream (the head goes out with the first round). Each
round's events are relayed as they arrive until the model starts a tool call; from then
on the round is held. A round whose held calls are all MCP calls is not shown: its tools
run and the next round streams on, so a client sees the text of tool rounds (if the model
wrote any before calling) but never their tool-call deltas, `finish_reason: tool_calls`
or `[DONE]`. The final round (no MCP call) is relayed whole and ends with `[DONE]`; a round
that also calls client tools is relayed with the MCP calls taken out (the client's calls
renumbered from index 0). An error after the head is one final error event, no `[DONE]`.
Events are relayed as `data:` lines with their data bytes unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from edgegw._core import SseSplitter, UpstreamProtocolError
from edgegw.asgi import Call
from edgegw.bodies import read_whole, scrub, stream_decoder
from edgegw.errors import GatewayError, Headers
from edgegw.exchange import Ending, Outcome, SseWriter, StreamState
from edgegw.mcp.state import MAX_ROUNDS, Agent, rounds_exhausted
from edgegw.relay import MAX_ERROR_BODY, Exchanges, UpstreamRequest, next_piece, upstream_error
from edgegw.upstream import Response

log = logging.getLogger("edgegw.streaming")


@dataclass
class _Round:
    """One streamed model answer, accumulated: the assistant message and the events held
    back from the client since its first tool-call delta."""

    content: str = ""
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    held: list[bytes] = field(default_factory=list)
    done: bool = False

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        return message

    def take(self, doc: object) -> bool:
        """Fold one chunk in; True when it carries tool-call deltas."""
        if not isinstance(doc, dict):
            return False
        found = False
        for choice in doc.get("choices") or ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(delta, dict):
                continue
            if isinstance(delta.get("content"), str):
                self.content += delta["content"]
            for tc in delta.get("tool_calls") or ():
                if not isinstance(tc, dict):
                    continue
                found = True
                index = tc.get("index", 0)
                slot = self.calls.setdefault(
                    index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                if tc.get("id"):
                    slot["id"] = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    slot["function"]["name"] = fn["name"]
                if isinstance(fn.get("arguments"), str):
                    slot["function"]["arguments"] += fn["arguments"]
        return found


async def run_stream(
    agent: Agent,
    exchanges: Exchanges,
    call: Call,
    up: UpstreamRequest,
    response_headers: Headers,
) -> Outcome:
    outcome = Outcome()
    writer = SseWriter(call.send, outcome, response_headers)
    for _ in range(MAX_ROUNDS):
        up.body = agent.body()
        turn = _Round()
        with exchanges.open(call, exchanges.first_byte_timeout_s) as ex:
            resp = await exchanges.pool.send(up.origin, up.method, up.target, up.headers, up.body)
            try:
                if not 200 <= resp.status < 300:
                    ex.allow(exchanges.idle_timeout_s)
                    error = await _upstream_error(resp, up.secret, exchanges)
                    if writer.state is StreamState.HEAD_PENDING:
                        raise error
                    await writer.fail(error.code, error.message)
                    return outcome
                ex.scope.deadline = float("inf")  # from here on only silence is bounded
                if writer.state is StreamState.HEAD_PENDING:
                    await writer.start()
                try:
                    await _pump(
                        resp, writer, turn, agent, outcome, exchanges.idle_timeout_s, up.secret
                    )
                except Exception:
                    log.exception("mcp stream relay failed")
                    await writer.fail("internal_error", "internal error")
            finally:
                await resp.aclose()
        await writer.settle(ex)
        if ex.ending is not Ending.COMPLETED or writer.state is StreamState.ENDED:
            return outcome
        message = turn.message()
        mine, theirs = agent.split(message)
        outcome.tool_calls += [tc["function"]["name"] for tc in (*mine, *theirs)]
        if not mine or theirs:
            outcome.done = turn.done
            outcome.usage = agent.usage or None
            held = _without(turn.held, {i for i, tc in turn.calls.items() if tc in mine})
            await writer.close(scrub(b"".join(held), up.secret))
            return outcome
        with exchanges.open(call, agent.tools_time_s(len(mine))) as ex:
            results = await agent.run_tools(mine)
        if ex.ending is not Ending.COMPLETED:
            await writer.settle(ex)
            return outcome
        agent.answer(message, mine, results)
    err = rounds_exhausted()
    await writer.fail(err.code, err.message)
    return outcome


async def _pump(
    resp: Response,
    writer: SseWriter,
    turn: _Round,
    agent: Agent,
    outcome: Outcome,
    idle_s: float,
    secret: bytes | None,
) -> None:
    """Relay one round's events until its first tool-call delta, hold the rest."""
    splitter = SseSplitter()
    decoder = stream_decoder(resp.header(b"content-encoding"))
    holding = False
    while True:
        try:
            chunk = await next_piece(resp, decoder, idle_s)
        except GatewayError as e:
            await writer.fail(e.code, e.message)
            return
        if chunk is None:
            break
        try:
            events = splitter.feed(chunk) if chunk else []
        except UpstreamProtocolError as e:
            await writer.fail(e.code, str(e))
            return
        out = []
        for event in events:
            outcome.events += 1
            framed = b"data: " + event.data + b"\n\n"
            if event.is_done:
                turn.done = True
                turn.held.append(framed)
                continue
            try:
                doc = orjson.loads(event.data)
            except orjson.JSONDecodeError:
                doc = None
            if isinstance(doc, dict):
                agent.count(doc.get("usage"))
            if turn.take(doc):
                holding = True
            if holding:
                turn.held.append(framed)
            else:
                out.append(framed)
        if out:
            await writer.write(scrub(b"".join(out), secret))
    if splitter.finish() and not turn.done:
        await writer.fail("upstream_stream_truncated", "the upstream stream ended mid-event")


def _without(held: Sequence[bytes], dropped: set[int]) -> list[bytes]:
    """The held events with the tool-call deltas of `dropped` indexes taken out and the
    others renumbered from 0."""
    if not dropped:
        return list(held)
    out = []
    for framed in held:
        data = framed[len(b"data: ") : -2]
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            out.append(framed)
            continue
        changed = False
        for choice in doc.get("choices") or () if isinstance(doc, dict) else ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(delta, dict) or not delta.get("tool_calls"):
                continue
            kept = []
            for tc in delta["tool_calls"]:
                index = tc.get("index", 0)
                if index in dropped:
                    continue
                kept.append({**tc, "index": index - sum(1 for d in dropped if d < index)})
            delta["tool_calls"] = kept
            if not kept:
                del delta["tool_calls"]
            changed = True
        if changed:
            choices = doc.get("choices") or []
            if all(
                not c.get("delta") and c.get("finish_reason") is None for c in choices
            ) and not doc.get("usage"):
                continue  # nothing left of it
            out.append(b"data: " + orjson.dumps(doc) + b"\n\n")
        else:
            out.append(framed)
    return out


async def _upstream_error(resp: Response, secret: bytes | None, ex: Exchanges) -> GatewayError:
    charge = 0
    try:
        payload, charge = await read_whole(resp, MAX_ERROR_BODY, ex.budget)
    except GatewayError:
        payload = b""
    finally:
        ex.budget.give(charge)
    return upstream_error(resp.status, resp.headers, scrub(payload, secret))
