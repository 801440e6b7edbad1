"""A local model as the MCP loop's model (edgegw.mcp.models.Model): each round parsed and
checked as a client's request would be (edgegw.local.contract), then served by
edgegw.local.serve into a capture, or into the client's stream, instead of the client.
Here, in the routes, because it joins two features (MCP and local serving)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from edgegw._core import ParsedRequest, SseSplitter, parse_chat_request
from edgegw.asgi import Call
from edgegw.errors import GatewayError
from edgegw.exchange import Exchanges
from edgegw.local import fallback as local_fallback
from edgegw.local import serve as local
from edgegw.local.contract import LocalRequest
from edgegw.local.fleet import Fleet, LocalRuntime
from edgegw.mcp.models import Answer, Unserved
from edgegw.mcp.rounds import ClientStream, Round


@dataclass
class LocalWorkerModel:
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
            raise Unserved(served.reason, local_fallback.refusal(self.rt, served.reason))
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
