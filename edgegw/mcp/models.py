"""The model the MCP loop calls each round: a remote provider (`RemoteModel`, through the
exchanges as any relayed request) or a local model (`LocalModel`, through
edgegw.local.serve, the SIE shapes and worker choice included). Both answer a round the
same way: `answer(body)` for a whole answer, `stream(body, client, turn)` for a streamed
one relayed to the client as it comes (edgegw.mcp.stream)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from edgegw._core import ParsedRequest, SseSplitter, UpstreamProtocolError, parse_chat_request
from edgegw.asgi import Call
from edgegw.bodies import read_whole, scrub, stream_decoder
from edgegw.errors import GatewayError, Headers, upstream_error
from edgegw.exchange import Ending, StreamState
from edgegw.local import fallback as local_fallback
from edgegw.local import serve as local
from edgegw.local.contract import LocalRequest
from edgegw.local.fleet import Fleet, LocalRuntime
from edgegw.mcp.rounds import ClientStream, Round
from edgegw.relay import MAX_ERROR_BODY, Exchanges, UpstreamRequest, next_piece
from edgegw.upstream import Response

log = logging.getLogger("edgegw.streaming")

# A whole answer: the headers to send with it (content type first) and its body.
Answer = tuple[list[tuple[bytes, bytes]], bytes]


class Unserved(Exception):
    """No local worker could take a round (`local.NoLocalWorker`), and the local refusal
    that answers it when the stream can no longer fall back."""

    def __init__(self, unserved: local.NoLocalWorker, refusal: GatewayError) -> None:
        super().__init__(unserved.reason)
        self.unserved = unserved
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


@dataclass
class LocalModel:
    """A local model's round: the body parsed and checked as a client's request would be
    (edgegw.local.contract), then served by local.serve into a capture instead of the
    client. A round no worker can take raises `Unserved`."""

    exchanges: Exchanges
    fleet: Fleet
    rt: LocalRuntime
    check: Callable[[ParsedRequest], LocalRequest]

    async def answer(self, call: Call, body: bytes) -> Answer | None:
        capture = _Capture()
        outcome = await self._serve(call, body, capture.send)
        if outcome.client_gone:
            return None
        return capture.headers, b"".join(capture.body)

    async def stream(self, call: Call, body: bytes, client: ClientStream, turn: Round) -> bool:
        sink = _StreamSink(client, turn)
        try:
            outcome = await self._serve(call, body, sink.send)
        except GatewayError as e:
            if not client.started:
                raise
            await client.fail(e.code, e.message)
            return False
        if outcome.client_gone:
            client.outcome.client_gone = True
            return False
        if outcome.error is not None:
            # SIE's final chunk went out; the stream ends with the one [DONE].
            client.outcome.error = outcome.error
            await client.close(b"data: [DONE]\n\n")
            return False
        return True

    async def _serve(self, call: Call, body: bytes, send: Any) -> Any:
        req = parse_chat_request(body)
        lreq = self.check(req)
        served = await local.serve(
            self.exchanges, self.fleet, call.answered_into(send), req, self.rt, lreq
        )
        if isinstance(served, local.NoLocalWorker):
            raise Unserved(served, local_fallback.refusal(self.rt, served.reason))
        return served


@dataclass
class _Capture:
    """A whole local answer, as local.serve sends it."""

    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: list[bytes] = field(default_factory=list)

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.headers = [h for h in message["headers"] if h[0] != b"content-length"]
        else:
            self.body.append(message.get("body", b""))


@dataclass
class _StreamSink:
    """A local round's stream, as local.serve sends it, relayed to the client: the head
    once (the first round's), every event but `[DONE]`, keep-alive comments."""

    client: ClientStream
    turn: Round
    splitter: SseSplitter = field(default_factory=SseSplitter)

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            if not self.client.started:
                await self.client.start(message["headers"], whole=True)
            return
        data = message.get("body", b"")
        if not data:
            return
        out = self.turn.relay(self.splitter.feed(data), self.client.outcome)
        if not out and data.startswith(b":"):
            out = data  # a keep-alive comment while the worker is silent
        if out:
            await self.client.write(out)
