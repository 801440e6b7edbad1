"""Streams handed to the core's relay thread (rust/src/relay_loop.rs, rust/src/relay.rs).

A relayed stream that no Python code must see event by event (no stream check, no traced
content, no keep-alive comments) on a plain upstream connection without a content coding,
answered on the plain listener's own connection (chunked), is relayed by the core: the
thread reads the upstream, frames, splits, taps, scrubs and writes to the client, with no
Python between a read and a write. The request's task waits for the stream's end, then
takes it back and does what the pump would have done at the end: the tap's pieces into the
outcome, the client writes' times into TTFT and the gaps, and a fault's error event written
through the cycle as any other send. The client's head and a whole stream's terminator are
written by the core, with the first and the last events: the head is held from the moment
the stream is claimed (`Handoff.claim`, before the head), and a stream whose body came
whole with the upstream's head is relayed within `start` and taken back at once.

The deadlines stay on Trio's clock: one task (`Handoff.run`) asks the core every `slack`
(the least of the waiting streams', as the pump's, edgegw.pump) which streams are overdue;
a silence of `idle_s` (nothing read, nothing waiting to be read) fails a stream
`upstream_timeout`, a client write blocked for the connection's write stall timeout gives
the client up, as the connection layer's own writes do. A disconnect or a drain cancels the
request's wait; the stream is taken back before anything else runs.
bench/README.md ("The relay in the core") has what it changed.
"""

from __future__ import annotations

import enum

import trio

from edgegw._core import CoreRelay, RelayEnd
from edgegw.answer import GapCounts, Outcome, SseWriter
from edgegw.asgi import Call, Direct
from edgegw.pump import STALLED, RelaySink, Sink
from edgegw.tap import TAPS
from edgegw.upstream import Response
from edgegw.watch import WholeExchange


class Relayed(enum.Enum):
    """What `Handoff.relay` did with a stream."""

    NO = "no"  # it needs the pump: nothing was done
    ENDED = "ended"  # relayed to its end, the end written
    CLIENT_GONE = "client_gone"  # relayed until the client went away
    CANCELLED = "cancelled"  # its wait was cancelled first: the exchange's ending says why


class _Waiter:
    """A request's task waiting for its stream's end; `stalled` when a deadline ended it."""

    __slots__ = ("ended", "slack", "stalled")

    def __init__(self, slack: float) -> None:
        self.ended = trio.Event()
        self.slack = slack
        self.stalled = ""  # "upstream" (silent for idle_s) or "client" (blocked for stall_s)


