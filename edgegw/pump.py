"""The one pump of an upstream SSE stream, and the sinks it feeds.

`pump(resp, sink, idle_s)` reads the upstream's pieces (decoded), splits them into whole
events with the Rust `SseSplitter` (`feed_tapped`: their count, whether `[DONE]` came, the
data of the events a tap reads), and hands the sink only whole events, so a stream cut in
the middle of one ends with the error event on a line of its own. It ends the stream
through the sink: `fail` on a transport error, a protocol fault, silence past `idle_s`
(`stalled`, by default `upstream_timeout`) or an end in the middle of an event
(`upstream_stream_truncated`), else `end`.

Sinks: `RelaySink` here, a stream relayed to the client as the upstream's bytes, tapped for
usage (edgegw.exchange's `relay_sse` and the guarded /proxy); edgegw.mcp.models'
`RoundSink`, one round of an MCP tool loop folded into the client's one stream; and
edgegw.local.serve's `SieSink`, a worker's stream rewritten into the SIE shapes.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

import trio

from edgegw._core import SseSplitter, UpstreamProtocolError, without_usage
from edgegw.answer import Outcome, SseWriter
from edgegw.bodies import scrub, stream_decoder
from edgegw.errors import GatewayError
from edgegw.tap import TAPS, has_usage
from edgegw.upstream import Response

if TYPE_CHECKING:
    from edgegw.telemetry.tracing import Completion
    from edgegw.watch import Watched


class StreamCheck(Protocol):
    """A look at a stream's whole events before they are relayed (the guardrails'
    post_call, edgegw.guardrails.route.StreamGuard): None relays them; an error ends the
    stream with its error event instead, and nothing more is relayed."""

    async def events(self, data: bytes) -> GatewayError | None: ...

    async def end(self) -> GatewayError | None: ...


class Sink(Protocol):
    # Whether the client gets the upstream's [DONE] when the sink takes it (not a round's
    # of an MCP loop, held back): a hang-up after that ends nothing (`Watched.delivered`).
    passes_done: ClassVar[bool]

    async def events(
        self, data: bytes, n: int, done: bool, tapped: list[bytes], last: bool
    ) -> bool:
        """`n` whole events (`data`, their bytes), `done` when `[DONE]` was among them,
        `tapped` the data of those a tap reads, `last` when the upstream's stream is over
        with them; False ends the pump (the sink ended the stream)."""

    async def fail(self, code: str, message: str) -> None: ...

    async def end(self) -> None:
        """The upstream's stream ended whole."""


@dataclass(frozen=True, slots=True)
class KeepAlive:
    """While the upstream is silent, `send` every `every_s` (a comment line to the client,
    for proxies with idle limits), until the pump's `idle_s` of silence fails the stream."""

    every_s: float
    send: Callable[[], Awaitable[None]]


STALLED = ("upstream_timeout", "the upstream stream stalled")


