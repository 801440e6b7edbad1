"""One exchange with an upstream, from the request sent to the last byte sent back.

Every exchange is registered with the `DisconnectWatch` (edgegw.watch), which ends it at
its deadline, when its client is gone or when the drain of a shutdown is over, and tells
afterwards which ended it: /proxy's and the local workers' exchanges in a cancel scope
(`Exchanges.open()`), a whole answer and a stream without one (`WholeExchange`).

Its steps are written once: a whole answer (`read_answer`: open, send, screen, allow, read,
close) and a stream into a sink (`stream`: open, send, screen, refusal or head, the pump of
edgegw.pump or the core's relay thread (edgegw.handoff), close); `forward`, `relay_sse`, the
MCP rounds and /proxy's relays are built on them. Remote streams are relayed as the upstream's bytes, only tapped; an upstream error
becomes the envelope with its status, or is relayed as sent on the native-API routes.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal

import trio

from edgegw.answer import Outcome, SseWriter
from edgegw.asgi import Call
from edgegw.bodies import BufferBudget, read_whole, scrub
from edgegw.errors import GatewayError, Headers, upstream_error
from edgegw.handoff import Handoff, Relayed
from edgegw.pump import RelaySink, Sink, StreamCheck, pump
from edgegw.retry import NO_RETRY, RetryPolicy, send_retrying
from edgegw.tap import TAP_WHOLE_MAX, TAPS, usage_of
from edgegw.upstream import Origin, Response, UpstreamPool, Watch
from edgegw.watch import DisconnectWatch, Exchange, WholeExchange

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
    # The longest a relayed stream's write to the client may block (edgegw.pump's `write_s`).
    write_timeout_s: float = math.inf
    # The core's relay thread, for the streams it can relay (edgegw.handoff); None: the pump.
    handoff: Handoff | None = None

    async def send(
        self, call: Call, up: UpstreamRequest, watch: WholeExchange | None = None
    ) -> Response:
        """The request sent, and sent again as `up.retry` and the policy allow; each attempt
        is its own span with its own connection. `watch`: the exchange without a scope it
        is sent in."""

        # Partials, not closures: no function and cells made a request.
        attempt = partial(
            send_traced,
            self.pool,
            call,
            up.origin,
            up.method,
            up.target,
            up.headers,
            up.body,
            watch,
        )
        if up.retry == "none" or self.retry.attempts <= 1:
            return await attempt()
        return await send_retrying(
            attempt,
            self.retry,
            refused_only=up.retry == "refused",
            on_retry=partial(_retrying, up),
            nap=trio.sleep if watch is None else watch.nap,
            started=None if watch is None else watch.started,
        )

    def open(self, call: Call, timeout_s: float) -> Exchange:
        """The scope of one exchange (`with`); the deadline starts `timeout_s` from now."""
        return Exchange(call.receive, trio.current_time(), timeout_s, self.watch)

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
            if ok and call.trace_content is not None:
                call.trace_content.answer(payload)
            headers = [
                (b"content-type", resp.header(b"content-type") or b"application/json"),
                (b"content-length", b"%d" % len(payload)),
            ]
            if raw_errors and resp.status in (429, 503) and (retry := resp.header(b"retry-after")):
                headers.append((b"retry-after", retry))
            headers += response_headers
            if call.priced is not None and outcome.usage:
                headers += call.priced(outcome.usage)
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
        started = self.watch.now()
        try:
            with WholeExchange(call.receive, started, self.first_byte_timeout_s, self.watch) as ex:
                resp = await self.send(call, up, ex)
                try:
                    if up.screen is not None:
                        up.screen(resp)
                    if not resp.arrived:  # moving the deadline for nothing: 3 % of an answer
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
    ) -> WholeExchange:
        """The stream operation, its steps in this order: open (the first-byte deadline),
        send, screen; an answer that is no stream (not 2xx) goes to `refused`, its body
        read within the idle deadline; else `start` (the head to the client) and the pump
        into `sink` (or the core's relay, for a `RelaySink` it can take), silence bounded
        per piece; the response closed. The exchange is returned for the caller's writer
        to settle. It has no cancel scope of its own (`WholeExchange`): a stream the core
        relays whole at the hand-over waits for nothing after its head, and the pump or
        the core's relay wait in a scope of the exchange's (`scoped`)."""
        with WholeExchange(
            call.receive, self.watch.now(), self.first_byte_timeout_s, self.watch
        ) as ex:
            resp = await self.send(call, up, ex)
            try:
                if up.screen is not None:
                    up.screen(resp)
                if not 200 <= resp.status < 300:
                    ex.allow(self.idle_timeout_s)
                    await refused(resp)
                    return ex
                ex.allow(math.inf)  # from here on only silence is bounded
                ex.detach()
                handoff = self.handoff
                claimed = None if handoff is None else handoff.claim(call, resp, sink)
                await start(resp)
                try:
                    relayed = Relayed.NO
                    if handoff is not None and claimed is not None:
                        relay_sink, direct = claimed
                        relayed = await handoff.relay(
                            direct, resp, relay_sink, self.idle_timeout_s, ex
                        )
                    if relayed is Relayed.NO:
                        with ex.scoped():
                            await pump(
                                resp,
                                sink,
                                self.idle_timeout_s,
                                write_s=self.write_timeout_s,
                                watched=ex,
                            )
                    elif relayed is Relayed.ENDED:
                        ex.answered()
                    elif relayed is Relayed.CLIENT_GONE:
                        ex.client_gone = True
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
        sink = RelaySink(writer, outcome, up.secret, up.hidden_usage, call.trace_content, check)
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


def _retrying(up: UpstreamRequest, reason: str) -> None:
    log.info("retrying %s %s after %s", up.origin.host, up.target[:64].decode("latin-1"), reason)


async def send_traced(
    pool: UpstreamPool,
    call: Call,
    origin: Origin,
    method: bytes,
    target: bytes,
    headers: Headers | list[tuple[bytes, bytes]],
    body: bytes,
    watch: Watch | None = None,
) -> Response:
    """`pool.send` with the request's id, and with tracing on, one CLIENT span for the
    attempt (from sending to the response head: its duration is the time to first byte)
    whose `traceparent` goes upstream, and a `connect` child for a connection it opened."""
    sent = [*headers, (b"x-request-id", call.request_id.encode())]
    trace = call.trace
    if trace is None:
        if call.trace_context:
            sent += call.trace_context
        return await pool.send(origin, method, target, sent, body, None, watch)
    span, context, on_connect = trace.attempt(method, target, origin.host, origin.port)
    sent += context
    opened = pool.open_connections
    try:
        resp = await pool.send(origin, method, target, sent, body, on_connect, watch)
    except BaseException as e:
        span.fail(e)
        span.end()
        raise
    trace.attempt_done(span, resp.status, pool.open_connections > opened)
    return resp


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
