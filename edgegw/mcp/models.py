"""The model the MCP loop calls each round (`Model`): a remote provider (`RemoteModel`,
through the exchanges as any relayed request) or a local model (the route's
edgegw.routes.mcp_local.LocalWorkerModel, which raises `Unserved` when no worker can take
a round). Both answer a round the same way: `answer(body)` for a whole answer,
`stream(body, client, turn)` for a streamed one relayed to the client as it comes
(edgegw.mcp.stream)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from edgegw._core import SseSplitter, UpstreamProtocolError
from edgegw.asgi import Call
from edgegw.bodies import read_whole, scrub, stream_decoder
from edgegw.errors import GatewayError, Headers, upstream_error
from edgegw.exchange import Ending, StreamState
from edgegw.mcp.rounds import ClientStream, Round
from edgegw.relay import MAX_ERROR_BODY, Exchanges, UpstreamRequest, next_piece
from edgegw.upstream import Response

log = logging.getLogger("edgegw.streaming")

# A whole answer: the headers to send with it (content type first) and its body.
Answer = tuple[list[tuple[bytes, bytes]], bytes]


class Unserved(Exception):
    """No worker could take a round (a local model's `reason`, SIE's fallback reason), and
    the refusal that answers it once the stream can no longer fall back."""

    def __init__(self, reason: str, refusal: GatewayError) -> None:
        super().__init__(reason)
        self.reason = reason
        self.refusal = refusal


class Model(Protocol):
    async def answer(self, call: Call, body: bytes) -> Answer | None:
        """The model's whole answer to `body`; None when the client went away. An error
        answer is raised in the envelope."""

    async def stream(self, call: Call, body: bytes, client: ClientStream, turn: Round) -> bool:
        """Relay the model's streamed answer to `body` to `client` (its `[DONE]` held back),
        folding it into `turn`; True when the round ended cleanly and the stream may go
        on, False when it has ended (an error event sent, or the client gone)."""


@dataclass
class RemoteModel:
    exchanges: Exchanges
    up: UpstreamRequest
    headers: Headers = ()

    async def answer(self, call: Call, body: bytes) -> Answer | None:
        self.up.body = body
        ex = self.exchanges
        got = await ex.read_answer(call, self.up)
        if got is None:
            return None
        resp, payload, charge = got
        ex.budget.give(charge)
        if not 200 <= resp.status < 300:
            raise upstream_error(resp.status, resp.headers, scrub(payload, self.up.secret))
        return [(b"content-type", resp.header(b"content-type") or b"application/json")], payload

    async def stream(self, call: Call, body: bytes, client: ClientStream, turn: Round) -> bool:
        up, ex = self.up, self.exchanges
        up.body = body
        with ex.open(call, ex.first_byte_timeout_s) as xc:
            resp = await ex.send(call, up)  # its id and trace context, as every exchange
            try:
                if not 200 <= resp.status < 300:
                    xc.allow(ex.idle_timeout_s)
                    error = await _upstream_error(resp, up.secret, ex)
                    if not client.started:
                        raise error
                    await client.fail(error.code, error.message)
                    return False
                xc.scope.deadline = float("inf")  # from here on only silence is bounded
                if not client.started:
                    await client.start(self.headers)
                try:
                    await _pump(resp, client, turn, ex.idle_timeout_s, up.secret)
                except Exception:
                    log.exception("mcp stream relay failed")
                    await client.fail("internal_error", "internal error")
            finally:
                await resp.aclose()
        await client.settle(xc)
        return xc.ending is Ending.COMPLETED and client.state is not StreamState.ENDED


async def _pump(
    resp: Response, client: ClientStream, turn: Round, idle_s: float, secret: bytes | None
) -> None:
    splitter = SseSplitter()
    decoder = stream_decoder(resp.header(b"content-encoding"))
    while True:
        try:
            chunk = await next_piece(resp, decoder, idle_s)
        except GatewayError as e:
            await client.fail(e.code, e.message)
            return
        if chunk is None:
            break
        try:
            events = splitter.feed(chunk) if chunk else []
        except UpstreamProtocolError as e:
            await client.fail(e.code, str(e))
            return
        out = turn.relay(events, client.outcome)
        if out:
            await client.write(scrub(out, secret))
    if splitter.finish() and not turn.done:
        await client.fail("upstream_stream_truncated", "the upstream stream ended mid-event")


async def _upstream_error(resp: Response, secret: bytes | None, ex: Exchanges) -> GatewayError:
    charge = 0
    try:
        payload, charge = await read_whole(resp, MAX_ERROR_BODY, ex.budget)
    except GatewayError:
        payload = b""
    finally:
        ex.budget.give(charge)
    return upstream_error(resp.status, resp.headers, scrub(payload, secret))