async def pump(
    resp: Response,
    sink: Sink,
    idle_s: float,
    *,
    first: bytes = b"",
    keepalive: KeepAlive | None = None,
    stalled: tuple[str, str] = STALLED,
    write_s: float = math.inf,
    watched: Watched | None = None,
) -> None:
    """`first`: a piece of the stream already read (a local worker's, read to see it is no
    overload refusal); `stalled`: the code and message of a silence past `idle_s`; `write_s`:
    the longest a sink's write may block before the connection layer gives the client up
    (SERVER_WRITE_STALL_TIMEOUT, and a stream check's own bound); `watched`: the exchange,
    told once the sink took the events up to [DONE] (`Watched.delivered`)."""
    splitter = SseSplitter()
    decoder = stream_decoder(resp.header(b"content-encoding"))
    held = b""  # bytes of an event not yet complete
    done = False
    unread = first
    # One scope for the stream's silences, rather than a `fail_after` a piece: a scope a
    # relayed event, kept alive in trio's deadline heap until pruned, was a tenth of what each
    # young-generation collection walked. Where a sink's blocked write gives up first
    # (write_s <= idle_s + slack) the deadline stays set through the writes and moves only
    # when less than idle_s is left, at most every `slack`: a silence then fails the stream
    # after idle_s to idle_s + slack. Setting it twice an event was 17 % of a paced event's
    # instructions (bench/README.md). (A write still draining, slowly, past that deadline
    # ends the stream as a silence.) Otherwise it bounds the reads alone, set before each.
    slack = min(1.0, idle_s / 4)
    lazy = write_s <= idle_s + slack
    held_s = max(idle_s, write_s)  # what a write must have left when it starts
    # The run's clock, its own method: trio.current_time() is three Python calls, twice a read.
    clock = trio.lowlevel.current_clock().current_time
    stall = trio.CancelScope(deadline=clock() + idle_s + slack if lazy else math.inf)
    with stall:
        while True:
            now = clock()
            if not lazy or stall.deadline - now < idle_s:
                stall.deadline = now + idle_s + (slack if lazy else 0.0)
            try:
                if unread:
                    raw, unread = unread, b""
                elif keepalive is None:
                    raw = await resp.receive_chunk()
                else:
                    raw = await _receive_keeping_alive(resp, keepalive)
                chunk = decoder.feed(raw) if raw else None
            except GatewayError as e:
                stall.deadline = math.inf
                await sink.fail(e.code, e.message)
                return
            if not lazy:
                stall.deadline = math.inf
            elif stall.deadline - (now := clock()) < held_s:  # a long silence
                stall.deadline = now + idle_s + slack
            if chunk is None:
                break
            if not chunk:
                continue
            try:
                # Only the events a tap reads come back as objects (a few a stream).
                n, piece_done, tapped = splitter.feed_tapped(chunk)
            except UpstreamProtocolError as e:
                await sink.fail(e.code, str(e))
                return
            done = done or piece_done
            data = held + chunk if held else chunk
            pending = splitter.pending
            if pending:
                data, held = data[: len(data) - pending], data[len(data) - pending :]
            else:
                held = b""
            last = done and not held and resp.complete
            if not await sink.events(data, n, piece_done, tapped, last):
                return
            if piece_done and watched is not None and sink.passes_done:
                watched.delivered = True
    if stall.cancelled_caught:
        await sink.fail(*stalled)
    elif splitter.finish() and not done:
        await sink.fail("upstream_stream_truncated", "the upstream stream ended mid-event")
    else:
        await sink.end()


async def _receive_keeping_alive(resp: Response, keepalive: KeepAlive) -> bytes:
    """The next piece, `keepalive.send` after each `every_s` of silence; the pump's own
    deadline still bounds the whole silence. (Cancelling `receive_chunk` loses nothing: its
    only checkpoint is the socket read.)"""
    while True:
        with trio.move_on_after(keepalive.every_s):
            return await resp.receive_chunk()
        await keepalive.send()


@dataclass(slots=True)
class RelaySink:
    """The upstream's events relayed to the client as they came: tapped for usage into
    `outcome`, usage the gateway asked for and the client did not (`hidden_usage`) withheld,
    judged by `check` before they go, fed to `completion` (TELEMETRY_TRACING_CONTENT), the
    provider's key scrubbed."""

    passes_done: ClassVar[bool] = True
    writer: SseWriter
    outcome: Outcome
    secret: bytes | None
    hidden_usage: bool = False
    completion: Completion | None = None
    check: StreamCheck | None = None

    async def events(
        self, data: bytes, n: int, done: bool, tapped: list[bytes], last: bool
    ) -> bool:
        outcome, writer, secret = self.outcome, self.writer, self.secret
        outcome.events += n
        if done:
            outcome.done = True
        tap = TAPS[writer.shape.name]
        withheld = False
        for piece in tapped:
            tap(piece, outcome, "delta")
            withheld = withheld or (self.hidden_usage and has_usage(piece))
        if withheld:
            # Once a stream: its whole events split again, to be written without it.
            data = without_usage(data)
        if not data:
            return True
        if self.check is not None:
            stop = await self.check.events(scrub(data, secret))
            if stop is not None:
                outcome.events -= n  # withheld: the error event counts what went out
                await writer.fail(stop.code, stop.message)
                return False
        if self.completion is not None:
            for event in SseSplitter().feed(scrub(data, secret)):
                self.completion.delta(event.data)
        # Whole events: a key quoted in one cannot be split across two sends.
        if last:
            # The last events and the terminator in one client send.
            await writer.close(scrub(data, secret))
            return False
        await writer.write(scrub(data, secret))
        return True

    async def fail(self, code: str, message: str) -> None:
        await self.writer.fail(code, message)

    async def end(self) -> None:
        if self.check is not None and (stop := await self.check.end()):
            await self.writer.fail(stop.code, stop.message)
            return
        await self.writer.close()
