"""What a client got from one exchange and how it was written: the `Outcome` a route
records, how the exchange ended (`Ending`), and the one `SseWriter` of every stream.

Every stream is written by one `SseWriter`, whose state (head pending / streaming /
ended) decides how a failure ends it: before the head, an error answer; after it, one
final SSE error event and no `[DONE]`, the same for every kind of stream.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from edgegw.asgi import Send
from edgegw.errors import (
    CATALOGUE,
    OPENAI_SHAPE,
    ErrorShape,
    GatewayError,
    Headers,
    fail,
    upstream_timeout,
)

SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


@dataclass(slots=True)
class Outcome:
    """What happened to one exchange, for the route's telemetry and logs."""

    status: int = 200
    usage: dict[str, Any] | None = None
    # trio.current_time() when the first body bytes went to the client (time to first token).
    first_chunk_at: float | None = None
    tool_calls: list[str] = field(default_factory=list)
    done: bool = False
    events: int = 0
    # The code of the error that ended a stream after its head was sent.
    error: str | None = None
    client_gone: bool = False
    # The answer's `model` and its choices' finish reasons, when the tap saw them.
    response_model: str | None = None
    finish_reasons: list[str] = field(default_factory=list)
    # The gaps between a stream's writes to the client (inter-token gaps), as histogram
    # counts per GAP_BUCKETS bucket, and their sum; None until a second write.
    gaps: GapCounts | None = None
    last_write_at: float | None = None


# Inter-token gaps: 1 ms doubling to ~16 s (streams send a token every 10-100 ms).
GAP_BUCKETS = tuple(0.001 * 2**k for k in range(15))


class GapCounts:
    """One stream's inter-token gaps, bucketed as they come (no list per token)."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(GAP_BUCKETS) + 1)
        self.total = 0.0

    def add(self, gap: float) -> None:
        self.counts[bisect.bisect_left(GAP_BUCKETS, gap)] += 1
        self.total += gap


class Ending(enum.Enum):
    """What ended an exchange's scope."""

    COMPLETED = "completed"
    CLIENT_GONE = "client_gone"
    DRAINED = "drained"  # the drain time of a shutdown ran out
    TIMED_OUT = "timed_out"  # the exchange's own deadline


# As globals: a member read through its class costs EnumType.__getattr__'s slot on CPython
# 3.11 (edgegw.http1.cycle).
COMPLETED, CLIENT_GONE = Ending.COMPLETED, Ending.CLIENT_GONE
DRAINED, TIMED_OUT = Ending.DRAINED, Ending.TIMED_OUT


class Ended(Protocol):
    """An exchange after its `with` (edgegw.watch), as `SseWriter.settle` reads it."""

    @property
    def ending(self) -> Ending: ...

    def raise_unless_answerable(self, timeout_error: Callable[[], GatewayError]) -> bool: ...


class StreamState(enum.Enum):
    HEAD_PENDING = "head_pending"
    STREAMING = "streaming"
    ENDED = "ended"


HEAD_PENDING, STREAMING, ENDED = StreamState.HEAD_PENDING, StreamState.STREAMING, StreamState.ENDED


class SseWriter:
    """The one writer of every SSE answer; its state says what a failure can still do."""

    __slots__ = ("_send", "_headers", "_outcome", "state", "shape")

    def __init__(
        self,
        send: Send,
        outcome: Outcome,
        extra_headers: Headers = (),
        shape: ErrorShape = OPENAI_SHAPE,
    ) -> None:
        self._send = send
        self._headers = [*SSE_HEADERS, *extra_headers] if extra_headers else SSE_HEADERS
        self._outcome = outcome
        self.state = HEAD_PENDING
        # The route's API: how the error event that ends a failed stream is written.
        self.shape = shape

    async def start(self) -> None:
        await self._send({"type": "http.response.start", "status": 200, "headers": self._headers})
        self.state = STREAMING

    async def write(self, data: bytes) -> None:
        await self._send({"type": "http.response.body", "body": data, "more_body": True})
        outcome = self._outcome
        now = trio.current_time()
        if outcome.first_chunk_at is None:
            outcome.first_chunk_at = now
        else:
            assert outcome.last_write_at is not None
            if outcome.gaps is None:
                outcome.gaps = GapCounts()
            outcome.gaps.add(now - outcome.last_write_at)
        outcome.last_write_at = now

    async def comment(self, data: bytes) -> None:
        """A comment line (a keep-alive): not a token, so neither TTFT nor a gap."""
        await self._send({"type": "http.response.body", "body": data, "more_body": True})

    async def close(self, data: bytes = b"") -> None:
        """The stream's clean end (`data` holds its last events, `[DONE]` included)."""
        self.state = ENDED
        await self._send({"type": "http.response.body", "body": data, "more_body": False})
        if data and self._outcome.first_chunk_at is None:
            self._outcome.first_chunk_at = trio.current_time()

    async def fail(self, code: str, message: str) -> None:
        """End a started stream with one error event in the API's shape (no `[DONE]`);
        before the head, raise the error as an answer instead."""
        if self.state is HEAD_PENDING:
            raise fail(code, message)
        if self.state is ENDED:
            return
        self._outcome.error = code
        self.state = ENDED
        event = self.shape.event(CATALOGUE[code][0], code, message, self._outcome.events)
        await self._send({"type": "http.response.body", "body": event, "more_body": False})

    async def settle(
        self, ex: Ended, timeout_error: Callable[[], GatewayError] = upstream_timeout
    ) -> None:
        """After the exchange's scope: end the stream as its ending says (a drained or
        timed-out stream gets its error event; before the head, the error answer)."""
        ending = ex.ending
        self._outcome.client_gone = ending is CLIENT_GONE
        if ending is COMPLETED or ending is CLIENT_GONE:
            return
        if self.state is HEAD_PENDING:
            ex.raise_unless_answerable(timeout_error)
        elif ending is DRAINED:
            await self.fail("shutting_down", "the gateway is shutting down")
        else:
            err = timeout_error()
            await self.fail(err.code, err.message)
