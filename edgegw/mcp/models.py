"""The model the MCP loop calls each round (`Model`): a remote provider (`RemoteModel`,
through the exchanges as any relayed request) or a local model (the route's
edgegw.routes.mcp_local.LocalWorkerModel, which raises `Unserved` when no worker can take
a round). Both answer a round the same way: `answer(body)` for a whole answer,
`stream(body, client, turn)` for a streamed one relayed to the client as it comes
(edgegw.mcp.stream)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from edgegw._core import SseSplitter
from edgegw.answer import Ending, StreamState
from edgegw.asgi import Call
from edgegw.bodies import scrub
from edgegw.errors import GatewayError, Headers, upstream_error
from edgegw.exchange import Exchanges, UpstreamRequest, error_body
from edgegw.mcp.rounds import ClientStream, Round
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
        refusal: list[Response] = []

        async def refused(resp: Response) -> None:
            refusal.append(resp)
            payload = await error_body(resp, up.secret, ex.budget)
            error = upstream_error(resp.status, resp.headers, payload)
            if not client.started:
                raise error
            await client.fail(error.code, error.message)

        async def start(resp: Response) -> None:
            if not client.started:
                await client.start(self.headers)

        sink = RoundSink(client, turn, up.secret)
        xc = await ex.stream(call, up, sink, start=start, refused=refused)
        if refusal:
            return False
        await client.settle(xc)
        return xc.ending is Ending.COMPLETED and client.state is not StreamState.ENDED


@dataclass(slots=True)
class RoundSink:
    """One round's stream (edgegw.pump's sink): its events folded into `turn` and relayed to
    the client's one stream (each round's `[DONE]` held back by `turn`)."""

    passes_done: ClassVar[bool] = False  # the client's [DONE] comes after the last round
    client: ClientStream
    turn: Round
    secret: bytes | None
    splitter: SseSplitter = field(default_factory=SseSplitter)

    async def events(
        self, data: bytes, n: int, done: bool, tapped: list[bytes], last: bool
    ) -> bool:
        out = self.turn.relay(self.splitter.feed(data), self.client.outcome)
        if out:
            await self.client.write(scrub(out, self.secret))
        return True

    async def fail(self, code: str, message: str) -> None:
        await self.client.fail(code, message)

    async def end(self) -> None:
        """The round is over; the client's stream goes on with the next."""
