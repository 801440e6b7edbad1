"""Running an exchange with a remote provider, its steps in one order written once: a whole
answer (`read_answer`: open, send, screen, allow, read, close) and a stream into a sink
(`stream`: open, send, screen, the refusal or the head, the pump of edgegw.pump, close), on
which the rest is built: `forward` and `relay_sse` for the generation routes, the MCP
loop's rounds (edgegw.mcp.models), and /proxy's `relay_raw` and `relay_judged` (a request
the guardrails judge). A whole 2xx answer may be looked at before the client gets it
(`Inspect`), a stream's events before each relay (`StreamCheck`): the guardrails' post_call.

Longer than the guide because every exchange with a remote provider keeps its order here;
/proxy's two relays would be the first to move to a module of their own.

Remote streams are relayed as the upstream's bytes, unchanged, and only *tapped*
(edgegw.pump.RelaySink). An upstream error answer becomes the envelope with the upstream's
status (`upstream_error`), or is relayed as sent on the native-API routes (`raw_errors`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import trio

from edgegw.asgi import Call
from edgegw.bodies import BufferBudget, Scrubber, read_whole, scrub
from edgegw.errors import GatewayError, Headers, upstream_error
from edgegw.exchange import DisconnectWatch, Exchange, Outcome, SseWriter
from edgegw.pump import RelaySink, Sink, StreamCheck, pump
from edgegw.retry import NO_RETRY, RetryPolicy, send_retrying
from edgegw.tap import TAP_WHOLE_MAX, TAPS, usage_of
from edgegw.upstream import Origin, Response, UpstreamPool

if TYPE_CHECKING:
    pass

log = logging.getLogger("edgegw.streaming")

RetryScope = Literal["all", "refused", "none"]
# Largest upstream error body read before answering (the rest is not needed).
MAX_ERROR_BODY = 1 << 20
# A look at a whole 2xx answer before the client gets it: (the body to send, headers to
# add); raising answers the error instead.
Inspect = Callable[[bytes], Awaitable[tuple[bytes, Headers]]]


@dataclass(slots=True)
class UpstreamRequest:
    """One request to send upstream, as a route describes it."""

    origin: Origin
    target: bytes
    headers: Headers | list[tuple[bytes, bytes]]
    body: bytes
    method: bytes = b"POST"
    # The provider's key: scrubbed from any upstream text relayed to the client.
    secret: bytes | None = None
    # Called with the upstream's answer head before anything is written to the client; it
    # may raise to refuse the answer (model routing then tries another deployment).
    screen: Callable[[Response], None] | None = None
    # The gateway asked for stream usage the client did not ask for: tapped, not relayed.
    hidden_usage: bool = False
    # What may be sent again before the first byte reaches the client (edgegw.retry):
    # "all" (a generation), "refused" (a connection refused only), "none".
    retry: RetryScope = "none"


@dataclass(frozen=True, slots=True)
class Exchanges:
    """What every exchange needs from the process: the pool, the watch and the limits."""

    pool: UpstreamPool
    watch: DisconnectWatch
    first_byte_timeout_s: float
    idle_timeout_s: float
    max_response_bytes: int
    # Whole answers held by the process at once (bodies.BufferBudget).
    budget: BufferBudget
    # UPSTREAM_RETRY_*: how a request whose `retry` allows it is sent again.
    retry: RetryPolicy = NO_RETRY

    async def send(self, call: Call, up: UpstreamRequest) -> Response:
        """The request sent, and sent again as `up.retry` and the policy allow; each attempt
        is its own span with its own connection."""

        def attempt() -> Awaitable[Response]:
            return send_traced(
                self.pool, call, up.origin, up.method, up.target, up.headers, up.body
            )

        if up.retry == "none" or self.retry.attempts <= 1:
            return await attempt()

        def retrying(reason: str) -> None:
            log.info(
                "retrying %s %s after %s", up.origin.host, up.target[:64].decode("latin-1"), reason
            )

        refused_only = up.retry == "refused"
        return await send_retrying(
            attempt, self.retry, refused_only=refused_only, on_retry=retrying
        )

    @contextmanager
    def open(self, call: Call, timeout_s: float) -> Iterator[Exchange]:
        """The scope of one exchange; the deadline starts `timeout_s` from now."""
        ex = Exchange(call.receive, trio.current_time() + timeout_s)
        self.watch.register(ex)
        try:
            with ex.scope:
                yield ex
        finally:
            self.watch.release(ex)

    async def forward(
        self,
        call: Call,
        up: UpstreamRequest,
        *,
        raw_errors: bool = False,
        response_headers: Headers = (),
        inspect: Inspect | None = None,
    ) -> Outcome:
        """Non-streaming: the upstream's 2xx body as it was sent, or its error in the
        envelope (as the upstream sent it, with `raw_errors`). `inspect` sees a 2xx body
        before the client does: it returns the body to send and headers to add, or raises
        the error to answer instead (the guardrails' post_call)."""
        outcome = Outcome()
        got = await self.read_answer(call, up)
        if got is None:
            outcome.client_gone = True
            return outcome
        resp, payload, charge = got
        try:
            ok = 200 <= resp.status < 300
            # A provider that quotes its key back, in an error or an answer, is not relayed
            # with it.
            payload = scrub(payload, up.secret)
            if not ok:
                if not raw_errors:
                    raise upstream_error(resp.status, resp.headers, payload)
            outcome.status = resp.status
            if ok and len(payload) > TAP_WHOLE_MAX:
                # Parsed whole it would take many times its size: its usage only.
                TAPS[call.errors.name](usage_of(payload), outcome, "message")
            elif ok and (
                payload.find(b'"usage"') != -1
                or payload.find(b'"tool_calls"') != -1
                or call.trace is not None
            ):
                TAPS[call.errors.name](payload, outcome, "message")
            if ok and inspect is not None:
                payload, added = await inspect(payload)
                response_headers = (*response_headers, *added)
            if ok and call.trace is not None and call.trace.completion is not None:
                call.trace.completion.answer(payload)
            headers = [
                (b"content-type", resp.header(b"content-type") or b"application/json"),
                (b"content-length", b"%d" % len(payload)),
            ]
            if raw_errors and resp.status in (429, 503) and (retry := resp.header(b"retry-after")):
                headers.append((b"retry-after", retry))
            headers += response_headers
            await call.respond(resp.status, headers, payload)
            return outcome
        finally:
            self.budget.give(charge)

    async def read_answer(
        self, call: Call, up: UpstreamRequest
    ) -> tuple[Response, bytes, int] | None:
        """One exchange whose whole answer is read here: (response, decoded body, what it
        holds of the buffer budget, for the caller to give back once the body is no longer
        held); None when the client went away. A drain or a timeout is raised (503 / 504)."""
        charge = 0
        try:
            with self.open(call, self.first_byte_timeout_s) as ex:
                resp = await self.send(call, up)
                try:
                    if up.screen is not None:
                        up.screen(resp)
                    ex.allow(self.idle_timeout_s)
                    payload, charge = await read_whole(resp, self.max_response_bytes, self.budget)
                finally:
                    await resp.aclose()
            if not ex.raise_unless_answerable():
                self.budget.give(charge)
                return None
        except BaseException:
            self.budget.give(charge)
            raise
        return resp, payload, charge

    async def stream(
        self,
        call: Call,
        up: UpstreamRequest,
        sink: Sink,
        *,
        start: Callable[[Response], Awaitable[None]],
        refused: Callable[[Response], Awaitable[None]],
    ) -> Exchange:
        """The stream operation, its steps in this order: open (the first-byte deadline),
        send, screen; an answer that is no stream (not 2xx) goes to `refused`, its body
        read within the idle deadline; else `start` (the head to the client) and the pump
        into `sink`, silence bounded per piece; the response closed. The exchange is
        returned for the caller's writer to settle."""
        with self.open(call, self.first_byte_timeout_s) as ex:
            resp = await self.send(call, up)
            try:
                if up.screen is not None:
                    up.screen(resp)
                if not 200 <= resp.status < 300:
                    ex.allow(self.idle_timeout_s)
                    await refused(resp)
                    return ex
                ex.scope.deadline = math.inf  # from here on only silence is bounded
                await start(resp)
                try:
                    await pump(resp, sink, self.idle_timeout_s)
                except Exception:
                    # The head is out: the only honest end left is an error event.
                    log.exception("stream relay failed")
                    await sink.fail("internal_error", "internal error")
            finally:
                await resp.aclose()
        return ex

    async def relay_sse(
        self,
        call: Call,
        up: UpstreamRequest,
        *,
        raw_errors: bool = False,
        response_headers: Headers = (),
        check: StreamCheck | None = None,
    ) -> Outcome:
        """Streaming: relay the upstream's SSE bytes as they arrive, tapping them for usage
        (and judging them with `check`). An upstream error before the stream is answered in
        the envelope (as the upstream sent it, with `raw_errors`)."""
        outcome = Outcome()
        writer = SseWriter(call.send, outcome, response_headers, call.errors)
        completion = None if call.trace is None else call.trace.completion
        sink = RelaySink(writer, outcome, up.secret, up.hidden_usage, completion, check)
        refusal: list[Response] = []

        async def refused(resp: Response) -> None:
            refusal.append(resp)
            payload = await error_body(resp, up.secret, self.budget)
            if not raw_errors:
                raise upstream_error(resp.status, resp.headers, payload)
            outcome.status = resp.status
            await _send_raw(call, resp.status, resp.headers, payload)

        async def start(resp: Response) -> None:
            await writer.start()

        ex = await self.stream(call, up, sink, start=start, refused=refused)
        if not refusal:
            await writer.settle(ex)
        return outcome

    async def relay_raw(
        self,
        call: Call,
        resp: Response,
        secret: bytes | None = None,
        response_headers: Headers = (),
    ) -> None:
        """Status, headers and body as the upstream sends them, piece by piece (/proxy). A
        failure after the head ends the response without its terminator, so the client
        sees the truncation."""
        complete = False
        with self.open(call, float("inf")) as ex:
            try:
                headers = [*_relayed_headers(resp), *response_headers]
                complete = await self._relay_body(call, ex, resp, secret, headers)
            finally:
                await resp.aclose()
        if complete and not ex.client_gone:
            await call.send({"type": "http.response.body", "body": b"", "more_body": False})

    async def relay_judged(
        self,
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
        with self.open(call, self.first_byte_timeout_s) as ex:
            resp = await self.send(call, up)
            try:
                headers = [*_relayed_headers(resp), *response_headers]
                if not 200 <= resp.status < 300:
                    raw = True
                    ex.allow(math.inf)
                    complete = await self._relay_body(call, ex, resp, up.secret, headers)
                elif not (resp.header(b"content-type") or b"").startswith(b"text/event-stream"):
                    ex.allow(self.idle_timeout_s)
                    payload, charge = await read_whole(resp, self.max_response_bytes, self.budget)
                    whole = (resp.status, payload, charge)
                else:
                    ex.scope.deadline = float("inf")
                    own = [(k, v) for k, v in headers if k not in _SSE_WRITER_HEADERS]
                    writer = SseWriter(call.send, outcome, tuple(own), call.errors)
                    await writer.start()
                    try:
                        sink = RelaySink(writer, outcome, up.secret, check=check)
                        await pump(resp, sink, self.idle_timeout_s)
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
            self.budget.give(charge)

    async def _relay_body(
        self,
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
                ex.allow(self.idle_timeout_s)
                payload = await error_body(resp, secret, self.budget)
                headers = [(k, v) for k, v in headers if k not in _REFRAMED]
                headers.append((b"content-length", b"%d" % len(payload)))
                await call.respond(resp.status, headers, payload)
                return False
            scrubber = None if not secret or _encoded(resp) else Scrubber(secret)
            if scrubber is not None:
                # Scrubbing may change the length: the body is reframed (chunked).
                headers = [(k, v) for k, v in headers if k != b"content-length"]
            await call.send(
                {"type": "http.response.start", "status": resp.status, "headers": headers}
            )
            while True:
                with trio.fail_after(self.idle_timeout_s):
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


async def send_traced(
    pool: UpstreamPool,
    call: Call,
    origin: Origin,
    method: bytes,
    target: bytes,
    headers: Headers | list[tuple[bytes, bytes]],
    body: bytes,
) -> Response:
    """`pool.send` with the request's id, and with tracing on, one CLIENT span for the
    attempt (from sending to the response head: its duration is the time to first byte)
    whose `traceparent` goes upstream, and a `connect` child for a connection it opened."""
    sent = [*headers, (b"x-request-id", call.request_id.encode())]
    trace = call.trace
    if trace is None:
        if call.trace_context:
            sent += call.trace_context
        return await pool.send(origin, method, target, sent, body)
    span, context, on_connect = trace.attempt(method, target, origin.host, origin.port)
    sent += context
    opened = pool.open_connections
    try:
        resp = await pool.send(origin, method, target, sent, body, on_connect)
    except BaseException as e:
        span.fail(e)
        span.end()
        raise
    trace.attempt_done(span, resp.status, pool.open_connections > opened)
    return resp


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


async def _send_raw(
    call: Call, status: int, headers: list[tuple[bytes, bytes]], payload: bytes
) -> None:
    keep = [(k, v) for k, v in headers if k in (b"content-type", b"retry-after")]
    keep.append((b"content-length", b"%d" % len(payload)))
    await call.respond(status, keep, payload)


async def error_body(resp: Response, secret: bytes | None, budget: BufferBudget) -> bytes:
    """An upstream's error answer, read whole (at most MAX_ERROR_BODY), key scrubbed; b""
    when it cannot be read."""
    charge = 0
    try:
        payload, charge = await read_whole(resp, MAX_ERROR_BODY, budget)
    except GatewayError:
        return b""
    finally:
        budget.give(charge)
    return scrub(payload, secret)