class Handoff:
    """The process's relay thread and the streams waiting on it. `run` (in the server's
    nursery) wakes each stream's task when the thread reports its end or a deadline passes."""

    __slots__ = ("core", "_waiting", "_nap", "handed")

    def __init__(self) -> None:
        self.core = CoreRelay()
        self._waiting: dict[int, _Waiter] = {}
        self._nap = trio.CancelScope()  # the watch's wait for its next check
        self.handed = 0  # streams relayed by the core since the start

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._reap)
            nursery.start_soon(self._watch)
            task_status.started()

    async def _reap(self) -> None:
        core, waiting = self.core, self._waiting
        while True:
            await trio.lowlevel.wait_readable(core.done_fd)
            for sid in core.finished():
                if (waiter := waiting.get(sid)) is not None:
                    waiter.ended.set()

    async def _watch(self) -> None:
        # One wake-up for every stream's deadlines: a timed wait per stream, woken every slack,
        # was most of this thread's time on paced streams (bench/README.md).
        core, waiting = self.core, self._waiting
        while True:
            with trio.CancelScope() as self._nap:  # `relay` brings a later deadline forward
                if waiting:
                    slack = min(w.slack for w in waiting.values())
                    self._nap.deadline = trio.current_time() + slack
                await trio.sleep_forever()
            for sid, blocked in core.overdue(trio.current_time()):
                if (waiter := waiting.get(sid)) is not None and not waiter.ended.is_set():
                    waiter.stalled = "client" if blocked else "upstream"
                    waiter.ended.set()

    def claim(self, call: Call, resp: Response, sink: Sink) -> tuple[RelaySink, Direct] | None:
        """Before the answer's head: the sink and the connection's writer when the core can
        relay this stream, the client's head then held for the core to write with the first
        events (one write fewer); None when it needs the pump."""
        if (
            not isinstance(sink, RelaySink)
            or sink.check is not None
            or sink.completion is not None
            or not resp.handable
            or (direct := call.direct()) is None
        ):
            return None
        direct.direct_hold_head()
        return sink, direct

    async def relay(
        self,
        direct: Direct,
        resp: Response,
        sink: RelaySink,
        idle_s: float,
        ex: WholeExchange,
    ) -> Relayed:
        """A `claim`ed stream relayed by the core, to its end; its wait for the end is in
        the exchange's `scoped()`, whose cancel (a drain, a disconnect the watch saw before
        the hand-over) leaves the stream's end to the exchange's ending. While the core has
        it, the core watches the client for a hang-up: the exchange gets no watcher task."""
        if (client_fd := direct.direct_fd()) is None:
            return Relayed.NO  # an HTTP/1.0 client (no chunked framing), or gone
        handed = resp.hand_over()
        if handed is None:
            return Relayed.NO
        upstream_fd, parser, first, complete = handed
        started = trio.current_time()
        sid, over = self.core.start(
            upstream_fd, client_fd, parser, direct.direct_head, sink.secret,
            sink.hidden_usage, first, complete, started, idle_s, direct.direct_stall_s,
        )  # fmt: skip
        direct.direct_head_taken()
        self.handed += 1
        waiter = None
        if not over:  # else it came whole with the head and is written already
            waiter = self._waiting[sid] = _Waiter(min(1.0, idle_s / 4))
            self._nap.deadline = min(self._nap.deadline, started + waiter.slack)
        cancelled = False
        try:
            if waiter is not None:
                ex.in_core = True
                with ex.scoped() as scope:
                    await waiter.ended.wait()
                cancelled = scope.cancelled_caught
        finally:
            if waiter is not None:
                ex.in_core = False
                del self._waiting[sid]
            end = self.core.take(sid, parser)
            resp.taken_back()
            assert end is not None
            _settle(end, sink.writer, sink.outcome, started)
        writer = sink.writer
        if end.ended and not end.running:
            # Whole, its terminator written; a cancel after that came too late to matter.
            direct.direct_ended()
            await writer.close()
            return Relayed.ENDED
        if cancelled:
            return Relayed.CANCELLED  # the exchange's settle writes the end it calls for
        if end.running:  # taken back on a deadline
            assert waiter is not None
            if waiter.stalled == "client":
                await direct.direct_stalled()  # raises Cancelled: the connection is given up
            await writer.fail(*STALLED)
        elif end.client_gone:
            direct.direct_gone()
            return Relayed.CLIENT_GONE
        else:  # a fault of the upstream's bytes or its connection: its error event
            await writer.fail(end.code or "internal_error", end.message or "")
        return Relayed.ENDED


def _settle(end: RelayEnd, writer: SseWriter, outcome: Outcome, started: float) -> None:
    """What the core counted, into the outcome as the pump and the writer would have."""
    outcome.events += end.events
    if end.done:
        outcome.done = True
    tap = TAPS[writer.shape.name]
    for piece in end.tapped:
        tap(piece, outcome, "delta")
    if end.first_write_s is not None and outcome.first_chunk_at is None:
        outcome.first_chunk_at = started + end.first_write_s
    if end.last_write_s is not None:
        outcome.last_write_at = started + end.last_write_s
    if end.gaps is not None:  # None before a second write
        gaps = outcome.gaps = outcome.gaps or GapCounts()
        gaps.counts = [a + b for a, b in zip(gaps.counts, end.gaps, strict=True)]
        gaps.total += end.gap_total
