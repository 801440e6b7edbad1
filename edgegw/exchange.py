"""One upstream exchange, from the request sent upstream to the last byte sent back.

Every exchange (remote, local, native, proxied) runs in `Exchanges.open()`: a cancel scope
registered with the `DisconnectWatch`, which carries the client's disconnect, the drain of
a shutdown and the exchange's deadline, and tells afterwards which of them ended it
(`Exchange.ending`). Hypercorn reports a client that went away only as `http.disconnect`
from `receive()` (its `send()` never raises), so a watcher task blocked in `receive()`
cancels the scope, and the cancellation closes the upstream connection. Most requests
finish in milliseconds, so watchers are not spawned per request: a sweeper started by
`serve()` gives one to every exchange still running after `WATCH_DELAY_S`. A disconnect is
therefore acted on within 2 x WATCH_DELAY_S, and a fast request pays a dict insert instead
of a nursery and a task (bench/README.md has the cost).

Every stream is written by one `SseWriter`, whose state (head pending / streaming /
ended) decides how a failure ends it: before the head, an error answer; after it, one
final SSE error event and no `[DONE]`, the same for every kind of stream.
"""

from __future__ import annotations

import bisect
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from edgegw.asgi import Receive, Send
from edgegw.errors import (
    CATALOGUE,
    OPENAI_SHAPE,
    ErrorShape,
    GatewayError,
    Headers,
    fail,
    shutting_down,
    upstream_timeout,
)

log = logging.getLogger("edgegw.streaming")

SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
WATCH_DELAY_S = 0.25


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


class Exchange:
    """One exchange under watch: its cancel scope and what ended it."""

    __slots__ = ("receive", "scope", "started", "watcher", "client_gone", "drained")

    def __init__(self, receive: Receive, deadline: float) -> None:
        self.receive = receive
        self.scope = trio.CancelScope(deadline=deadline)
        self.started = trio.current_time()
        self.watcher: trio.CancelScope | None = None
        self.client_gone = False
        self.drained = False

    def allow(self, seconds: float) -> None:
        """From now on the exchange may take `seconds` more (math.inf: no deadline)."""
        self.scope.deadline = trio.current_time() + seconds

    @property
    def ending(self) -> Ending:
        if self.client_gone:
            return Ending.CLIENT_GONE
        if self.drained:
            return Ending.DRAINED
        if self.scope.cancelled_caught:
            return Ending.TIMED_OUT
        return Ending.COMPLETED

    def raise_unless_answerable(
        self, timeout_error: Callable[[], GatewayError] = upstream_timeout
    ) -> bool:
        """After an exchange with nothing sent yet: True when its answer can be sent, False
        when the client is gone; a drained exchange is 503 `shutting_down`, a timed-out one
        the `timeout` error."""
        ending = self.ending
        if ending is Ending.CLIENT_GONE:
            return False
        if ending is Ending.DRAINED:
            raise shutting_down()
        if ending is Ending.TIMED_OUT:
            raise timeout_error()
        return True


class DisconnectWatch:
    """Turns a client's `http.disconnect` into cancelling its exchange (see module doc)."""

    def __init__(self, delay_s: float = WATCH_DELAY_S) -> None:
        self.delay_s = delay_s
        self._active: dict[int, Exchange] = {}
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            while True:
                await trio.sleep(self.delay_s)
                horizon = trio.current_time() - self.delay_s
                for ex in list(self._active.values()):
                    if ex.watcher is None and ex.started <= horizon:
                        ex.watcher = trio.CancelScope()
                        nursery.start_soon(self._watch, ex)

    @staticmethod
    async def _watch(ex: Exchange) -> None:
        assert ex.watcher is not None
        with ex.watcher:
            while True:
                message = await ex.receive()
                if message["type"] == "http.disconnect":
                    ex.client_gone = True
                    ex.scope.cancel()
                    return

    def register(self, ex: Exchange) -> None:
        if self._nursery is None:
            raise RuntimeError("DisconnectWatch.run() is not running")
        self._active[id(ex)] = ex

    def release(self, ex: Exchange) -> None:
        del self._active[id(ex)]
        if ex.watcher is not None:
            ex.watcher.cancel()

    def drain_all(self) -> int:
        """End every exchange still running (the shutdown's drain time is over)."""
        active = list(self._active.values())
        for ex in active:
            ex.drained = True
            ex.scope.cancel()
        return len(active)


class StreamState(enum.Enum):
    HEAD_PENDING = "head_pending"
    STREAMING = "streaming"
    ENDED = "ended"


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
        self.state = StreamState.HEAD_PENDING
        # The route's API: how the error event that ends a failed stream is written.
        self.shape = shape

    async def start(self) -> None:
        await self._send({"type": "http.response.start", "status": 200, "headers": self._headers})
        self.state = StreamState.STREAMING

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
        self.state = StreamState.ENDED
        await self._send({"type": "http.response.body", "body": data, "more_body": False})
        if data and self._outcome.first_chunk_at is None:
            self._outcome.first_chunk_at = trio.current_time()

    async def fail(self, code: str, message: str) -> None:
        """End a started stream with one error event in the API's shape (no `[DONE]`);
        before the head, raise the error as an answer instead."""
        if self.state is StreamState.HEAD_PENDING:
            raise fail(code, message)
        if self.state is StreamState.ENDED:
            return
        self._outcome.error = code
        self.state = StreamState.ENDED
        event = self.shape.event(CATALOGUE[code][0], code, message, self._outcome.events)
        await self._send({"type": "http.response.body", "body": event, "more_body": False})

    async def settle(
        self, ex: Exchange, timeout_error: Callable[[], GatewayError] = upstream_timeout
    ) -> None:
        """After the exchange's scope: end the stream as its ending says (a drained or
        timed-out stream gets its error event; before the head, the error answer)."""
        ending = ex.ending
        self._outcome.client_gone = ending is Ending.CLIENT_GONE
        if ending is Ending.COMPLETED or ending is Ending.CLIENT_GONE:
            return
        if self.state is StreamState.HEAD_PENDING:
            ex.raise_unless_answerable(timeout_error)
        elif ending is Ending.DRAINED:
            await self.fail("shutting_down", "the gateway is shutting down")
        else:
            err = timeout_error()
            await self.fail(err.code, err.message)
