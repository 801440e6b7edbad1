"""Streams handed to the core's relay thread (rust/src/relay_loop.rs, rust/src/relay.rs).

A relayed stream that no Python code must see event by event (no stream check, no traced
content, no keep-alive comments) on a plain upstream connection without a content coding,
answered on the plain listener's own connection (chunked), is relayed by the core: the
thread reads the upstream, frames, splits, taps, scrubs and writes to the client, with no
Python between a read and a write. The request's task waits for the stream's end, then
takes it back and does what the pump would have done at the end: the tap's pieces into the
outcome, the client writes' times into TTFT and the gaps, and the stream's last words (the
terminator, or the error event) written through the cycle as any other send.

The deadlines stay here, on Trio's clock: every `slack` (as the pump's, edgegw.pump) the
task reads the stream's counters; a silence of `idle_s` (nothing read, nothing waiting to
be read) fails it `upstream_timeout`, a client write blocked for the connection's write
stall timeout gives the client up, as the connection layer's own writes do. A disconnect
or a drain cancels the wait; the stream is taken back before anything else runs.
bench/README.md ("The relay in the core") has what it changed.
"""

from __future__ import annotations

import enum

import trio

from edgegw._core import CoreRelay, RelayEnd
from edgegw.answer import GapCounts, Outcome, SseWriter
from edgegw.asgi import Call
from edgegw.pump import STALLED, RelaySink
from edgegw.tap import TAPS
from edgegw.upstream import Response


class Relayed(enum.Enum):
    """What `Handoff.relay` did with a stream."""

    NO = "no"  # it needs the pump: nothing was done
    ENDED = "ended"  # relayed to its end, the end written
    CLIENT_GONE = "client_gone"  # relayed until the client went away


class Handoff:
    """The process's relay thread and the streams waiting on it. `run` (in the server's
    nursery) wakes each stream's task when the thread reports its end."""

    __slots__ = ("core", "_waiting", "handed")

    def __init__(self) -> None:
        self.core = CoreRelay()
        self._waiting: dict[int, trio.Event] = {}
        self.handed = 0  # streams relayed by the core since the start

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        core, waiting = self.core, self._waiting
        task_status.started()
        while True:
            await trio.lowlevel.wait_readable(core.done_fd)
            for sid in core.finished():
                if (event := waiting.get(sid)) is not None:
                    event.set()

    async def relay(self, call: Call, resp: Response, sink: RelaySink, idle_s: float) -> Relayed:
        """The stream relayed by the core, to its end, when no Python must see its events."""
        if sink.check is not None or sink.completion is not None:
            return Relayed.NO
        direct = call.direct()
        if direct is None or (client_fd := direct.direct_fd()) is None:
            return Relayed.NO
        handed = resp.hand_over()
        if handed is None:
            return Relayed.NO
        upstream_fd, parser, first, complete = handed
        core = self.core
        sid = core.start(
            upstream_fd, client_fd, parser, sink.secret, sink.hidden_usage, first, complete
        )
        self.handed += 1
        started = trio.current_time()
        ended = self._waiting[sid] = trio.Event()
        stall_s = direct.direct_stall_s
        slack = min(1.0, idle_s / 4)
        stalled = ""
        try:
            seen = None
            since = started
            while True:
                with trio.move_on_after(slack):
                    await ended.wait()
                    break
                progress = core.progress(sid)
                assert progress is not None  # only this task takes it out
                now = trio.current_time()
                reads, writes, blocked, ready = progress
                if ready or (reads, writes, blocked) != seen:
                    seen, since = (reads, writes, blocked), now
                elif now - since >= (stall_s if blocked else idle_s):
                    stalled = "client" if blocked else "upstream"
                    break
        finally:
            del self._waiting[sid]
            end = core.take(sid, parser)
            resp.taken_back()
            assert end is not None
            _settle(end, sink.writer, sink.outcome, started)
        writer = sink.writer
        if end.running:  # taken back on a deadline
            if stalled == "client":
                await direct.direct_stalled()  # raises Cancelled: the connection is given up
            await writer.fail(*STALLED)
        elif end.client_gone:
            direct.direct_gone()
            return Relayed.CLIENT_GONE
        elif end.code is not None:
            await writer.fail(end.code, end.message or "")
        else:
            await writer.close()
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
