"""/proxy's relays: the upstream's answer with its status and headers, piece by piece
(`relay_raw`), or judged by the guardrails first (`relay_judged`: a stream as it passes, any
other answer whole), the provider's key scrubbed either way. Built on edgegw.exchange's
exchanges, as the generation routes' relays are."""

from __future__ import annotations

import logging
import math

import trio

from edgegw.answer import Outcome, SseWriter
from edgegw.asgi import Call
from edgegw.bodies import Scrubber, read_whole, scrub
from edgegw.errors import GatewayError, Headers
from edgegw.exchange import Exchanges, Inspect, UpstreamRequest, error_body
from edgegw.pump import RelaySink, StreamCheck, pump
from edgegw.upstream import Response
from edgegw.watch import Exchange

log = logging.getLogger("edgegw.streaming")

# Headers of the upstream's framing and coding, replaced when edgegw re-frames a body.
_REFRAMED = frozenset({b"content-length", b"content-encoding"})
# ...and those an SseWriter writes itself (its body is decoded, whole events).
_SSE_WRITER_HEADERS = _REFRAMED | {b"content-type", b"cache-control", b"x-accel-buffering"}
HOP_BY_HOP_RESPONSE_HEADERS = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"transfer-encoding",
        b"te",
        b"trailer",
        b"upgrade",
        b"proxy-authenticate",
    }
)


async def relay_raw(
    xs: Exchanges,
    call: Call,
    resp: Response,
    secret: bytes | None = None,
    response_headers: Headers = (),
) -> None:
    """Status, headers and body as the upstream sends them, piece by piece (/proxy). A
    failure after the head ends the response without its terminator, so the client
    sees the truncation."""
    complete = False
    with xs.open(call, float("inf")) as ex:
        try:
            headers = [*_relayed_headers(resp), *response_headers]
            complete = await _relay_body(xs, call, ex, resp, secret, headers)
        finally:
            await resp.aclose()
    if complete and not ex.client_gone:
        await call.send({"type": "http.response.body", "body": b"", "more_body": False})


async def relay_judged(
    xs: Exchanges,
    call: Call,
    up: UpstreamRequest,
    *,
    check: StreamCheck,
    inspect: Inspect,
    response_headers: Headers = (),
) -> None:
    """/proxy to a generation API under the guardrails: the upstream's answer with its
    status and headers, as `relay_raw` relays it, but a 2xx answer judged before the
    client gets it: an SSE stream by `check` as it passes (written by an SseWriter in
    the route's API's shape), any other answer read whole (decoded, at most
    max_response_bytes) and passed through `inspect`. Error answers go as sent."""
    outcome = Outcome()
    writer = SseWriter(call.send, outcome, (), call.errors)
    headers: list[tuple[bytes, bytes]] = []
    whole: tuple[int, bytes, int] | None = None
    raw = complete = False
    with xs.open(call, xs.first_byte_timeout_s) as ex:
        resp = await xs.send(call, up)
        try:
            headers = [*_relayed_headers(resp), *response_headers]
            if not 200 <= resp.status < 300:
                raw = True
                ex.allow(math.inf)
                complete = await _relay_body(xs, call, ex, resp, up.secret, headers)
            elif not (resp.header(b"content-type") or b"").startswith(b"text/event-stream"):
                ex.allow(xs.idle_timeout_s)
                payload, charge = await read_whole(resp, xs.max_response_bytes, xs.budget)
                whole = (resp.status, payload, charge)
            else:
                ex.scope.deadline = float("inf")
                own = [(k, v) for k, v in headers if k not in _SSE_WRITER_HEADERS]
                writer = SseWriter(call.send, outcome, tuple(own), call.errors)
                await writer.start()
                try:
                    sink = RelaySink(writer, outcome, up.secret, check=check)
                    await pump(
                        resp, sink, xs.idle_timeout_s, write_s=xs.write_timeout_s, watched=ex
                    )
                except Exception:
                    log.exception("stream relay failed")
                    await writer.fail("internal_error", "internal error")
        finally:
            await resp.aclose()
    if raw:
        if complete and not ex.client_gone:
            await call.send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    if whole is None:
        await writer.settle(ex)
        return
    status, payload, charge = whole
    try:
        payload, added = await inspect(scrub(payload, up.secret))
        headers = [(k, v) for k, v in headers if k not in _REFRAMED]
        headers += [(b"content-length", b"%d" % len(payload)), *added]
        await call.respond(status, headers, payload)
    finally:
        xs.budget.give(charge)


async def _relay_body(
    xs: Exchanges,
    call: Call,
    ex: Exchange,
    resp: Response,
    secret: bytes | None,
    headers: list[tuple[bytes, bytes]],
) -> bool:
    """The answer's head and body, piece by piece, but its terminator (sent by the
    caller after the exchange); whether it was complete."""
    try:
        if resp.status >= 400 and secret:
            # An error answer is small: read whole, so the key can be scrubbed.
            ex.allow(xs.idle_timeout_s)
            payload = await error_body(resp, secret, xs.budget)
            headers = [(k, v) for k, v in headers if k not in _REFRAMED]
            headers.append((b"content-length", b"%d" % len(payload)))
            await call.respond(resp.status, headers, payload)
            return False
        scrubber = None if not secret or _encoded(resp) else Scrubber(secret)
        if scrubber is not None:
            # Scrubbing may change the length: the body is reframed (chunked).
            headers = [(k, v) for k, v in headers if k != b"content-length"]
        await call.send({"type": "http.response.start", "status": resp.status, "headers": headers})
        while True:
            with trio.fail_after(xs.idle_timeout_s):
                chunk = await resp.receive_chunk()
            if not chunk:
                break
            if scrubber is not None:
                chunk = scrubber.feed(chunk)
            await call.send({"type": "http.response.body", "body": chunk, "more_body": True})
        if scrubber is not None and (rest := scrubber.finish()):
            await call.send({"type": "http.response.body", "body": rest, "more_body": True})
        return True
    except (GatewayError, trio.TooSlowError) as e:
        log.warning("proxied response cut short: %s", getattr(e, "code", "upstream_timeout"))
        return False


def _encoded(resp: Response) -> bool:
    """A body in a content coding (edgegw asks for identity; a provider may not comply):
    relayed as it came, since its bytes cannot be searched for the key."""
    coding = resp.header(b"content-encoding")
    return coding is not None and coding.strip().lower() not in (b"", b"identity")


def _relayed_headers(resp: Response) -> list[tuple[bytes, bytes]]:
    """The upstream's response headers as /proxy relays them."""
    # The upstream's own request id is kept under another name: X-Request-Id is the
    # gateway's (edgegw.asgi), the one its logs and spans know.
    headers = [
        (b"x-upstream-request-id" if k == b"x-request-id" else k, v)
        for k, v in resp.headers
        if k not in HOP_BY_HOP_RESPONSE_HEADERS
    ]
    if resp.header(b"transfer-encoding") is not None:
        # The upstream framed its body by chunks: a Content-Length beside them (RFC 9112
        # §6.3: to be ignored) must not frame the client's copy.
        headers = [(k, v) for k, v in headers if k != b"content-length"]
    return headers
